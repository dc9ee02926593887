"""RemoteRAGSystem against real local HTTP endpoints: a RAG chatbot over a corpus we know
(so an attack's AUC can be checked) and endpoints that fail (500s, malformed JSON, slow)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sklearn.metrics import roc_auc_score
from tests._chat_endpoint import Endpoint, Reply, chat_reply, rag_chatbot

from ragprivacy.attacks import create_attack, score_targets, split_membership
from ragprivacy.corpus import synthesize
from ragprivacy.errors import ConfigError
from ragprivacy.generate import OpenAIGenerator, Prompt
from ragprivacy.rag import RemoteRAGSystem, classify_answer, create_system


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
        "ok": chat_reply("The patient was treated."),
        "refuse": chat_reply("I'm sorry, I can't share patient records."),
        "empty": chat_reply("   "),
        "server": (500, {"error": "boom"}),
        "malformed": (200, b"{not json"),
        "nochoices": (200, {"id": "x"}),
    }

    def respond(body: dict[str, Any]) -> Reply:
        content = body["messages"][-1]["content"].split()
        word = next(w for w in [*replies, "slow"] if w in content)
        if word == "slow":
            time.sleep(1.5)
            return chat_reply("late")
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
        return (503, {"error": "busy"}) if len(seen) < 3 else chat_reply("fine")

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
