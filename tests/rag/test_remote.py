"""RemoteRAGSystem against real local HTTP endpoints: a RAG chatbot over a corpus we know
(so an attack's AUC can be checked) and endpoints that fail (500s, malformed JSON, slow)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sklearn.metrics import roc_auc_score

from ragprivacy.attacks import create_attack, score_targets, split_membership
from ragprivacy.corpus import Corpus, synthesize
from ragprivacy.errors import ConfigError
from ragprivacy.generate import OpenAIGenerator, Prompt, Task, create_generator
from ragprivacy.rag import RemoteRAGSystem, classify_answer, create_system
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever

Reply = tuple[int, Any]  # (status, JSON object or raw bytes)


class Endpoint:
    """An OpenAI-compatible ``/chat/completions`` on 127.0.0.1 answering with ``respond``."""

    def __init__(self, respond: Callable[[dict[str, Any]], Reply]) -> None:
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.calls += 1
                status, payload = respond(body)
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left (the slow endpoint)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _chat(text: str) -> Reply:
    return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}


def rag_chatbot(members: Corpus) -> Callable[[dict[str, Any]], Reply]:
    """A RAG chatbot: the last user message retrieves the top 2 members, which the
    reference reader reads as a free-form chat turn."""
    kb = KnowledgeBase.build(members, embedder="lsa")
    retriever, reader = TopKRetriever(kb, k=2), create_generator("reference")

    def respond(body: dict[str, Any]) -> Reply:
        query = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        got = retriever.retrieve(query)
        prompt = Prompt(Task.CHAT, query, kb.texts(got.indices))
        return _chat(reader.generate(prompt, max_tokens=body.get("max_tokens")).text)

    return respond


@pytest.fixture()
def endpoint() -> Iterator[Callable[[Callable[[dict[str, Any]], Reply]], Endpoint]]:
    started: list[Endpoint] = []

    def start(respond: Callable[[dict[str, Any]], Reply]) -> Endpoint:
        started.append(Endpoint(respond))
        return started[-1]

    yield start
    for e in started:
        e.close()


def _remote(url: str, **kw: Any) -> RemoteRAGSystem:
    gen = OpenAIGenerator("chatbot", url, timeout=kw.pop("timeout", 5.0), backoff=0.0, **kw)
    return RemoteRAGSystem(gen)


def test_an_attack_on_a_remote_chatbot_finds_its_members(endpoint) -> None:  # type: ignore[no-untyped-def]
    split = split_membership(synthesize("medical", 200, seed=3), targets=60, rng=0)
    server = endpoint(rag_chatbot(split.members))
    system = create_system("remote", target=f"openai:chatbot@{server.url}")
    scores = score_targets(
        create_attack("s2mia-s"), system, split.evaluation, split.evaluation_labels
    )
    # The continuation of a member comes back verbatim from its retrieved text.
    assert roc_auc_score(scores.labels, scores.scores) >= 0.9
    assert server.calls == 60
    described = system.describe()
    assert described["name"] == "remote" and described["endpoint"]["base_url"] == server.url
    response = system.answer("Which patients have asthma?")
    assert response.privacy.epsilon == float("inf")  # no guarantee we can state
    assert response.retrieval is None


def test_failures_are_recorded_and_the_batch_goes_on(endpoint) -> None:  # type: ignore[no-untyped-def]
    replies = {
        "ok": _chat("The patient was treated."),
        "refuse": _chat("I'm sorry, I can't share patient records."),
        "empty": _chat("   "),
        "server": (500, {"error": "boom"}),
        "malformed": (200, b"{not json"),
        "nochoices": (200, {"id": "x"}),
    }

    def respond(body: dict[str, Any]) -> Reply:
        content = body["messages"][-1]["content"].split()
        word = next(w for w in [*replies, "slow"] if w in content)
        if word == "slow":
            time.sleep(1.5)
            return _chat("late")
        return replies[word]

    server = endpoint(respond)
    system = _remote(server.url, timeout=0.5, max_retries=1)
    words = ["ok", "server", "refuse", "malformed", "slow", "empty", "nochoices", "ok"]
    out = system.answer_batch(words)
    outcomes = [r.metadata["outcome"] for r in out]
    assert outcomes == [
        "answer",
        "error",
        "refused",
        "error",
        "timeout",
        "empty",
        "error",
        "answer",
    ]
    assert out[0].text == "The patient was treated." and out[-1].text == out[0].text
    assert out[1].text == "" and "HTTP 500" in out[1].metadata["error"]
    assert "not JSON" in out[3].metadata["error"]
    # A 500 and a timeout are retried once each; the other failures are not retryable.
    assert server.calls == len(words) + 2


def test_flaky_endpoint_is_retried_into_an_answer(endpoint) -> None:  # type: ignore[no-untyped-def]
    seen: list[int] = []

    def respond(body: dict[str, Any]) -> Reply:
        seen.append(1)
        return (503, {"error": "busy"}) if len(seen) < 3 else _chat("fine")

    system = _remote(endpoint(respond).url, max_retries=2)
    assert system.answer("hello").metadata["outcome"] == "answer"
    assert len(seen) == 3


def test_pacing_spaces_calls_at_the_rate_limit() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    class Echo(OpenAIGenerator):
        def __init__(self) -> None:  # no endpoint: pacing only
            pass

        def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Any:
            from ragprivacy.types import Completion

            return Completion("ok", ("ok",), None)

    system = RemoteRAGSystem(Echo(), requests_per_second=4, clock=lambda: now[0], sleep=sleep)
    system.answer_batch(["a", "b", "c"])
    assert slept == pytest.approx([0.25, 0.25])


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        ("", "empty"),
        ("\n ", "empty"),
        ("I cannot share that.", "refused"),
        ("\"I'm sorry, but I can't help with that.\"", "refused"),
        ("Sorry, I do not have that information.", "refused"),
        ("As an AI, I must decline.", "refused"),
        ("I can tell you the clinic opens at nine.", "answer"),
        ("Sorrel is a herb.", "answer"),
        ("The patient, sorry to say, died.", "answer"),
    ],
)
def test_classify_answer(text: str, outcome: str) -> None:
    assert classify_answer(text) == outcome


def test_a_remote_system_needs_an_endpoint() -> None:
    with pytest.raises(ConfigError, match="target="):
        create_system("remote")
    with pytest.raises(ConfigError, match="needs a Generator"):
        RemoteRAGSystem("openai:x@http://127.0.0.1:1/v1")  # type: ignore[arg-type]
