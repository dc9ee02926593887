"""The ``openai:MODEL@BASE_URL`` backend against a loopback server started by the test
(stdlib ``http.server`` speaking the chat/completions and completions formats)."""

from __future__ import annotations

import json
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ragprivacy.errors import BackendError, ConfigError, GeneratorUnavailableError
from ragprivacy.generate import (
    OpenAIGenerator,
    Prompt,
    Task,
    create_generator,
    join_completions,
)

KEY = "sk-test-0123456789abcdef"
KEY_ENV = "RAGPRIVACY_TEST_OPENAI_KEY"
ANSWER = ["Vel", "mora", "."]
ANSWER_LP = [-0.1, -0.2, -0.05]
TOP = {"Vel": -0.5, "Oslo": -1.5, "Paris": -2.5}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        self.fail_next = 0
        self.echo_supported = True
        self.delay = 0.0
        self.retry_after: str | None = None  # set: failures are 429 with this Retry-After
        self.error_code: str | None = None  # the 429's error code
        self.refuse_logprobs = False  # set: a request asking for them is a 400
        self.refuse_all = False  # set: every request is a 400 (a prompt too long, say)
        self.stream_error = False  # set: a stream's second event is an error event
        self.stream_cut = False  # set: a stream ends without its [DONE] event
        self.lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up; nothing to report


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        srv = self.server
        with srv.lock:
            srv.requests.append((self.path, dict(self.headers), body))
            failing = srv.fail_next > 0
            if failing:
                srv.fail_next -= 1
        if failing and srv.retry_after is not None:
            error = {"message": "slow down", "code": srv.error_code}
            self._send(429, {"error": error}, {"Retry-After": srv.retry_after})
            return
        if failing:
            self._send(500, {"error": {"message": "temporarily overloaded"}})
            return
        if srv.delay:
            time.sleep(srv.delay)
        if srv.refuse_all:
            self._send(400, {"error": {"message": "maximum context length exceeded"}})
            return
        if srv.refuse_logprobs and ("logprobs" in body or "top_logprobs" in body):
            self._send(400, {"error": {"message": "log-probabilities are not allowed"}})
            return
        auth = self.headers.get("Authorization", "")
        if auth != f"Bearer {KEY}":
            # Like some real servers, echo the key that was refused.
            message = f"Incorrect API key provided: {auth.removeprefix('Bearer ')}"
            self._send(401, {"error": {"message": message}})
            return
        if body.get("stream"):
            self._stream(body)
        elif self.path == "/v1/chat/completions":
            self._send(200, self._chat(body))
        elif self.path == "/v1/completions":
            if body.get("echo") and not srv.echo_supported:
                self._send(400, {"error": {"message": "echo is not supported"}})
                return
            self._send(200, self._completions(body))
        else:
            self._send(404, {"error": {"message": "no such route"}})

    def _stream(self, body: dict[str, Any]) -> None:
        """OpenAI's server-sent events: one event per token, then ``[DONE]`` (HTTP/1.0:
        the body ends when the connection closes)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chat = self.path == "/v1/chat/completions"
        n = min(int(body["max_tokens"]), len(ANSWER))
        for i, (t, lp) in enumerate(zip(ANSWER[:n], ANSWER_LP[:n])):
            if i == 1 and self.server.stream_error:
                self._event({"error": {"message": "the model crashed on this prompt"}})
                return
            if chat:
                choice: dict[str, Any] = {"index": 0, "delta": {"content": t}}
                if body.get("logprobs"):
                    choice["logprobs"] = {"content": [{"token": t, "logprob": lp}]}
            else:
                choice = {"index": 0, "text": t}
                if body.get("logprobs"):
                    choice["logprobs"] = {"tokens": [t], "token_logprobs": [lp]}
            self._event({"choices": [choice]})
        self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if not self.server.stream_cut:
            self.wfile.write(b"data: [DONE]\n\n")

    def _event(self, event: dict[str, Any]) -> None:
        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.flush()

    @staticmethod
    def _top(k: int) -> list[dict[str, Any]]:
        return [{"token": t, "logprob": lp} for t, lp in list(TOP.items())[:k]]

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        n = min(int(body["max_tokens"]), len(ANSWER))
        content = [
            {"token": t, "logprob": lp, "top_logprobs": self._top(body.get("top_logprobs", 0))}
            for t, lp in zip(ANSWER[:n], ANSWER_LP[:n])
        ]
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(ANSWER[:n])},
                    "logprobs": {"content": content} if body.get("logprobs") else None,
                    "finish_reason": "stop",
                }
            ],
        }

    def _completions(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        k = int(body.get("logprobs") or 0)
        if body.get("echo"):
            # Echo: the prompt split at spaces (a toy tokenizer), then one new token.
            tokens, offsets, pos = [], [], 0
            for piece in prompt.split(" "):
                tok = piece if not tokens else " " + piece
                tokens.append(tok)
                offsets.append(pos)
                pos += len(tok)
            values: list[float | None] = [None] + [-float(i) / 10 for i in range(1, len(tokens))]
            tokens.append("!")
            offsets.append(pos)
            values.append(-3.0)
            lp = {"tokens": tokens, "token_logprobs": values, "text_offset": offsets}
            return {"choices": [{"text": prompt + "!", "logprobs": lp}]}
        top = [dict(list(TOP.items())[:k])]
        lp = {"tokens": ["Vel"], "token_logprobs": [-0.5], "top_logprobs": top, "text_offset": [0]}
        return {"choices": [{"text": "Vel", "logprobs": lp}]}


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


@pytest.fixture
def base_url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.fixture
def gen(base_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIGenerator]:
    monkeypatch.setenv(KEY_ENV, KEY)
    g = OpenAIGenerator(
        "toy-model", base_url, api_key_env=KEY_ENV, top_logprobs=3, sleep=lambda s: None
    )
    yield g
    g.close()


PROMPT = Prompt(
    Task.ANSWER,
    "Where was Marta Olsen born?",
    ("Marta Olsen was born in Velmora.",),
    instruction="Do not repeat the context.",
)


def test_chat_generation_with_logprobs(gen: OpenAIGenerator, server: _Server) -> None:
    out = gen.generate(PROMPT)
    assert out.text == "Velmora."
    assert list(out.tokens) == ANSWER
    assert list(out.logprobs or ()) == ANSWER_LP
    path, headers, body = server.requests[-1]
    assert path == "/v1/chat/completions"
    assert body["logprobs"] is True and "top_logprobs" not in body  # the chosen tokens
    assert body["model"] == "toy-model" and body["max_tokens"] == 64
    assert body["messages"][0] == {"role": "system", "content": "Do not repeat the context."}
    assert body["messages"][1]["role"] == "user"
    assert "Do not repeat" not in body["messages"][1]["content"]
    assert "Question: Where was Marta Olsen born?" in body["messages"][1]["content"]
    assert headers["Authorization"] == f"Bearer {KEY}"
    assert len(gen.generate(PROMPT, max_tokens=2).tokens) == 2


def test_completions_mode(base_url: str, monkeypatch: pytest.MonkeyPatch, server: _Server) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    g = OpenAIGenerator("toy-model", base_url, api_key_env=KEY_ENV, mode="completions")
    out = g.generate(PROMPT)
    g.close()
    assert out.text == "Vel" and out.logprobs == (-0.5,)
    assert server.requests[-1][2]["prompt"] == PROMPT.render()


def test_next_token_distribution_is_renormalised_top_k(
    gen: OpenAIGenerator, server: _Server
) -> None:
    dist = gen.next_token_distribution(PROMPT)
    assert dist.tokens == ("Vel", "Oslo", "Paris")
    total = sum(math.exp(v) for v in TOP.values())
    assert dist.probs == pytest.approx([math.exp(v) / total for v in TOP.values()])
    assert server.requests[-1][2]["max_tokens"] == 1
    assert server.requests[-1][2]["top_logprobs"] == 3
    with_prefix = gen.next_token_distribution(PROMPT, ["Vel"])
    assert sum(with_prefix.probs) == pytest.approx(1.0)
    path, _, body = server.requests[-1]
    assert path == "/v1/completions"
    assert body["prompt"].endswith("Answer:Vel")


def test_score_uses_echo(gen: OpenAIGenerator, server: _Server) -> None:
    out = gen.score(PROMPT, " in Velmora")
    assert out.text == " in Velmora"
    assert list(out.tokens) == [" in", " Velmora"]
    n = len(PROMPT.render().split(" "))
    assert list(out.logprobs or ()) == pytest.approx([-(n) / 10, -(n + 1) / 10])
    assert server.requests[-1][2]["echo"] is True


def test_score_without_echo_support_says_so(gen: OpenAIGenerator, server: _Server) -> None:
    server.echo_supported = False
    with pytest.raises(BackendError, match="echo"):
        gen.score(PROMPT, " in Velmora")


def test_retries_server_errors_with_backoff(
    base_url: str, server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    sleeps: list[float] = []
    g = OpenAIGenerator(
        "toy-model", base_url, api_key_env=KEY_ENV, backoff=0.25, max_retries=3, sleep=sleeps.append
    )
    server.fail_next = 2
    assert g.generate(PROMPT).text == "Velmora."
    assert sleeps == [0.25, 0.5]
    assert len(server.requests) == 3
    server.fail_next = 10
    with pytest.raises(BackendError, match="failed 4 time"):
        g.generate(PROMPT)
    g.close()


def test_retry_after_is_honoured_when_shorter_than_the_cap(
    base_url: str, server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    sleeps: list[float] = []
    g = OpenAIGenerator(
        "toy-model", base_url, api_key_env=KEY_ENV, backoff=4.0, max_retries=3, sleep=sleeps.append
    )
    server.retry_after, server.fail_next = "0.75", 1
    assert g.generate(PROMPT).text == "Velmora."
    server.retry_after, server.fail_next = "3600", 1  # capped at 30 s
    assert g.generate(PROMPT).text == "Velmora."
    server.retry_after, server.fail_next = "soon", 1  # unparsable: own backoff
    assert g.generate(PROMPT).text == "Velmora."
    assert sleeps == [0.75, 30.0, 4.0]
    g.close()


def test_a_spent_quota_or_budget_is_not_retried(
    base_url: str, server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 429 saying a quota (OpenAI) or a window's budget (a ragprivacy service) is spent
    fails at once: a retry within the call cannot succeed, it would only wait."""
    monkeypatch.setenv(KEY_ENV, KEY)
    sleeps: list[float] = []
    g = OpenAIGenerator("m", base_url, api_key_env=KEY_ENV, max_retries=3, sleep=sleeps.append)
    for code in ("insufficient_quota", "budget_exhausted"):
        server.retry_after, server.error_code, server.fail_next = "3600", code, 1
        with pytest.raises(BackendError, match=f"HTTP 429 \\({code}\\).*cannot help"):
            g.generate(PROMPT)
    assert sleeps == [] and len(server.requests) == 2
    server.error_code, server.fail_next = "rate_limit_exceeded", 1  # a rate: retried
    assert g.generate(PROMPT).text == "Velmora." and sleeps == [30.0]
    g.close()


