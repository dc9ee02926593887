"""The HTTP API (FastAPI; the ``service`` extra): private retrieval, answers, and the audit.

Accounts authenticate with ``Authorization: Bearer KEY`` (→ the account → its tenant,
nothing else):

* ``POST /v1/retrieve`` ``{"query": str, "k": int?}`` → the private top-K (id, text),
  the privacy spent, the budget left and the signed receipt;
* ``POST /v1/answer`` ``{"query": str, "k": int?, "max_tokens": int?}`` → the RAG answer
  with the same fields;
* ``POST /v1/chat/completions`` — OpenAI-compatible (the last user message is the query);
  the receipt, privacy and budget ride in the extra field ``ragprivacy``; ``stream=true``
  sends the answer as server-sent chunks token by token as the generator streams it,
  charged before the first (the last chunk carries ``ragprivacy``; a failure after the
  first is an ``error`` event with the receipt);
  ``logprobs=true`` returns the chosen tokens' log-probabilities only where the tenant's
  policy allows them (a ``noisy_topk`` tenant created with ``--logprobs``), else 400;
* voting tenants (``dp_vote``, ``murag``, ``murag_ada``) answer ``/v1/answer`` and the
  chat with a DP-voted text only: no documents, no receipt; ``/v1/retrieve`` refuses them;
* ``GET /v1/budget`` — what the account has left in the open window.

There is no endpoint that returns a document by id: reading the datastore without the
private retrieval would void the guarantee. Public audit endpoints (no key):
``GET /v1/audit/windows``, and per window ``/commitments``, ``/tree-head``,
``/records?start=&end=``, ``/proofs/inclusion?position=&size=``,
``/proofs/consistency?old=&new=`` and ``/coalition`` (once closed).

Every refusal is a 4xx with a one-line ``detail`` (401 bad key, 409 no open window, 413
oversized body, 422 malformed body, 429 with ``Retry-After`` over the rate limit, 404
unknown window, 400 a prompt that could overflow the generator's context) and spends
nothing; so does a 503 with ``Retry-After`` when the ledger was too busy for the
account's query. **A failure after retrieval is an answer**
(:mod:`ragprivacy.service.failures`): a generation that fails once the documents were read
is a 502 that was charged like an answer, because whether it fails can depend on the
documents; only a generator that was never reached is a 503 that spends nothing, a few
times per account and window. An unexpected error is a 500 that names nothing.

This module holds only the edges: the routes, each of which parses its request model
(:mod:`ragprivacy.service.protocol`), calls one method of
:class:`~ragprivacy.service.serving.Serving` and returns its response model; the body
limit; and :data:`ERROR_STATUS`, the one table from an error to its status code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragprivacy.errors import (
    AuthError,
    BackendError,
    BudgetExhaustedError,
    BusyError,
    ChargedFailureError,
    ConfigError,
    DataError,
    GeneratorUnavailableError,
    LogSealedError,
    RagPrivacyError,
    ServiceStateError,
    TenantAccessError,
    WindowClosedError,
)
from ragprivacy.generate import Generator, PromptBudget, create_generator
from ragprivacy.service.idempotency import IdempotencyInProgressError
from ragprivacy.service.metrics import CONTENT_TYPE_LATEST, ServiceMetrics
from ragprivacy.service.operator import render_operator_page
from ragprivacy.service.protocol import (
    AnswerRequest,
    AnswerResponse,
    BudgetResponse,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    CoalitionResponse,
    CommitmentsResponse,
    Health,
    ModelList,
    ProofResponse,
    Readiness,
    RecordsResponse,
    RetrieveRequest,
    RetrieveResponse,
    TreeHeadResponse,
    WindowSummary,
    sse_event,
)
from ragprivacy.service.provider import ServiceProvider, close_iterator
from ragprivacy.service.schedule import seconds_until_rotation
from ragprivacy.service.serving import ClientGoneError, NotFoundError, NotReadyError, Serving
from ragprivacy.service.state import ServiceState
from ragprivacy.service.throttle import (
    RESERVED_THREADS,
    AccountBusyError,
    AuthThrottledError,
    FailedAuthLimit,
    InFlightLimit,
)

__all__ = [
    "ERROR_STATUS",
    "MAX_BODY_BYTES",
    "ErrorStatus",
    "app_from_env",
    "create_app",
    "error_body",
    "error_status",
]

MAX_BODY_BYTES = 64 * 1024
_log = logging.getLogger("ragprivacy.service")


@dataclass(frozen=True, slots=True)
class ErrorStatus:
    """How the service answers one class of error: the status, its headers and, where the
    error's own message must not reach the caller, the fixed ``detail`` sent instead (else
    the message's first line)."""

    error: type[Exception]
    status: int
    detail: str | None = None
    headers: tuple[tuple[str, str], ...] = ()


