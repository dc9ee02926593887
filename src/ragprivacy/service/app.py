"""The HTTP API (FastAPI; the ``service`` extra): private retrieval, answers, and the audit.

Accounts authenticate with ``Authorization: Bearer KEY`` (→ the account → its tenant,
nothing else):

* ``POST /v1/retrieve`` ``{"query": str, "k": int?}`` → the private top-K (id, text),
  the privacy spent, the budget left and the signed receipt;
* ``POST /v1/answer`` ``{"query": str, "k": int?, "max_tokens": int?}`` → the RAG answer
  with the same fields;
* ``POST /v1/chat/completions`` — OpenAI-compatible (the last user message is the query);
  the receipt, privacy and budget ride in the extra field ``ragprivacy``; ``stream=true``
  sends the finished answer as server-sent chunks (the last one carries ``ragprivacy``);
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
nothing. **A failure after retrieval is an answer** (:mod:`ragprivacy.service.failures`):
a generation that fails once the documents were read is a 502 that was charged like an
answer, because whether it fails can depend on the documents; only a generator that
was never reached is a 503 that spends nothing, a few times per account and window. An
unexpected error is a 500 that names nothing.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ragprivacy.errors import (
    BackendError,
    BudgetExhaustedError,
    ConfigError,
    GeneratorUnavailableError,
    RagPrivacyError,
)
from ragprivacy.generate import Generator, PromptBudget, create_generator
from ragprivacy.service.provider import ServiceProvider, WindowClosedError
from ragprivacy.service.state import AuthError, ServiceState
from ragprivacy.types import Completion

__all__ = ["MAX_BODY_BYTES", "app_from_env", "create_app"]

MAX_BODY_BYTES = 64 * 1024
_log = logging.getLogger("ragprivacy.service")


class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=4096)
    k: int | None = Field(default=None, ge=1, le=100)


class AnswerRequest(RetrieveRequest):
    max_tokens: int | None = Field(default=None, ge=1, le=512)


class ChatMessage(BaseModel):
    role: str = Field(max_length=32)
    content: str = Field(max_length=4096)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # OpenAI clients send more than we use
    model: str = Field(default="ragprivacy", max_length=128)
    messages: list[ChatMessage] = Field(min_length=1, max_length=64)
    max_tokens: int | None = Field(default=None, ge=1, le=512)
    stream: bool = False
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def create_app(
    state_dir: str | Path,
    *,
    generator: str | Generator = "reference",
    identity_key: str | Path | None = None,
    prompt_budget: PromptBudget | None = None,
) -> FastAPI:
    """The service's ASGI app over the state ``state_dir`` (a directory, or a PostgreSQL
    URL with the ``identity_key`` file); ``prompt_budget`` shapes answers' prompts
    (default :class:`PromptBudget()` with the generator's context)."""
    state = ServiceState(state_dir, create=False, identity_key=identity_key)
    provider = ServiceProvider(state, prompt_budget=prompt_budget)
    gen = create_generator(generator) if isinstance(generator, str) else generator
    app = FastAPI(
        title="ragprivacy",
        summary="Multi-tenant private RAG with a verifiable audit.",
        version="1",
    )

    app.add_middleware(_BodyLimit, limit=MAX_BODY_BYTES)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # An unroutable path (e.g. a window id with an encoded '/') is unknown like any
        # other: the one 404 body, so a path reveals nothing the router matched.
        if exc.status_code == 404:
            return _error(404, "Not found.")
        return _error(exc.status_code, str(exc.detail).splitlines()[0], dict(exc.headers or {}))

    @app.exception_handler(AuthError)
    async def on_auth(_: Request, exc: AuthError) -> JSONResponse:
        return _error(401, "Invalid API key.", {"WWW-Authenticate": "Bearer"})

    @app.exception_handler(BudgetExhaustedError)
    async def on_budget(_: Request, exc: BudgetExhaustedError) -> JSONResponse:
        # The rate limit resets only with the next window, which the admin opens.
        return _error(429, str(exc).splitlines()[0], {"Retry-After": "3600"})

    @app.exception_handler(WindowClosedError)
    async def on_window(_: Request, exc: WindowClosedError) -> JSONResponse:
        return _error(409, str(exc).splitlines()[0])

    @app.exception_handler(GeneratorUnavailableError)
    async def on_unreached(_: Request, exc: GeneratorUnavailableError) -> JSONResponse:
        # its message names the upstream's address: the operator's, not the account's
        return _error(503, "The generator could not be reached; nothing was charged. Retry later.")

    @app.exception_handler(BackendError)
    async def on_backend(_: Request, exc: BackendError) -> JSONResponse:
        return _error(502, str(exc).splitlines()[0])

    @app.exception_handler(RagPrivacyError)
    async def on_bad_input(_: Request, exc: RagPrivacyError) -> JSONResponse:
        return _error(400, str(exc).splitlines()[0])

    @app.exception_handler(RequestValidationError)
    async def on_invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error(422, f"Malformed request: {where or 'body'}: {first.get('msg', 'invalid')}.")

    @app.exception_handler(Exception)
    async def on_crash(_: Request, exc: Exception) -> JSONResponse:
        _log.error("internal error (%s)", type(exc).__name__)  # never the message: it may hold data
        return _error(500, "Internal error; nothing was spent or recorded.")

    def account(authorization: Annotated[str | None, Header()] = None) -> str:
        if not authorization or not authorization.startswith("Bearer "):
            raise AuthError("Missing API key.")
        return state.authenticate(authorization[len("Bearer ") :])

    auth = Depends(account)

    @app.post("/v1/retrieve")
    def retrieve(body: RetrieveRequest, who: str = auth) -> dict[str, Any]:
        return provider.retrieve(who, body.query, k=body.k).to_dict()

    def answered(
        who: str, query: str, k: int | None, max_tokens: int | None
    ) -> tuple[Completion, dict[str, Any]]:
        """The account's answer (its tenant's mode) and the fields that ride with it."""
        if provider.votes(who):
            for name, value in (("k", k), ("max_tokens", max_tokens)):
                if value is not None:
                    raise ConfigError(
                        f"'{name}' does not apply to this account's tenant: it releases a "
                        "DP-voted answer whose length and documents the vote fixes."
                    )
            voted = provider.answer_voted(who, query, gen)
            done = Completion(voted.text, voted.response.tokens)
            return done, {
                "window_id": provider.window_id(),
                "documents": [],
                "receipt": None,
                "privacy": voted.privacy,
                "budget": voted.budget,
            }
        served, completion = provider.answer(who, query, gen, k=k, max_tokens=max_tokens)
        return completion, served.to_dict()

    @app.post("/v1/answer")
    def answer(body: AnswerRequest, who: str = auth) -> dict[str, Any]:
        completion, fields = answered(who, body.query, body.k, body.max_tokens)
        return {"answer": completion.text, **fields}

    @app.post("/v1/chat/completions", response_model=None)
    def chat(body: ChatRequest, who: str = auth) -> dict[str, Any] | StreamingResponse:
        users = [m.content for m in body.messages if m.role == "user" and m.content.strip()]
        if not users:
            raise ConfigError("The chat needs a non-empty user message (it is the query).")
        if body.logprobs or body.top_logprobs:
            if not provider.logprobs_allowed(who):
                raise ConfigError(
                    "This account's tenant does not allow log-probabilities (a noisy_topk "
                    "tenant may, with 'tenant create --logprobs'); ask without them."
                )
            if body.top_logprobs:
                raise ConfigError(
                    "'top_logprobs' is not supported: only the chosen tokens' log-"
                    "probabilities are returned (logprobs=true)."
                )
        # The whole answer exists (and is charged) before the first byte is sent, so a
        # refusal is still an ordinary 4xx and a stream never stops halfway for a reason
        # the account pays for.
        completion, extra = answered(who, users[-1], None, body.max_tokens)
        extra.pop("documents")  # the chat answer carries the text, not the documents
        head = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": body.model,
        }
        if body.stream:
            return StreamingResponse(
                _sse_chunks(head, completion.text, extra), media_type="text/event-stream"
            )
        return {
            **head,
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": completion.text},
                    "finish_reason": "stop",
                    "logprobs": _logprobs(completion) if body.logprobs else None,
                }
            ],
            "usage": {
                "prompt_tokens": 0,
                "completion_tokens": len(completion.tokens),
                "total_tokens": len(completion.tokens),
            },
            "ragprivacy": extra,
        }

    @app.get("/v1/budget")
    def budget(who: str = auth) -> dict[str, Any]:
        return provider.budget(who)

    # ------------------------------------------------------------------ public audit
    def _window(window_id: str) -> Any:
        try:
            return state.window(window_id)
        except ConfigError:
            raise _NotFound from None

    @app.exception_handler(_NotFound)
    async def on_missing(_: Request, exc: _NotFound) -> JSONResponse:
        return _error(404, "Not found.")

    @app.get("/v1/audit/windows")
    def windows() -> list[dict[str, Any]]:
        return [{"window_id": w.window_id, "status": w.status} for w in state.windows()]

    @app.get("/v1/audit/windows/{window_id}/commitments")
    def commitments(window_id: str) -> dict[str, Any]:
        out: dict[str, Any] = _window(window_id).commitments
        return out

    @app.get("/v1/audit/windows/{window_id}/tree-head")
    def tree_head(window_id: str) -> dict[str, Any]:
        _window(window_id)
        return provider.tree_head(window_id).to_dict()

    @app.get("/v1/audit/windows/{window_id}/records")
    def records(
        window_id: str,
        start: Annotated[int, Query(ge=0)] = 0,
        end: Annotated[int | None, Query(ge=0)] = None,
    ) -> list[str]:
        _window(window_id)
        return provider.records(window_id, start, end)

    @app.get("/v1/audit/windows/{window_id}/proofs/inclusion")
    def inclusion(
        window_id: str, position: Annotated[int, Query(ge=0)], size: Annotated[int, Query(ge=1)]
    ) -> list[str]:
        _window(window_id)
        return provider.inclusion_proof(window_id, position, size)

    @app.get("/v1/audit/windows/{window_id}/proofs/consistency")
    def consistency(
        window_id: str, old: Annotated[int, Query(ge=0)], new: Annotated[int, Query(ge=0)]
    ) -> list[str]:
        _window(window_id)
        return provider.consistency_proof(window_id, old, new)

    @app.get("/v1/audit/windows/{window_id}/coalition")
    def coalition(window_id: str) -> dict[str, Any]:
        w = _window(window_id)
        if w.coalition is None:
            raise _NotFound
        out: dict[str, Any] = w.coalition
        return out

    return app


