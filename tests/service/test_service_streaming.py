"""Token-by-token streaming through the running service and the official ``openai``
client, with an upstream generator that streams and that the test holds mid-answer.

While the upstream holds the rest of its answer back, the client already has the first
chunk and the query is already charged: that is token-by-token streaming, charged before
the first byte, asserted on what was sent and charged, never on timings. A failure after
the first chunk ends the stream with an error event carrying the receipt (it is charged);
a client that leaves mid-stream frees the account's slot.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from tests._chat_endpoint import Endpoint, Streamed, chat_reply, delta

HOLD_S = 120  # the upstream's longest wait for the test's go-ahead (never reached when it passes)
PIECES = ["Vel", "mora", " is", " where", " she", " was", " born", "."]


class Upstream:
    """An OpenAI-compatible generator that streams: its first piece at once, the rest
    once the test says ``go`` (a failure instead when ``fail`` is set)."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.fail = False
        self.streams: list[Streamed] = []
        self.endpoint = Endpoint(self._respond)

    def _respond(self, body: dict[str, Any]) -> tuple[int, Any]:
        if not body.get("stream"):
            return chat_reply("ok")  # the generator's one log-probability probe
        streamed = Streamed(self._events(), done=not self.fail)
        self.streams.append(streamed)
        return 200, streamed

    def _events(self) -> Iterator[dict[str, Any]]:
        yield delta(PIECES[0])
        self.go.wait(HOLD_S)
        if self.fail:
            yield {"error": {"message": "the model crashed on Marta Olsen's record"}}
            return
        for piece in PIECES[1:]:
            yield delta(piece)