#: Error → HTTP answer, most specific first: the first row the error is an instance of
#: decides. Every ``RagPrivacyError`` reaches a row, and so does anything else (500).
ERROR_STATUS: tuple[ErrorStatus, ...] = (
    # one body for every bad key: it names no account and no reason
    ErrorStatus(AuthError, 401, "Invalid API key.", (("WWW-Authenticate", "Bearer"),)),
    ErrorStatus(AuthThrottledError, 429),  # its Retry-After is the error's own
    ErrorStatus(AccountBusyError, 429, headers=(("Retry-After", "1"),)),
    ErrorStatus(TenantAccessError, 403),
    ErrorStatus(ClientGoneError, 499),  # nginx's "client closed request": nobody reads it
    ErrorStatus(WindowClosedError, 409),
    ErrorStatus(IdempotencyInProgressError, 409, headers=(("Retry-After", "1"),)),
    ErrorStatus(LogSealedError, 409),
    ErrorStatus(BusyError, 503, headers=(("Retry-After", "1"),)),
    ErrorStatus(NotReadyError, 503, headers=(("Retry-After", "5"),)),
    ErrorStatus(ServiceStateError, 409),
    ErrorStatus(NotFoundError, 404, "Not found."),
    # the rate limit resets only with the next window, which the admin opens
    ErrorStatus(BudgetExhaustedError, 429, headers=(("Retry-After", "3600"),)),
    # its message names the upstream's address: the operator's, not the account's
    ErrorStatus(
        GeneratorUnavailableError,
        503,
        "The generator could not be reached; nothing was charged. Retry later.",
    ),
    ErrorStatus(ChargedFailureError, 502),  # its message withholds the backend's
    ErrorStatus(BackendError, 502),
    ErrorStatus(ConfigError, 400),
    ErrorStatus(DataError, 400),
    ErrorStatus(RagPrivacyError, 400),
    # never the message: it may hold data
    ErrorStatus(Exception, 500, "Internal error; nothing was spent or recorded."),
)


def error_status(exc: BaseException) -> ErrorStatus:
    """The row of :data:`ERROR_STATUS` that answers ``exc``."""
    return next(row for row in ERROR_STATUS if isinstance(exc, row.error))


#: OpenAI's error ``type`` for each status (its clients read ``error.message``)
_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def error_body(status: int, detail: str, code: str | None = None) -> dict[str, Any]:
    """A refusal's body: the one-line ``detail``, and the same as OpenAI's ``error``
    object (``message``, ``type``, ``code``), which OpenAI clients show."""
    kind = _ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return {"detail": detail, "error": {"message": detail, "type": kind, "code": code}}


def _code(exc: BaseException) -> str:
    """``BudgetExhaustedError`` → ``budget_exhausted``."""
    name = type(exc).__name__.removesuffix("Error") or type(exc).__name__
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _error(
    status: int,
    detail: str,
    headers: dict[str, str] | None = None,
    code: str | None = None,
    **extra: Any,
) -> JSONResponse:
    body = {**error_body(status, detail, code), **extra}
    return JSONResponse(body, status_code=status, headers=headers)


