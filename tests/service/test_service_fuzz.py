"""Fuzz the running service through its own OpenAPI schema (schemathesis): every operation
of ``GET /openapi.json``, with valid and invalid bodies, query and path parameters, never
answers 5xx, and every 4xx is JSON with a one-line ``detail``.

The authenticated operations are sent twice per example: with an account's valid key (so
the body reaches the private retrieval) and with the generated ``Authorization`` header
(random, malformed or absent). The public audit operations are sent with the generated
window id and again with each real window's id (so the query parameters reach a real
ledger): W1, closed with its coalition claim, and W2, open. Both positive (schema-valid)
and negative (schema-violating) cases are generated. The default run is bounded (25
examples per operation and mode, derandomized, about 30 s); the ``slow`` one takes 400.
"""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode


@pytest.fixture(scope="module")
def service(tenants_service_factory):  # type: ignore[no-untyped-def]
    """Window W1 closed after a few queries (its coalition claim certified), W2 open."""
    service = tenants_service_factory(rate_limit=1_000_000, extra=("--api-docs",))
    for account in ("alice", "carol"):
        r = httpx.post(f"{service.url}/v1/retrieve", json={"query": "asthma"},
                       headers=service.headers(account), timeout=60)  # fmt: skip
        assert r.status_code == 200, r.text
    service.admin("window", "close")
    service.admin("window", "open")
    # Warm both windows up (the first request to a window loads it).
    r = httpx.post(f"{service.url}/v1/retrieve", json={"query": "gout"},
                   headers=service.headers("bob"), timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text
    assert httpx.get(f"{service.url}/v1/audit/windows/W1/records", timeout=60).status_code == 200
    return service


@pytest.fixture(scope="module")
def api_schema(service):  # type: ignore[no-untyped-def]
    """The live service's own schema (``GET /openapi.json``)."""
    return schemathesis.openapi.from_url(f"{service.url}/openapi.json")


_TOKEN = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _not_http(headers) -> bool:  # type: ignore[no-untyped-def]
    """Whether a header is no HTTP at all (RFC 9110 §5: a name is a token, a value has no
    control character but tab): the HTTP server refuses such a request before the app."""
    for name, value in headers.items():
        text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        if not name or not set(name) <= _TOKEN:
            return True
        if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in text):
            return True
    return False


def check(response, what: str) -> None:  # type: ignore[no-untyped-def]
    """No 5xx; a 4xx is a JSON object whose ``detail`` is one non-empty line — except the
    HTTP server's own plain 400 for a request that is not HTTP (the app never sees it)."""
    status = response.status_code
    if status == 400 and _not_http(response.request.headers):
        return
    assert status < 500, f"{what} -> {status}: {response.text[:300]}"
    if 400 <= status < 500:
        try:
            body = json.loads(response.text)
        except ValueError:
            pytest.fail(f"{what} -> {status} with a body that is not JSON: {response.text[:300]}")
        assert isinstance(body, dict) and isinstance(body.get("detail"), str), (what, body)
        assert body["detail"].strip() and "\n" not in body["detail"], (what, body)
    elif "text/event-stream" in str(response.headers.get("content-type", "")):
        events = [line for line in response.text.splitlines() if line]
        assert events and events[-1] == "data: [DONE]", (what, response.text[:300])
        for line in events[:-1]:  # every other event is one JSON chunk
            json.loads(line.removeprefix("data: "))
    else:
        json.loads(response.text)  # every answer is JSON


def send(case, service, seen: Counter[tuple[str, int]]) -> None:  # type: ignore[no-untyped-def]
    """One generated case, sent as described in the module docstring; ``seen`` counts the
    statuses of each operation."""
    what = f"{case.method} {case.formatted_path} query={case.query} body={case.body!r}"[:600]
    label = f"{case.method} {case.path}"
    calls = []
    if case.path.startswith("/v1/audit/"):
        calls.append((what, {}))
        if "window_id" in (case.path_parameters or {}):
            for window in ("W1", "W2"):  # closed, open
                calls.append((f"{what} [window {window}]", {"window_id": window}))
    else:
        calls.append((f"{what} [generated Authorization]", None))
        calls.append((what, service.headers("alice")))
    for description, change in calls:
        if change is None or "window_id" not in change:
            response = case.call(base_url=service.url, headers=change or None, timeout=60)
        else:
            case.path_parameters = {**case.path_parameters, **change}
            response = case.call(base_url=service.url, timeout=60)
        seen[label, response.status_code] += 1
        check(response, description)


