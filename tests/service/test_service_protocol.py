"""The HTTP edge, in process: every route's response model, the one error → status table,
the wire models against the provider's own payloads, and a busy ledger (503)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

import ragprivacy.cli
import ragprivacy.eval
from ragprivacy.audit import LedgerCounter, LogSealedError
from ragprivacy.dp import DocumentBudgetExhaustedError
from ragprivacy.errors import (
    AuthError,
    BackendError,
    BudgetExhaustedError,
    BusyError,
    ChargedFailureError,
    ConfigError,
    DataError,
    GeneratorUnavailableError,
    RagPrivacyError,
    ServiceStateError,
    TenantAccessError,
    UnknownBackendError,
    WindowClosedError,
)
from ragprivacy.generate import ReferenceReader
from ragprivacy.service import (
    AccountBusyError,
    AuthThrottledError,
    ServiceProvider,
    ServiceState,
)
from ragprivacy.service.app import ERROR_STATUS, ErrorStatus, create_app, error_body
from ragprivacy.service.protocol import (
    AnswerRequest,
    ChatCompletion,
    ChatMessage,
    ChatRequest,
    CommitmentsResponse,
    NoisyTopKBudgetStatus,
    RetrieveRequest,
    RetrieveResponse,
    SignedReceipt,
    TreeHeadResponse,
    VotedPrivacy,
    VotingBudget,
    sse_event,
)
from ragprivacy.service.serving import ClientGoneError, NotFoundError, NotReadyError, Serving

assert ragprivacy.cli and ragprivacy.eval  # every layer's errors are defined


def _row(cls: type[BaseException]) -> ErrorStatus:
    return next(row for row in ERROR_STATUS if issubclass(cls, row.error))


def _subclasses(cls: type[RagPrivacyError]) -> Iterator[type[RagPrivacyError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


# ------------------------------------------------------------------ the error table
def test_every_ragprivacy_error_has_a_status_of_its_own_branch() -> None:
    found = {RagPrivacyError, *_subclasses(RagPrivacyError)}
    assert NotFoundError in found and DocumentBudgetExhaustedError in found
    for cls in found:
        row = _row(cls)
        assert row.error is not Exception, f"{cls.__name__} would be a 500"
        if issubclass(cls, ServiceStateError):
            assert issubclass(row.error, ServiceStateError), cls  # never an input error's
            assert row.status != 400, cls
    expected = {
        AuthError: 401,
        TenantAccessError: 403,
        NotFoundError: 404,
        WindowClosedError: 409,
        LogSealedError: 409,
        BudgetExhaustedError: 429,
        DocumentBudgetExhaustedError: 429,
        ChargedFailureError: 502,
        BackendError: 502,
        GeneratorUnavailableError: 503,
        BusyError: 503,
        NotReadyError: 503,
        AuthThrottledError: 429,
        AccountBusyError: 429,
        ClientGoneError: 499,
        ConfigError: 400,
        UnknownBackendError: 400,
        DataError: 400,
        RagPrivacyError: 400,
        ValueError: 500,
    }
    assert {cls: _row(cls).status for cls in expected} == expected
    assert dict(_row(BusyError).headers)["Retry-After"]
    assert dict(_row(BudgetExhaustedError).headers)["Retry-After"]
    assert dict(_row(AuthError).headers) == {"WWW-Authenticate": "Bearer"}


def test_the_table_lists_the_most_specific_first() -> None:
    for i, late in enumerate(ERROR_STATUS):
        for early in ERROR_STATUS[:i]:
            assert not issubclass(late.error, early.error), (
                f"{late.error.__name__} is shadowed by {early.error.__name__}"
            )


def test_runtime_errors_are_not_input_errors_and_stay_importable() -> None:
    from ragprivacy.audit import LogSealedError as from_audit
    from ragprivacy.retrieval import TenantAccessError as from_retrieval
    from ragprivacy.service import AuthError as from_service
    from ragprivacy.service import WindowClosedError as window_from_service
    from ragprivacy.service.provider import WindowClosedError as from_provider
    from ragprivacy.service.state import AuthError as from_state

    assert from_audit is LogSealedError and from_retrieval is TenantAccessError
    assert from_service is from_state is AuthError
    assert window_from_service is from_provider is WindowClosedError
    for cls in (AuthError, TenantAccessError, WindowClosedError, LogSealedError, BusyError):
        assert issubclass(cls, ServiceStateError) and not issubclass(cls, ConfigError)
        assert not issubclass(cls, ValueError)


# ------------------------------------------------------------------ a state and its app
@pytest.fixture(scope="module")
def state(tmp_path_factory, admin, corpus_file) -> Path:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("protocol")
    state = root / "state"
    tenants = {
        "clinic": ("--k", "3", "--logprobs"),
        "vote": ("--mode", "dp_vote", "--k", "2", "--eps-q", "4"),
        "mu": ("--mode", "murag", "--k", "2", "--eps-q", "2", "--max-retrievals", "9",
               "--tau", "0"),
    }  # fmt: skip
    for tenant, options in tenants.items():
        admin(state, "tenant", "create", tenant, *options)
        admin(state, "docs", "add", tenant, str(corpus_file(root / f"{tenant}.jsonl", tenant, 30)))
    for tenant, account in [("clinic", "alice"), ("vote", "vera"), ("mu", "mia")]:
        admin(state, "account", "create", tenant, account, "--eps", "40", "--delta", "1e-6",
              "--rate-limit", "20")  # fmt: skip
    admin(state, "window", "open")
    return state


@pytest.fixture(scope="module")
def app(state: Path) -> Any:
    return create_app(state, api_docs=True)


def test_every_route_declares_a_response_model(app: Any) -> None:
    # the API's routes; the operator page and /metrics are pages, outside the schema
    routes = [r for r in app.routes if isinstance(r, APIRoute) and r.include_in_schema]
    assert len(routes) >= 11  # docs/service.md's table
    for route in routes:
        assert route.response_model is not None, route.path
    pages = {r.path for r in app.routes if isinstance(r, APIRoute) and not r.include_in_schema}
    assert pages <= {"/operator", "/metrics"}, pages


def test_openapi_documents_every_response_and_the_stream_chunk(app: Any) -> None:
    doc = TestClient(app).get("/openapi.json").json()
    schemas = doc["components"]["schemas"]

    def resolves(schema: dict[str, Any]) -> None:
        text = json.dumps(schema)
        for ref in set(part.split('"')[0] for part in text.split('"$ref": "')[1:]):
            assert ref.startswith("#/components/schemas/"), ref
            assert ref.rsplit("/", 1)[1] in schemas, f"{ref} is not in the document"

    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            content = operation["responses"]["200"]["content"]
            schema = content["application/json"]["schema"]
            assert schema, f"{method} {path} documents no response"
            resolves(schema)
    for name in ("RetrieveResponse", "AnswerResponse", "ChatCompletion", "ChatCompletionChunk",
                 "NoisyTopKBudgetStatus", "VotingBudget", "NoisyTopKPrivacy", "VotePrivacy",
                 "FilteredVotePrivacy", "CommitmentsResponse", "TreeHeadResponse",
                 "CoalitionResponse", "RecordsResponse", "ProofResponse", "WindowSummary",
                 "SignedReceipt"):  # fmt: skip
        assert name in schemas, name
    resolves(schemas)
    chat = doc["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]
    assert chat["text/event-stream"]["schema"] == {
        "$ref": "#/components/schemas/ChatCompletionChunk"
    }
    for name in ("SignedReceipt", "CommitmentsResponse", "TreeHeadResponse", "CoalitionResponse"):
        assert schemas[name]["required"], f"{name} names none of the keys it holds"


# ------------------------------------------------------------------ the wire
def test_the_wire_models_carry_the_providers_payloads_unchanged(state: Path) -> None:
    """Same keys, in the same order, same values and types: the JSON text is equal."""
    provider = ServiceProvider(ServiceState(state, create=False))
    try:
        served = provider.retrieve("alice", "who has asthma?").to_dict()
        typed = RetrieveResponse.model_validate(served)
        assert json.dumps(typed.model_dump(mode="json")) == json.dumps(served)
        # the loose models of signed payloads name keys the payloads hold
        signed = [
            (SignedReceipt, served["receipt"]),
            (CommitmentsResponse, provider.state.window("W1").commitments),
            (TreeHeadResponse, provider.tree_head("W1").to_dict()),
        ]
        for model, payload in signed:
            assert set(model.model_json_schema()["required"]) <= set(payload), model
        left = provider.budget("alice")
        as_sent = NoisyTopKBudgetStatus.model_validate(left).model_dump(mode="json")
        assert json.dumps(as_sent) == json.dumps(left)
        voted_privacy: TypeAdapter[Any] = TypeAdapter(VotedPrivacy)
        for account in ("vera", "mia"):
            voted, _ = provider.answer_voted(account, "who has asthma?", ReferenceReader())
            privacy = voted_privacy.dump_python(
                voted_privacy.validate_python(voted.privacy), mode="json"
            )
            assert json.dumps(privacy) == json.dumps(voted.privacy)
            for budget in (voted.budget, provider.budget(account)):
                as_sent = VotingBudget.model_validate(budget).model_dump(mode="json")
                assert json.dumps(as_sent) == json.dumps(budget)
    finally:
        provider.close()


def test_a_stream_never_read_still_frees_the_account_s_slot(state: Path) -> None:
    """A response that never starts reading its stream (the client gone before the first
    byte) must not keep the account's slot: closing the stream, or dropping it, frees it.
    The query stays charged (its record was appended before the stream was returned)."""
    import gc

    serving = Serving(ServiceProvider(state=ServiceState(state, create=False)), ReferenceReader())
    ask = ChatRequest(messages=[ChatMessage(role="user", content="who has gout?")], stream=True)
    try:
        used = serving.provider.budget("alice")["used"]
        chunks = serving.chat("alice", ask)
        assert serving.inflight.in_progress("alice") == 1
        chunks.close()  # type: ignore[union-attr]  # closed before its first chunk
        assert serving.inflight.in_progress("alice") == 0
        chunks = serving.chat("alice", ask)
        del chunks
        gc.collect()
        assert serving.inflight.in_progress("alice") == 0
        assert serving.provider.budget("alice")["used"] == used + 2
    finally:
        serving.provider.close()


def test_a_stream_sends_the_text_then_the_fields_then_done(state: Path) -> None:
    serving = Serving(ServiceProvider(state=ServiceState(state, create=False)), ReferenceReader())
    try:
        chunks = serving.chat(
            "alice",
            ChatRequest(messages=[ChatMessage(role="user", content="who has gout?")], stream=True),
        )
        assert not isinstance(chunks, ChatCompletion)
        events = [sse_event(c) for c in chunks]
    finally:
        serving.provider.close()
    first, last = (json.loads(e.removeprefix("data: ")) for e in events)
    assert list(first) == ["id", "created", "model", "object", "choices"]
    assert first["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": first["choices"][0]["delta"][
            "content"]}, "finish_reason": None}
    ]  # fmt: skip
    assert last["choices"] == [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    assert list(last["ragprivacy"]) == ["window_id", "receipt", "privacy", "budget"]
    assert first["id"] == last["id"] and first["object"] == "chat.completion.chunk"


# ------------------------------------------------------------------ a busy ledger
@pytest.fixture()
def stale_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every count a query derives its number from is already stale when it appends (as
    if other writers always appended a record of the account first)."""
    counted = LedgerCounter.used

    def stale(self: LedgerCounter, account: str, *, wait: bool = True) -> int:
        n = counted(self, account, wait=wait)
        return n if wait else n + 1

    monkeypatch.setattr(LedgerCounter, "used", stale)