def _logprobs(completion: Completion) -> dict[str, Any] | None:
    """OpenAI's ``choices[].logprobs`` for the chosen tokens (None when the generator
    exposes no probabilities)."""
    if completion.logprobs is None:
        return None
    return {
        "content": [
            {"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
            for t, lp in zip(completion.tokens, completion.logprobs)
        ]
    }


def _sse_chunks(head: dict[str, Any], text: str, extra: dict[str, Any]) -> Iterator[str]:
    """An answer as OpenAI's ``chat.completion.chunk`` server-sent events: the text in one
    delta, then the finish reason with the ``ragprivacy`` field, then ``[DONE]``."""
    chunk = {**head, "object": "chat.completion.chunk"}
    deltas = [
        {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None},
        {"index": 0, "delta": {}, "finish_reason": "stop"},
    ]
    yield f"data: {json.dumps({**chunk, 'choices': [deltas[0]]})}\n\n"
    yield f"data: {json.dumps({**chunk, 'choices': [deltas[1]], 'ragprivacy': extra})}\n\n"
    yield "data: [DONE]\n\n"


class _TooLarge(Exception):
    """The request body passed the limit while it was read."""


class _BodyLimit:
    """Refuse a request body over ``limit`` bytes with 413, whether it declares its length
    or arrives chunked: the body is counted as it is read, so no client makes the
    service buffer more than ``limit`` bytes (nothing is spent: the refusal comes before
    the request reaches an endpoint)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"detail": f"Request body over {self.limit} bytes."}).encode()
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


class _NotFound(Exception):
    """A window (or its coalition claim) that does not exist yet: 404, one body for all."""


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
    )