def _refusal(exc: Exception) -> tuple[ErrorStatus, str, str]:
    """``exc``'s row of :data:`ERROR_STATUS`, its one-line detail and its code."""
    row = error_status(exc)
    if row.error is Exception:
        _log.error("internal error (%s)", type(exc).__name__)  # never the message
    lines = str(exc).splitlines()
    detail = row.detail or (lines[0] if lines else type(exc).__name__)
    return row, detail, "internal_error" if row.error is Exception else _code(exc)


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    row, detail, code = _refusal(exc)
    headers = dict(row.headers)
    if isinstance(exc, AuthThrottledError):
        headers["Retry-After"] = str(exc.retry_after)
    renews = getattr(request.app.state, "renews_in", None)
    if isinstance(exc, BudgetExhaustedError) and renews is not None:
        headers["Retry-After"] = str(renews())  # the next window, on the schedule
    _count_refusal(request, row.status, code)
    if isinstance(exc, ChargedFailureError) and exc.receipt is not None:
        # the failed answer's record was appended: its receipt goes to the account, which
        # submits every receipt it holds (a record it has none for is one it never asked for)
        return _error(row.status, detail, headers or None, code, receipt=exc.receipt)
    return _error(row.status, detail, headers or None, code)


async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    # An unroutable path (e.g. a window id with an encoded '/') is unknown like any
    # other: the one 404 body, so a path reveals nothing the router matched.
    _count_refusal(request, exc.status_code, "not_found" if exc.status_code == 404 else None)
    if exc.status_code == 404:
        return _error(404, "Not found.", code="not_found")
    return _error(exc.status_code, str(exc.detail).splitlines()[0], dict(exc.headers or {}))


async def _on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    _count_refusal(request, 422, "malformed_request")
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    return _error(
        422,
        f"Malformed request: {where or 'body'}: {first.get('msg', 'invalid')}.",
        code="malformed_request",
    )