def test_a_busy_ledger_is_a_503_with_retry_after_that_spends_nothing(
    state: Path, app: Any, stale_ledger: None
) -> None:
    serving = Serving(ServiceProvider(ServiceState(state, create=False)), ReferenceReader())
    try:
        before = serving.budget("alice")
        assert isinstance(before, NoisyTopKBudgetStatus)
        with pytest.raises(BusyError, match="too busy"):
            serving.retrieve("alice", RetrieveRequest(query="who has asthma?"))
        records = serving.records(serving.provider.window_id(), 0, None).root
    finally:
        serving.provider.close()
    key = ServiceState(state, create=False).create_key("alice").token
    r = TestClient(app).post(
        "/v1/retrieve",
        json={"query": "who has asthma?"},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert r.status_code == 503, r.text
    assert r.json()["detail"] == "The ledger is too busy for this account; retry the query."
    assert r.headers["Retry-After"] == "1"
    after = TestClient(app).get("/v1/budget", headers={"Authorization": f"Bearer {key}"})
    assert after.json()["used"] == before.used  # nothing was spent
    assert TestClient(app).get("/v1/audit/windows/W1/records").json() == records


def test_a_request_whose_client_left_while_it_waited_spends_nothing(state: Path) -> None:
    """A burst of slow requests queues the rest for a thread; one whose client has gone by
    the time it starts is dropped before anything private is read."""
    serving = Serving(ServiceProvider(ServiceState(state, create=False)), ReferenceReader())
    try:
        before = serving.budget("alice")
        assert isinstance(before, NoisyTopKBudgetStatus)
        for call in (
            lambda: serving.retrieve("alice", RetrieveRequest(query="q"), None, lambda: True),
            lambda: serving.answer("alice", AnswerRequest(query="q"), "k-1", lambda: True),
        ):
            with pytest.raises(ClientGoneError):
                call()
        after = serving.budget("alice")
        assert isinstance(after, NoisyTopKBudgetStatus) and after.used == before.used
        # the key of a request dropped so is not kept: sent again, it is answered
        served = serving.answer("alice", AnswerRequest(query="q"), "k-1", lambda: False)
        assert served.receipt is not None
    finally:
        serving.provider.close()


def test_readiness_is_a_503_while_the_state_does_not_answer(
    app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = TestClient(app)
    assert client.get("/readyz").json() == {"status": "ready", "window_id": "W1"}

    def lost(_self: Any) -> None:
        raise BackendError("the database connection was lost")

    monkeypatch.setattr(ServiceState, "open_window_id", lost)
    r = client.get("/readyz")
    assert r.status_code == 503 and r.headers["Retry-After"] == "5"
    assert r.json() == error_body(503, "The service's state does not answer.", "not_ready")
    assert client.get("/healthz").json() == {"status": "ok"}  # the process still is