def test_retry_policy_is_stated_and_recorded(base_url: str) -> None:
    g = OpenAIGenerator("toy-model", base_url)
    assert (g.timeout, g.max_retries) == (30.0, 2)
    policy = g.config()["retry_policy"]
    # two retries after 0.5 s and 1 s, three attempts of 30 s: about 92 s at most
    assert "at most ~92 s per call" in policy and "timeout 30 s" in policy
    assert g.config()["timeout"] == 30.0 and g.config()["max_retries"] == 2
    g.close()


def test_unreachable_server_is_retried_then_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # bound, never listening: connections there are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        sleeps: list[float] = []
        g = OpenAIGenerator(
            "m", f"http://127.0.0.1:{port}/v1", max_retries=2, timeout=2, sleep=sleeps.append
        )
        with pytest.raises(BackendError, match="ConnectError"):
            g.generate(PROMPT)
        g.close()
    assert len(sleeps) == 2


def test_bad_key_is_a_clear_error_that_never_leaks_the_key(
    base_url: str,
    server: _Server,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    wrong = "sk-wrong-secret-987654321"
    monkeypatch.setenv(KEY_ENV, wrong)
    g = OpenAIGenerator("toy-model", base_url, api_key_env=KEY_ENV, sleep=lambda s: None)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(BackendError) as info:
        g.generate(PROMPT)
    message = str(info.value)
    assert "HTTP 401" in message and KEY_ENV in message
    assert len(server.requests) == 1  # not retried
    server.fail_next = 1
    with pytest.raises(BackendError):
        g.generate(PROMPT)
    for text in (message, repr(g), json.dumps(g.config()), caplog.text):
        assert wrong not in text
    g.close()


def test_timeout_is_reported(base_url: str, server: _Server, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    server.delay = 1.0
    g = OpenAIGenerator("toy-model", base_url, api_key_env=KEY_ENV, timeout=0.2, max_retries=0)
    with pytest.raises(BackendError, match="Timeout"):
        g.generate(PROMPT)
    g.close()


def test_missing_key_sends_no_authorization(
    base_url: str, server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    g = OpenAIGenerator("toy-model", base_url, api_key_env=KEY_ENV)
    with pytest.raises(BackendError, match="401"):
        g.generate(PROMPT)
    assert "Authorization" not in server.requests[-1][1]
    g.close()


def test_registry_spec_and_batch(base_url: str, server: _Server, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    g = create_generator(f"openai:toy-model@{base_url}", api_key_env=KEY_ENV, concurrency=3)
    assert isinstance(g, OpenAIGenerator)
    assert g.model == "toy-model" and g.base_url == base_url
    outs = g.generate_batch([PROMPT] * 5)
    assert [o.text for o in outs] == ["Velmora."] * 5
    g.close()
    with pytest.raises(ConfigError):
        OpenAIGenerator("m", "ftp://x")
    with pytest.raises(ConfigError):
        OpenAIGenerator("m", base_url, top_logprobs=50)


@pytest.mark.parametrize(
    "spec",
    [
        "openai:gpt-4o-mini",  # no endpoint: it used to be the public OpenAI API
        "openai:MODEL@127.0.0.1:8000/v1",  # no scheme: it used to join the model name
        "openai:@http://127.0.0.1:8000/v1",  # no model
        "openai:m@http://",  # no host
        "openai:m@",
    ],
)
def test_a_spec_that_does_not_name_its_endpoint_in_full_is_refused(spec: str) -> None:
    with pytest.raises(ConfigError, match=re.escape("openai:MODEL@http://127.0.0.1:8000/v1")):
        create_generator(spec)


def test_the_endpoint_is_taken_as_named_and_a_remote_one_is_named_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    local = create_generator("openai:org@team/model@http://127.0.0.1:9/v1/")
    assert (local.model, local.base_url) == ("org@team/model", "http://127.0.0.1:9/v1")
    local.close()
    assert "not this machine" not in caplog.text
    remote = create_generator("openai:gpt-4o-mini@https://api.openai.com/v1")
    remote.close()
    assert "to https://api.openai.com/v1 (not this machine)" in caplog.text
    assert remote.config()["base_url"] == "https://api.openai.com/v1"


def test_injected_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, json={"choices": [{"message": {"content": "ok"}, "logprobs": None}]}
        )

    g = OpenAIGenerator("m", "http://model.local/v1", transport=httpx.MockTransport(handler))
    out = g.generate(Prompt(Task.CHAT, "hi"))
    g.close()
    assert out.text == "ok" and out.logprobs is None and out.tokens == ("ok",)
    assert str(seen[0].url) == "http://model.local/v1/chat/completions"


def test_a_cache_key_isolates_the_upstream_cache_per_account() -> None:
    """The service names each account's opaque cache key: the upstream keys its prompt /
    KV cache by it ('user', and vLLM's 'cache_salt'); without one nothing is sent."""
    import httpx

    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(
            200, json={"choices": [{"message": {"content": "ok"}, "logprobs": None}]}
        )

    g = OpenAIGenerator("m", "http://model.local/v1", transport=httpx.MockTransport(handler))
    g.generate(Prompt(Task.ANSWER, "q", ("doc",), options={"cache_key": "k-alice"}))
    g.generate(Prompt(Task.ANSWER, "q", ("doc",), options={"cache_key": "k-bob"}))
    g.generate(Prompt(Task.ANSWER, "q", ("doc",)))
    g.close()
    assert [(b.get("user"), b.get("cache_salt")) for b in bodies] == [
        ("k-alice", "k-alice"),
        ("k-bob", "k-bob"),
        (None, None),
    ]


def test_a_sent_prompt_is_noted_for_the_request_and_a_refused_one_is_not() -> None:
    """What the failure rule reads: a request that reached the server (answered, or failed
    after connecting) notes that its prompt was used, in a batch's worker threads too; a
    refused connection notes nothing."""
    import httpx

    from ragprivacy.generate import tracking_prompts

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"choices": [{"message": {"content": "ok"}, "logprobs": None}]}
        )

    g = OpenAIGenerator(
        "m", "http://model.local/v1", transport=httpx.MockTransport(handler), concurrency=4
    )
    with tracking_prompts() as used:
        assert not used[0]
        g.generate_batch([Prompt(Task.CHAT, "hi"), Prompt(Task.CHAT, "there")])
        assert used[0]
    g.close()
    with socket.socket() as s:  # bound, never listening: connections there are refused
        s.bind(("127.0.0.1", 0))
        refused = OpenAIGenerator(
            "m", f"http://127.0.0.1:{s.getsockname()[1]}/v1", max_retries=0, timeout=2
        )
        with tracking_prompts() as used, pytest.raises(BackendError):
            refused.generate(PROMPT)
        assert not used[0]
        refused.close()


def test_an_endpoint_that_refuses_logprobs_is_asked_once_and_then_without(
    gen: OpenAIGenerator, server: _Server
) -> None:
    """A ragprivacy tenant without log-probabilities answers a request asking for them
    with 400 (spending nothing): the first answer is asked again without them, and no
    later request asks; the generator then says it exposes none."""
    server.refuse_logprobs = True
    first = gen.generate(PROMPT)
    assert first.text == "Velmora." and first.logprobs is None
    asked = [body for _, _, body in server.requests]
    assert len(asked) == 2 and "logprobs" in asked[0] and "logprobs" not in asked[1]
    assert gen.generate(PROMPT).text == "Velmora."
    assert len(server.requests) == 3 and "logprobs" not in server.requests[-1][2]
    assert gen.exposes_logprobs is False and len(server.requests) == 3  # no probe needed


@pytest.mark.parametrize("refuse", [True, False])
def test_whether_an_endpoint_gives_logprobs_is_asked_once_with_a_public_probe(
    server: _Server, refuse: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    server.refuse_logprobs = refuse
    g = OpenAIGenerator("toy-model", f"http://127.0.0.1:{server.server_port}/v1",
                        api_key_env=KEY_ENV, sleep=lambda s: None)  # fmt: skip
    try:
        assert g.exposes_logprobs is (not refuse)
        assert g.exposes_logprobs is (not refuse) and len(server.requests) == 1  # once
        ((_, _, probe),) = server.requests
        assert probe["max_tokens"] == 1 and probe["logprobs"] is True
        assert probe["messages"] == [{"role": "user", "content": "Reply with one word."}]
        g.generate(PROMPT)
        assert ("logprobs" in server.requests[-1][2]) is (not refuse)
        assert len(server.requests) == 2
    finally:
        g.close()


def test_logprobs_false_never_asks(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    g = OpenAIGenerator("toy-model", f"http://127.0.0.1:{server.server_port}/v1",
                        api_key_env=KEY_ENV, logprobs=False, sleep=lambda s: None)  # fmt: skip
    try:
        assert g.generate(PROMPT).logprobs is None and not g.exposes_logprobs
        assert len(server.requests) == 1 and "logprobs" not in server.requests[0][2]
        assert g.config()["logprobs"] is False
    finally:
        g.close()


def test_a_refusal_for_another_reason_teaches_nothing_about_logprobs(
    gen: OpenAIGenerator, server: _Server
) -> None:
    """A 400 that asking again without log-probabilities does not cure (a prompt over
    the context, which depends on its documents) is raised, and later answers still
    ask for them: what an answer carries never depends on an earlier prompt's failure."""
    server.refuse_all = True
    with pytest.raises(BackendError, match="HTTP 400"):
        gen.generate(PROMPT)
    assert len(server.requests) == 2  # with, then without: both refused
    server.refuse_all = False
    out = gen.generate(PROMPT)
    assert server.requests[-1][2]["logprobs"] is True and out.logprobs is not None


# ------------------------------------------------------------------ streaming


def test_stream_yields_the_servers_pieces_as_they_come(
    gen: OpenAIGenerator, server: _Server, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pieces = list(gen.stream(PROMPT))
    assert [p.text for p in pieces] == ANSWER
    # whether the endpoint gives log-probabilities is not known yet, and a stream sends
    # no probe of its own: the one request was the stream, without them
    assert [p.logprobs for p in pieces] == [None] * 3 and len(server.requests) == 1
    whole = gen.generate(PROMPT)  # this answer shows the endpoint gives them
    pieces = list(gen.stream(PROMPT))
    assert [p.logprobs for p in pieces] == [(lp,) for lp in ANSWER_LP]
    assert join_completions(pieces) == whole
    streamed = [body for _, _, body in server.requests if body.get("stream")]
    assert len(streamed) == 2 and "logprobs" not in streamed[0]
    assert streamed[1]["logprobs"] is True
    assert streamed[0]["messages"][0]["content"] == "Do not repeat the context."
    assert [p.text for p in gen.stream(PROMPT, max_tokens=2)] == ANSWER[:2]
    monkeypatch.setenv(KEY_ENV, KEY)
    plain = OpenAIGenerator("m", base_url, api_key_env=KEY_ENV, mode="completions", logprobs=False)
    pieces = list(plain.stream(PROMPT))
    assert "".join(p.text for p in pieces) == "Velmora." and pieces[0].logprobs is None
    assert "logprobs" not in server.requests[-1][2] and "prompt" in server.requests[-1][2]
    plain.close()


def test_a_stream_opens_with_retries_and_fails_clearly(
    gen: OpenAIGenerator, server: _Server
) -> None:
    server.fail_next = 2  # two 500s, then the stream: opening it is retried
    assert "".join(p.text for p in gen.stream(PROMPT)) == "Velmora."
    server.stream_error = True
    stream = gen.stream(PROMPT)
    assert next(stream).text == "Vel"  # what came before the error was sent
    with pytest.raises(BackendError, match=r"ended with an error: .*crashed"):
        next(stream)
    server.stream_error, server.stream_cut = False, True
    with pytest.raises(BackendError, match=r"ended before its '\[DONE\]'"):
        list(gen.stream(PROMPT))


def test_a_stream_to_a_server_never_reached_is_unavailable() -> None:
    with socket.socket() as s:  # bound, never listening: connections there are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1"
        g = OpenAIGenerator("m", url, max_retries=1, logprobs=False, sleep=lambda s: None)
        with pytest.raises(GeneratorUnavailableError, match="ConnectError"):
            next(g.stream(PROMPT))
        g.close()