@pytest.fixture(scope="module")
def service(tmp_path_factory, admin, corpus_file, module_server_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("streaming")
    state = root / "state"
    admin(state, "tenant", "create", "clinic", "--k", "2")
    admin(state, "docs", "add", "clinic", str(corpus_file(root / "c.jsonl", "clinic", 12)))
    keys = {}
    for account in ("reader", "failing", "leaving"):
        admin(state, "account", "create", "clinic", account, "--eps", "4", "--delta", "1e-6",
              "--rate-limit", "50")  # fmt: skip
        keys[account] = admin(state, "key", "create", account).split()[-1]
    admin(state, "window", "open")
    upstream = Upstream()
    server = module_server_factory(
        state,
        extra=("--generator", f"openai:m@{upstream.endpoint.url}", "--max-inflight", "1"),
    )
    yield {"url": server.url, "keys": keys, "upstream": upstream}
    upstream.go.set()
    upstream.endpoint.close()


@pytest.fixture()
def upstream(service: dict[str, Any]) -> Iterator[Upstream]:
    up: Upstream = service["upstream"]
    up.go.clear()
    up.fail = False
    yield up
    up.go.set()  # whatever the test did, no upstream answer stays held


def _client(service: dict[str, Any], account: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{service['url']}/v1", api_key=service["keys"][account], max_retries=0
    )


def _used(service: dict[str, Any], account: str) -> int:
    headers = {"Authorization": f"Bearer {service['keys'][account]}"}
    r = httpx.get(f"{service['url']}/v1/budget", headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return int(r.json()["used"])


ASK = {"model": "ragprivacy", "messages": [{"role": "user", "content": "where was she born?"}]}


def test_the_answer_streams_token_by_token_and_is_charged_before_the_first(
    service: dict[str, Any], upstream: Upstream
) -> None:
    client = _client(service, "reader")
    stream = client.chat.completions.create(
        **ASK, stream=True, stream_options={"include_usage": True}
    )
    chunks = iter(stream)
    first = next(chunks)
    # the upstream still holds the rest of its answer: this chunk was sent token by token
    assert not upstream.go.is_set()
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.content == PIECES[0]
    assert _used(service, "reader") == 1  # charged before the first byte reached us
    upstream.go.set()
    rest = list(chunks)
    client.close()
    texts = [c.choices[0].delta.content for c in rest if c.choices and c.choices[0].delta.content]
    assert [first.choices[0].delta.content, *texts] == PIECES  # one chunk per upstream piece
    finish = [c for c in rest if c.choices and c.choices[0].finish_reason == "stop"]
    assert len(finish) == 1
    fields = (finish[0].model_extra or {})["ragprivacy"]
    assert fields["receipt"]["signature"] and fields["budget"]["used"] == 1
    assert rest[-1].usage is not None and rest[-1].usage.completion_tokens >= len(PIECES)
    assert rest[-1].usage.prompt_tokens > 0 and rest[-1].choices == []
    assert _used(service, "reader") == 1


def test_a_failure_after_the_first_chunk_is_charged_and_ends_the_stream(
    service: dict[str, Any], upstream: Upstream
) -> None:
    upstream.fail = True
    headers = {"Authorization": f"Bearer {service['keys']['failing']}"}
    with httpx.stream(
        "POST", f"{service['url']}/v1/chat/completions", json={**ASK, "stream": True},
        headers=headers, timeout=60,
    ) as r:  # fmt: skip
        assert r.status_code == 200
        lines = r.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[6:])["choices"][0]["delta"]["content"] == PIECES[0]
        assert _used(service, "failing") == 1
        upstream.go.set()
        events = [line[6:] for line in lines if line.startswith("data: ")]
    assert events[-1] != "[DONE]"
    error = json.loads(events[-1])
    assert error["error"]["code"] == "charged_failure" and "charged" in error["error"]["message"]
    assert "Marta" not in events[-1] and "crashed" not in events[-1]  # the upstream's words
    assert error["receipt"]["signature"]  # the appended record's receipt, as for an answer
    assert _used(service, "failing") == 1

    upstream.go.clear()
    client = _client(service, "failing")  # the official client raises the error event
    stream = client.chat.completions.create(**ASK, stream=True)
    chunks = iter(stream)
    assert next(chunks).choices[0].delta.content == PIECES[0]
    upstream.go.set()
    with pytest.raises(openai.APIError, match="charged like an answer"):
        list(chunks)
    client.close()
    assert _used(service, "failing") == 2


def test_a_client_that_leaves_mid_stream_frees_its_slot(
    service: dict[str, Any], upstream: Upstream
) -> None:
    client = _client(service, "leaving")  # its account may have one request in progress
    stream = client.chat.completions.create(**ASK, stream=True)
    assert next(iter(stream)).choices[0].delta.content == PIECES[0]
    busy = client.chat.completions.with_raw_response
    with pytest.raises(openai.APIStatusError) as refused:  # its one slot is the stream's
        busy.create(**ASK)
    assert refused.value.status_code == 429
    stream.close()  # the client leaves with the answer half read
    upstream.go.set()  # the upstream goes on; the service stops reading it
    upstream.go.clear()
    answer = None
    for _ in range(600):  # the slot is freed once the service notices
        try:
            answer = client.chat.completions.create(**ASK, stream=True)
            break
        except openai.APIStatusError as exc:
            assert exc.status_code == 429
            threading.Event().wait(0.1)
    assert answer is not None
    upstream.go.set()
    assert "".join(c.choices[0].delta.content or "" for c in answer if c.choices) == "".join(PIECES)
    client.close()
    assert _used(service, "leaving") == 2  # the left stream was charged, the refusal was not


def test_a_stream_holds_its_turn_of_the_total_until_it_ends(
    tmp_path,
    admin,
    corpus_file,
    server_factory,  # type: ignore[no-untyped-def]
) -> None:
    """--max-inflight-total 1: while one account's answer streams, another account's
    request waits its turn: it reaches the generator only once the stream has ended."""
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "2")
    admin(state, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "clinic", 8)))
    keys = {}
    for account in ("first", "second"):
        admin(state, "account", "create", "clinic", account, "--eps", "4", "--delta", "1e-6",
              "--rate-limit", "5")  # fmt: skip
        keys[account] = admin(state, "key", "create", account).split()[-1]
    admin(state, "window", "open")
    up = Upstream()
    seen: list[bool] = []  # per non-streamed request: had every stream ended when it came?
    respond = up._respond

    def noting(body: dict[str, Any]) -> tuple[int, Any]:
        if not body.get("stream") and "Reply with one word." not in json.dumps(body):
            seen.append(up.go.is_set())
        return respond(body)

    up.endpoint.close()
    up.endpoint = Endpoint(noting)
    server = server_factory(
        state,
        extra=("--generator", f"openai:m@{up.endpoint.url}", "--max-inflight-total", "1"),
    )
    service = {"url": server.url, "keys": keys}
    try:
        client = _client(service, "first")
        stream = client.chat.completions.create(**ASK, stream=True)
        chunks = iter(stream)
        assert next(chunks).choices[0].delta.content == PIECES[0]
        waiting = threading.Thread(target=lambda: _client(service, "second").chat.completions
                                   .create(**ASK))  # fmt: skip
        waiting.start()
        waiting.join(1.0)  # time for it to get past the turn, were the stream not holding it
        up.go.set()
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(
            PIECES[1:]
        )
        waiting.join(60)
        assert seen == [True]  # it reached the generator after the stream's end, not before
    finally:
        up.go.set()
        up.endpoint.close()