def create_app(
    state_dir: str | Path,
    *,
    generator: str | Generator = "reference",
    identity_key: str | Path | None = None,
    prompt_budget: PromptBudget | None = None,
    api_docs: bool = False,
    auth_limit: FailedAuthLimit | None = None,
    inflight: InFlightLimit | None = None,
    rotate_every: int | None = None,
    access_log: bool = False,
    metrics: bool = False,
) -> FastAPI:
    """The service's ASGI app over the state ``state_dir`` (a directory, or a PostgreSQL
    URL with the ``identity_key`` file); ``prompt_budget`` shapes answers' prompts
    (default :class:`PromptBudget()` with the generator's context). ``api_docs`` serves
    ``/openapi.json``, ``/docs`` and ``/redoc`` (off by default: they are not part of the
    API). A path with a trailing slash is not redirected (a redirect would be built from
    the request's ``Host``), and every response says ``Cache-Control: no-store``.
    ``auth_limit``: the failed key checks a client may make (default
    :class:`FailedAuthLimit()`); ``inflight``: the requests one account may have in
    progress at once (default :class:`InFlightLimit()`); ``rotate_every``: the window
    schedule's period in seconds (a spent budget's 429 then says in ``Retry-After`` when
    the next window opens, :mod:`ragprivacy.service.schedule`); ``access_log``: a JSON
    line per request on the ``ragprivacy.access`` logger (:class:`_AccessLog`);
    ``metrics``: ``GET /metrics`` for Prometheus (:mod:`ragprivacy.service.metrics`)."""
    state = ServiceState(state_dir, create=False, identity_key=identity_key)
    gen = create_generator(generator) if isinstance(generator, str) else generator
    provider = ServiceProvider(state, prompt_budget=prompt_budget)
    meter = ServiceMetrics(provider.window_gauge) if metrics else None
    serving = Serving(provider, gen, auth_limit, inflight, on_spent=meter.spent if meter else None)
    limits = serving.inflight

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # private requests hold at most limits.total threads; the pool keeps
        # RESERVED_THREADS more for the public audit endpoints and the health checks
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(limiter.total_tokens, limits.total + RESERVED_THREADS)
        yield

    app = _App(
        lifespan=lifespan,
        title="ragprivacy",
        summary="Multi-tenant private RAG with a verifiable audit.",
        version="1",
        redirect_slashes=False,
        openapi_url="/openapi.json" if api_docs else None,
        docs_url="/docs" if api_docs else None,
        redoc_url="/redoc" if api_docs else None,
    )
    if rotate_every is not None:
        period = int(rotate_every)

        def renews_in() -> int:
            open_ = state.open_windows()
            if not open_:
                return 1
            return seconds_until_rotation(int(open_[0].commitments["published_at"]), period)

        app.state.renews_in = renews_in
    app.add_middleware(_BodyLimit, limit=MAX_BODY_BYTES)
    app.add_middleware(_NoStore)
    if meter is not None:
        app.state.metrics = meter
        app.add_middleware(_Metered, fastapi=app, metrics=meter)

        @app.get("/metrics", include_in_schema=False)
        def scrape() -> Response:
            return Response(meter.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/operator", include_in_schema=False)
    def operator(
        request: Request, authorization: Annotated[str | None, Header()] = None
    ) -> HTMLResponse:
        serving.authenticate_operator(authorization, request.client.host if request.client else "")
        refusals = meter.refusal_counts() if meter is not None else None
        return HTMLResponse(render_operator_page(serving.provider, refusals))

    if access_log:
        app.add_middleware(_AccessLog)  # outermost: it times and logs every answer
    app.exception_handler(StarletteHTTPException)(_on_http)
    app.exception_handler(RequestValidationError)(_on_invalid)
    for caught in (RagPrivacyError, Exception):  # Exception: the 500 row, after the rest
        app.exception_handler(caught)(_on_error)
    _add_routes(app, serving)
    return app


#: a request sent again under the same key is answered once (service.idempotency)
Key = Annotated[str | None, Header(alias="Idempotency-Key")]


def _gone(request: Request) -> Callable[[], bool]:
    """Whether ``request``'s client has closed its connection, asked from the worker
    thread a synchronous route runs on."""

    def gone() -> bool:
        return bool(anyio.from_thread.run(request.is_disconnected))

    return gone


async def _events(chunks: Iterator[ChatCompletionChunk]) -> AsyncIterator[str]:
    """The chunks as OpenAI's server-sent events, each read on a worker thread as the
    generator produces it, then ``[DONE]``. A failure while streaming (it is charged: the
    stream began after the record was appended) ends the stream with an event holding
    OpenAI's ``error`` object and the receipt, which OpenAI's clients raise. However the
    stream ends — the client gone included — the iterator is closed, which stops the
    generation and frees the account's slot."""
    try:
        while True:
            try:
                chunk = await anyio.to_thread.run_sync(next, chunks, None)
            except Exception as exc:
                yield _error_event(exc)
                return
            if chunk is None:
                break
            yield sse_event(chunk)
        yield "data: [DONE]\n\n"
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(close_iterator, chunks)


def _error_event(exc: Exception) -> str:
    """The stream's last event for a failure after its first chunk: as the refusal's
    body (:data:`ERROR_STATUS`), with the receipt of a charged failure."""
    row, detail, code = _refusal(exc)
    body = error_body(row.status, detail, code)
    del body["detail"]
    receipt = getattr(exc, "receipt", None)
    if isinstance(exc, ChargedFailureError) and receipt is not None:
        body["receipt"] = receipt
    return f"data: {json.dumps(body)}\n\n"


def _add_routes(app: FastAPI, serving: Serving) -> None:
    """The routes: each parses its request, calls one :class:`Serving` method and returns
    its response model."""
    queue: list[anyio.Semaphore] = []

    async def private_turn() -> AsyncIterator[None]:
        # at most inflight.total private requests run at once; the others wait here, in
        # arrival order, on the event loop — holding no thread, so the public routes and
        # the health checks always find one (the pool keeps RESERVED_THREADS more)
        if not queue:
            queue.append(anyio.Semaphore(serving.inflight.total))
        async with queue[0]:
            yield

    def account(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
        return serving.authenticate(authorization, request.client.host if request.client else "")

    auth = Depends(account)
    turn = Depends(private_turn)

    @app.post("/v1/retrieve", response_model=RetrieveResponse)
    def retrieve(
        body: RetrieveRequest,
        request: Request,
        key: Key = None,
        who: str = auth,
        _turn: None = turn,
    ) -> RetrieveResponse:
        return serving.retrieve(who, body, key, _gone(request))

    @app.post("/v1/answer", response_model=AnswerResponse)
    def answer(
        body: AnswerRequest,
        request: Request,
        key: Key = None,
        who: str = auth,
        _turn: None = turn,
    ) -> AnswerResponse:
        return serving.answer(who, body, key, _gone(request))

    @app.post("/v1/chat/completions", response_model=ChatCompletion, responses=_STREAMED)
    def chat(
        body: ChatRequest,
        request: Request,
        key: Key = None,
        who: str = auth,
        _turn: None = turn,
    ) -> ChatCompletion | StreamingResponse:
        out = serving.chat(who, body, key, _gone(request))
        if isinstance(out, ChatCompletion):
            return out
        return StreamingResponse(_events(out), media_type="text/event-stream")

    @app.get("/v1/models", response_model=ModelList)
    def models(who: str = auth) -> ModelList:
        return serving.models()

    @app.get("/v1/budget", response_model=BudgetResponse)
    def budget(who: str = auth) -> BudgetResponse:
        return serving.budget(who)

    # ------------------------------------------------------------------ operations
    @app.get("/healthz", response_model=Health)
    def healthz() -> Health:
        return serving.health()

    @app.get("/readyz", response_model=Readiness)
    def readyz() -> Readiness:
        return serving.ready()

    # ------------------------------------------------------------------ public audit
    @app.get("/v1/audit/windows", response_model=list[WindowSummary])
    def windows() -> list[WindowSummary]:
        return serving.windows()

    @app.get("/v1/audit/windows/{window_id}/commitments", response_model=CommitmentsResponse)
    def commitments(window_id: str) -> CommitmentsResponse:
        return serving.commitments(window_id)

    @app.get("/v1/audit/windows/{window_id}/tree-head", response_model=TreeHeadResponse)
    def tree_head(window_id: str) -> TreeHeadResponse:
        return serving.tree_head(window_id)

    @app.get("/v1/audit/windows/{window_id}/records", response_model=RecordsResponse)
    def records(
        window_id: str,
        start: Annotated[int, Query(ge=0)] = 0,
        end: Annotated[int | None, Query(ge=0)] = None,
    ) -> RecordsResponse:
        return serving.records(window_id, start, end)

    @app.get("/v1/audit/windows/{window_id}/proofs/inclusion", response_model=ProofResponse)
    def inclusion(
        window_id: str, position: Annotated[int, Query(ge=0)], size: Annotated[int, Query(ge=1)]
    ) -> ProofResponse:
        return serving.inclusion_proof(window_id, position, size)

    @app.get("/v1/audit/windows/{window_id}/proofs/consistency", response_model=ProofResponse)
    def consistency(
        window_id: str, old: Annotated[int, Query(ge=0)], new: Annotated[int, Query(ge=0)]
    ) -> ProofResponse:
        return serving.consistency_proof(window_id, old, new)

    @app.get("/v1/audit/windows/{window_id}/coalition", response_model=CoalitionResponse)
    def coalition(window_id: str) -> CoalitionResponse:
        return serving.coalition(window_id)


_CHUNK_REF = "#/components/schemas/ChatCompletionChunk"
#: The chat's other answer: ``stream=true`` sends :class:`ChatCompletionChunk` events.
_STREAMED: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": {"$ref": _CHUNK_REF}}}}
}


class _App(FastAPI):
    """The app, whose OpenAPI document also holds the stream chunk's schema (no route
    returns it as a model, so FastAPI would not list it)."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            schema = super().openapi()
            _, defs = models_json_schema(
                [(ChatCompletionChunk, "serialization")],
                ref_template="#/components/schemas/{model}",
            )
            known = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, model in defs.get("$defs", {}).items():
                known.setdefault(name, model)
        return self.openapi_schema or {}


class _TooLarge(Exception):
    """The request body passed the limit while it was read."""


class _NoStore:
    """``Cache-Control: no-store`` on every response: answers carry documents and
    receipts, which no shared or browser cache should keep."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] != b"cache-control"]
                message = {**message, "headers": [*headers, (b"cache-control", b"no-store")]}
            await send(message)

        await self.app(scope, receive, marked)


_access = logging.getLogger("ragprivacy.access")


class _Timed:
    """An ASGI middleware that hands each HTTP request's status and time to
    :meth:`finished` once it is answered (or failed: 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def finished(self, scope: Scope, status: int, seconds: float) -> None:
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def noted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noted)
        finally:
            self.finished(scope, status, time.perf_counter() - start)


class _AccessLog(_Timed):
    """One JSON line per request on the ``ragprivacy.access`` logger: method, path (no
    query string), status, milliseconds and the client's address — never a header, a
    body, an account or a query text."""

    def finished(self, scope: Scope, status: int, seconds: float) -> None:
        client = scope.get("client")
        line = {
            "method": scope.get("method"),
            "path": scope.get("path"),
            "status": status,
            "ms": round(seconds * 1000, 1),
            "client": client[0] if client else None,
        }
        _access.info(json.dumps(line))


def _route_of(app: FastAPI, scope: Scope) -> str:
    """The route template a request matched (never its raw path: window ids stay out of
    metric labels), or ``unmatched``."""
    route = scope.get("route")
    if route is not None and hasattr(route, "path"):
        return str(route.path)
    for candidate in app.router.routes:
        match, _ = candidate.matches(scope)
        if match == Match.FULL:
            return str(getattr(candidate, "path", "unmatched"))
    return "unmatched"


class _Metered(_Timed):
    """Counts and times every request for ``/metrics`` (:mod:`ragprivacy.service.metrics`)."""

    def __init__(self, app: ASGIApp, fastapi: FastAPI, metrics: ServiceMetrics) -> None:
        super().__init__(app)
        self.fastapi, self.metrics = fastapi, metrics

    def finished(self, scope: Scope, status: int, seconds: float) -> None:
        self.metrics.observe(_route_of(self.fastapi, scope), status, seconds)


def _count_refusal(request: Request, status: int, code: str | None) -> None:
    metrics = getattr(request.app.state, "metrics", None)
    if metrics is None:
        return
    if status == 502:  # charged like an answer
        metrics.spent(_route_of(request.app, request.scope), None)
    else:
        metrics.refused(code or f"http_{status}")


class _BodyLimit:
    """Refuse a request body over ``limit`` bytes with 413, whether it declares its length
    or arrives chunked: the body is counted as it is read, so no client makes the
    service buffer more than ``limit`` bytes (nothing is spent: the refusal comes before
    the request reaches an endpoint)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def _refuse(self, send: Send) -> None:
        detail = f"Request body over {self.limit} bytes."
        body = json.dumps(error_body(413, detail, "body_too_large")).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await self._refuse(send)
            return
        seen, over, started = 0, False, False

        async def counted() -> Message:
            nonlocal seen, over
            if over:
                raise _TooLarge
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    over = True
                    raise _TooLarge
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if over:  # whatever the app answers to a body it could not read: ours instead
                if message["type"] == "http.response.start" and not started:
                    started = True
                    await self._refuse(send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, guarded)
        except _TooLarge:
            if not started:
                await self._refuse(send)


def app_from_env() -> FastAPI:
    """The app of ``ragprivacy serve`` (each worker process builds its own)."""
    import os

    state = os.environ.get("RAGPRIVACY_STATE")
    if not state:
        raise ConfigError("RAGPRIVACY_STATE is not set; start the service with ragprivacy serve.")
    context = os.environ.get("RAGPRIVACY_CONTEXT_TOKENS")
    budget = PromptBudget(
        doc_tokens=int(os.environ.get("RAGPRIVACY_DOC_TOKENS", "1024")),
        context_tokens=int(context) if context else None,
    )
    return create_app(
        state,
        generator=os.environ.get("RAGPRIVACY_GENERATOR", "reference"),
        identity_key=os.environ.get("RAGPRIVACY_IDENTITY_KEY") or None,
        prompt_budget=budget,
        api_docs=os.environ.get("RAGPRIVACY_API_DOCS") == "1",
        auth_limit=FailedAuthLimit(
            per_client=int(os.environ.get("RAGPRIVACY_AUTH_FAILURES_PER_CLIENT", "20")),
            overall=int(os.environ.get("RAGPRIVACY_AUTH_FAILURES_OVERALL", "120")),
        ),
        inflight=InFlightLimit(
            int(os.environ.get("RAGPRIVACY_MAX_INFLIGHT", "8")),
            int(os.environ.get("RAGPRIVACY_MAX_INFLIGHT_TOTAL", "32")),
        ),
        rotate_every=int(os.environ["RAGPRIVACY_ROTATE_EVERY"])
        if os.environ.get("RAGPRIVACY_ROTATE_EVERY")
        else None,
        access_log=os.environ.get("RAGPRIVACY_ACCESS_LOG") == "1",
        metrics=os.environ.get("RAGPRIVACY_METRICS") == "1",
    )
