"""The HTTP API (FastAPI; the ``service`` extra): private retrieval, answers, and the audit.

Accounts authenticate with ``Authorization: Bearer KEY`` (→ the account → its tenant,
nothing else):

* ``POST /v1/retrieve`` ``{"query": str, "k": int?}`` → the private top-K (id, text),
  the privacy spent, the budget left and the signed receipt;
* ``POST /v1/answer`` ``{"query": str, "k": int?, "max_tokens": int?}`` → the RAG answer
  with the same fields;
* ``POST /v1/chat/completions`` — OpenAI-compatible (the last user message is the query);
  the receipt, privacy and budget ride in the extra field ``ragprivacy``; no
  log-probabilities are returned;
* ``GET /v1/budget`` — what the account has left in the open window.

There is no endpoint that returns a document by id: reading the datastore without the
private retrieval would void the guarantee. Public audit endpoints (no key):
``GET /v1/audit/windows``, and per window ``/commitments``, ``/tree-head``,
``/records?start=&end=``, ``/proofs/inclusion?position=&size=``,
``/proofs/consistency?old=&new=`` and ``/coalition`` (once closed).

Every refusal is a 4xx with a one-line ``detail`` (401 bad key, 409 no open window, 413
oversized body, 422 malformed body, 429 with ``Retry-After`` over the rate limit, 404
unknown window) and spends nothing; an unexpected error is a 500 that names nothing.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ragprivacy.errors import BackendError, BudgetExhaustedError, ConfigError, RagPrivacyError
from ragprivacy.generate import Generator, create_generator
from ragprivacy.service.provider import ServiceProvider, WindowClosedError
from ragprivacy.service.state import AuthError, ServiceState

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


def _error(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def create_app(state_dir: str | Path, *, generator: str | Generator = "reference") -> FastAPI:
    """The service's ASGI app over the state directory ``state_dir``."""
    state = ServiceState(state_dir, create=False)
    provider = ServiceProvider(state)
    gen = create_generator(generator) if isinstance(generator, str) else generator
    app = FastAPI(
        title="ragprivacy",
        summary="Multi-tenant private RAG with a verifiable audit.",
        version="1",
    )

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Any) -> Any:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return _error(413, f"Request body over {MAX_BODY_BYTES} bytes.")
        return await call_next(request)

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

    @app.post("/v1/answer")
    def answer(body: AnswerRequest, who: str = auth) -> dict[str, Any]:
        served, completion = provider.answer(
            who, body.query, gen, k=body.k, max_tokens=body.max_tokens
        )
        return {"answer": completion.text, **served.to_dict()}

    @app.post("/v1/chat/completions")
    def chat(body: ChatRequest, who: str = auth) -> dict[str, Any]:
        users = [m.content for m in body.messages if m.role == "user" and m.content.strip()]
        if not users:
            raise ConfigError("The chat needs a non-empty user message (it is the query).")
        served, completion = provider.answer(who, users[-1], gen, max_tokens=body.max_tokens)
        extra = served.to_dict()
        extra.pop("documents")  # the chat answer carries the text, not the documents
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": completion.text},
                    "finish_reason": "stop",
                    "logprobs": None,
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


class _NotFound(Exception):
    """A window (or its coalition claim) that does not exist yet: 404, one body for all."""


def app_from_env() -> FastAPI:
    """The app of ``ragprivacy serve`` (each worker process builds its own)."""
    import os

    state = os.environ.get("RAGPRIVACY_STATE")
    if not state:
        raise ConfigError("RAGPRIVACY_STATE is not set; start the service with ragprivacy serve.")
    return create_app(state, generator=os.environ.get("RAGPRIVACY_GENERATOR", "reference"))
