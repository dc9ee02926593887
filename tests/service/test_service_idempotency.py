"""Idempotency keys through the running service and the official ``openai`` client: a
request sent again with the same ``Idempotency-Key`` is answered once and charged once;
without a key every retry is a new, charged request (docs/service.md says so).

The upstream generator is slower than the client's timeout, so the client's first attempt
always times out while the service goes on answering it — the case where a blind retry
pays twice. What the tests assert is what was charged, never how the retries were timed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from tests._chat_endpoint import Endpoint, chat_reply

from ragprivacy.service import ServiceState
from ragprivacy.service.idempotency import PENDING_S, TTL_S

DELAY_S = 1.5  # the upstream's time per answer
TIMEOUT_S = 0.5  # the client's, per attempt: every first attempt times out


def _slow(_: dict[str, Any]) -> tuple[int, Any]:
    time.sleep(DELAY_S)
    return chat_reply("alpha")


@pytest.fixture(scope="module")
def service(tmp_path_factory, admin, corpus_file, module_server_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("idempotency")
    state = root / "state"
    admin(state, "tenant", "create", "clinic", "--k", "2")
    admin(state, "docs", "add", "clinic", str(corpus_file(root / "c.jsonl", "clinic", 12)))
    keys = {}
    for account in ("keyed", "plain", "http"):
        admin(state, "account", "create", "clinic", account, "--eps", "4", "--delta", "1e-6",
              "--rate-limit", "50")  # fmt: skip
        keys[account] = admin(state, "key", "create", account).split()[-1]
    admin(state, "window", "open")
    upstream = Endpoint(_slow)
    server = module_server_factory(state, extra=("--generator", f"openai:m@{upstream.url}"))
    yield {"url": server.url, "keys": keys, "upstream": upstream, "state": state}
    upstream.close()


def _used(service: dict[str, Any], account: str) -> int:
    headers = {"Authorization": f"Bearer {service['keys'][account]}"}
    r = httpx.get(f"{service['url']}/v1/budget", headers=headers, timeout=60)
    assert r.status_code == 200, r.text
    return int(r.json()["used"])


def _settled(service: dict[str, Any], account: str, expected: int) -> int:
    """The account's use once the service has finished what the client left behind (the
    last timed-out attempt may still be answering)."""
    deadline = time.monotonic() + 60
    used = _used(service, account)
    while used < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        used = _used(service, account)
    return used


def _ask(service: dict[str, Any], account: str, retries: int, **kw: Any) -> tuple[Any, int]:
    """One chat request through the official client (its own retries); returns the
    completion (or the exception it ended with) and how many attempts it sent."""
    sent: list[int] = []
    http = httpx.Client(event_hooks={"request": [lambda _: sent.append(1)]})
    client = openai.OpenAI(
        base_url=f"{service['url']}/v1",
        api_key=service["keys"][account],
        timeout=TIMEOUT_S,
        max_retries=retries,
        http_client=http,
    )
    try:
        out: Any = client.chat.completions.create(
            model="ragprivacy", messages=[{"role": "user", "content": "who has asthma?"}], **kw
        )
    except openai.APIError as exc:  # every attempt timed out: the invariant still holds
        out = exc
    finally:
        client.close()
    return out, len(sent)


def test_the_official_client_s_retries_under_one_key_are_charged_once(service) -> None:  # type: ignore[no-untyped-def]
    calls = service["upstream"].calls
    out, sent = _ask(service, "keyed", 8, extra_headers={"Idempotency-Key": "answer-1"})
    assert sent >= 2  # the first attempt timed out, so the client retried
    assert _settled(service, "keyed", 1) == 1  # charged once for one answer
    assert service["upstream"].calls - calls == 1  # and the generator ran once
    if not isinstance(out, Exception):  # the retry got the first attempt's answer
        assert out.choices[0].message.content == "alpha"
        assert out.model_extra["ragprivacy"]["budget"]["used"] == 1  # type: ignore[index]


def test_without_a_key_every_retry_is_charged(service) -> None:  # type: ignore[no-untyped-def]
    calls = service["upstream"].calls
    _, sent = _ask(service, "plain", 2)
    assert sent == 3  # each attempt timed out
    # every attempt that reached the generator is a new request, charged as one (an
    # attempt whose client left before it started is dropped, free)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reached = service["upstream"].calls - calls
        if _used(service, "plain") == reached and reached >= 1:
            time.sleep(DELAY_S + 0.5)  # let the last answer finish, then look again
            if _used(service, "plain") == service["upstream"].calls - calls:
                break
        time.sleep(0.2)
    reached = service["upstream"].calls - calls
    assert _used(service, "plain") == reached >= 2  # the retries were charged too


def _post(service: dict[str, Any], path: str, body: dict[str, Any], key: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {service['keys']['http']}", "Idempotency-Key": key}
    return httpx.post(service["url"] + path, json=body, headers=headers, timeout=60)


def test_a_key_names_one_request_and_a_refusal_keeps_nothing(service) -> None:  # type: ignore[no-untyped-def]
    before = _used(service, "http")
    body = {"query": "who has asthma?", "nonce": "ab" * 16}
    first = _post(service, "/v1/retrieve", body, "r-1")
    again = _post(service, "/v1/retrieve", body, "r-1")
    assert first.status_code == again.status_code == 200, first.text
    assert first.json() == again.json()  # the same documents and the same receipt
    assert _used(service, "http") == before + 1
    other = _post(service, "/v1/retrieve", {**body, "query": "who has gout?"}, "r-1")
    assert other.status_code == 400 and "another request" in other.json()["detail"]
    refused = _post(service, "/v1/retrieve", {**body, "k": 99}, "r-2")  # k above K: free
    assert refused.status_code == 400
    fresh = _post(service, "/v1/retrieve", {**body, "query": "who has gout?"}, "r-2")
    assert fresh.status_code == 200  # the refused request left the key unused
    bad = _post(service, "/v1/retrieve", body, "two words")
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["detail"]
    assert _used(service, "http") == before + 2


def test_a_streamed_answer_is_streamed_again_the_same(service) -> None:  # type: ignore[no-untyped-def]
    chat = {"model": "ragprivacy", "stream": True,
            "messages": [{"role": "user", "content": "who has gout?"}]}  # fmt: skip
    before = _used(service, "http")
    first = _post(service, "/v1/chat/completions", chat, "s-1")
    again = _post(service, "/v1/chat/completions", chat, "s-1")
    assert first.status_code == again.status_code == 200
    assert first.text == again.text and first.text.endswith("data: [DONE]\n\n")
    assert _used(service, "http") == before + 1


def test_the_state_keeps_a_key_pending_answered_or_expired(tmp_path: Path, admin) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    admin(state, "tenant", "create", "t", "--k", "2")
    st = ServiceState(state, create=False)
    assert st.begin_idempotent("a", "k", "f1", 1000.0) == ("new", None)
    assert st.begin_idempotent("a", "k", "f1", 1001.0) == ("pending", None)  # running
    assert st.begin_idempotent("b", "k", "f1", 1001.0) == ("new", None)  # keys per account
    assert st.begin_idempotent("a", "k", "f2", 1001.0) == ("reused", None)
    # a worker that died mid-request: after PENDING_S the key runs again
    assert st.begin_idempotent("a", "k", "f1", 1000.0 + PENDING_S + 1) == ("new", None)
    st.finish_idempotent("a", "k", json.dumps({"ok": 1}))
    assert st.begin_idempotent("a", "k", "f1", 2000.0) == ("done", '{"ok": 1}')
    assert st.begin_idempotent("a", "k", "f1", 2000.0 + TTL_S + PENDING_S) == ("new", None)
    st.abandon_idempotent("a", "k")  # a refusal: forgotten
    assert st.begin_idempotent("a", "k", "f2", 5e5) == ("new", None)
    st.close()


def test_the_shipped_client_sends_a_request_again_under_its_key(service, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from ragprivacy.service import Client, load_receipts

    before = _used(service, "http")
    with Client(service["url"], service["keys"]["http"], receipts_dir=tmp_path) as c:
        first = c.retrieve("who has a fracture?", idempotency_key="c-1")
        again = c.retrieve("who has a fracture?", idempotency_key="c-1")  # same nonce sent
    assert first == again and _used(service, "http") == before + 1
    assert len(load_receipts(tmp_path)) == 1  # the same receipt, kept once