def _user_last(case):  # type: ignore[no-untyped-def]
    messages = case.body.get("messages") if isinstance(case.body, dict) else None
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        case.body = {**case.body, "messages": [*messages[:-1], {**messages[-1], "role": "user"}]}
    return case


def strategy(operation, mode: GenerationMode):  # type: ignore[no-untyped-def]
    """The operation's cases; for the chat, half with the last message's role set to "user"
    (the schema allows any role, but only a user message is a query)."""
    cases = operation.as_strategy(generation_mode=mode)
    if operation.path == "/v1/chat/completions":
        return st.one_of(cases, cases.map(_user_last))
    return cases


def fuzz(api_schema, service, mode: GenerationMode, examples: int) -> list[str]:  # type: ignore[no-untyped-def]
    """Run every operation of the schema ``examples`` times; the failures, one per line."""
    failures, labels, seen = [], [], Counter()
    for result in api_schema.get_all_operations():
        operation = result.ok()  # a schema the loader cannot read fails here
        labels.append(operation.label)

        @settings(
            max_examples=examples,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(case=strategy(operation, mode))
        def run(case) -> None:  # type: ignore[no-untyped-def]
            send(case, service, seen)

        try:
            run()
        except Unsatisfiable:  # nothing in the operation can be made invalid (GET /v1/budget)
            assert mode is GenerationMode.NEGATIVE, operation.label
        except Exception as exc:  # hypothesis re-raises the shrunk failure
            failures.append(f"{operation.label}: {type(exc).__name__}: {exc}".splitlines()[0])
    assert len(labels) >= 11, labels  # 4 authenticated, 7 public audit operations
    if mode is GenerationMode.POSITIVE:  # valid input reached every operation's answer
        answered = {label for label, status in seen if status == 200}
        assert answered == set(labels), sorted(set(labels) - answered)
    return failures


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_operation_answers_5xx(api_schema, service, mode) -> None:  # type: ignore[no-untyped-def]
    assert fuzz(api_schema, service, mode, 25) == []


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_operation_answers_5xx_long(api_schema, service, mode) -> None:  # type: ignore[no-untyped-def]
    assert fuzz(api_schema, service, mode, 400) == []


def test_the_body_limit_holds_for_a_body_without_content_length(service) -> None:  # type: ignore[no-untyped-def]
    """A chunked body (no Content-Length) over the 64 KiB limit is refused with 413 like one
    that declares its length, and spends nothing: the limit must not depend on the client
    announcing the size (else any body is read into memory)."""
    from ragprivacy.service.app import MAX_BODY_BYTES

    def chunks():  # type: ignore[no-untyped-def]  # a valid query, padded with whitespace
        yield b'{"query": "which patient has asthma?"'
        for _ in range(4):
            yield b" " * MAX_BODY_BYTES
        yield b"}"

    headers = {**service.headers("bob"), "Content-Type": "application/json"}
    before = httpx.get(f"{service.url}/v1/budget", headers=headers, timeout=60).json()["used"]
    declared = httpx.post(
        f"{service.url}/v1/retrieve", content=b"".join(chunks()), headers=headers, timeout=60
    )
    assert declared.status_code == 413, declared.text
    chunked = httpx.post(
        f"{service.url}/v1/retrieve", content=chunks(), headers=headers, timeout=60
    )
    after = httpx.get(f"{service.url}/v1/budget", headers=headers, timeout=60).json()["used"]
    assert (chunked.status_code, chunked.json()) == (413, declared.json()), (
        f"a {4 * MAX_BODY_BYTES // 1024} KiB chunked body -> {chunked.status_code}, "
        f"{after - before} query charged"
    )
    assert after == before
