"""What each HTTP route does, without HTTP: :class:`Serving` turns a request model into a
response model over a :class:`~ragprivacy.service.ServiceProvider` and a generator.

The routes of :mod:`ragprivacy.service.app` parse a request, call one method here and
return what it returns; every refusal is an exception of :mod:`ragprivacy.errors` (or
:class:`NotFoundError`), which the app maps to a status code in one table. Nothing here
reads a header or builds a response. Needs the ``service`` extra (pydantic).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from ragprivacy.errors import (
    AuthError,
    BackendError,
    ConfigError,
    RagPrivacyError,
    ServiceStateError,
)
from ragprivacy.generate import Generator
from ragprivacy.service.idempotency import Idempotency
from ragprivacy.service.protocol import (
    MODEL,
    AnswerBudget,
    AnswerPrivacy,
    AnswerRequest,
    AnswerResponse,
    AssistantMessage,
    BudgetResponse,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    ChoiceLogprobs,
    ChunkChoice,
    ChunkDelta,
    CoalitionResponse,
    CommitmentsResponse,
    Health,
    ModelCard,
    ModelList,
    NoisyTopKBudget,
    NoisyTopKBudgetStatus,
    NoisyTopKPrivacy,
    ProofResponse,
    RagprivacyFields,
    Readiness,
    RecordsResponse,
    RetrievedDocument,
    RetrieveRequest,
    RetrieveResponse,
    SignedReceipt,
    TokenLogprob,
    TreeHeadResponse,
    Usage,
    VotedPrivacy,
    VotingBudget,
    WindowSummary,
)
from ragprivacy.service.provider import ServedAnswer, ServiceProvider, close_iterator
from ragprivacy.service.state import Window
from ragprivacy.service.throttle import FailedAuthLimit, InFlightLimit
from ragprivacy.types import Completion

__all__ = ["NotFoundError", "Serving"]

_VOTED_PRIVACY: TypeAdapter[Any] = TypeAdapter(VotedPrivacy)


class NotReadyError(ServiceStateError):
    """The service cannot serve now: its state (database) does not answer."""


class ClientGoneError(ServiceStateError):
    """The client left before its request started (it waited for a free thread): nothing
    was read or spent, and nobody is there to answer."""


class NotFoundError(RagPrivacyError):
    """A public audit resource that does not exist (yet): an unknown window, or the
    coalition claim of a window still open. One answer for all, so that a request
    learns nothing from which it was."""


@dataclass(frozen=True, slots=True)
class _Answered:
    """An account's answer and the fields that ride with it."""

    completion: Completion
    window_id: str
    documents: list[RetrievedDocument]
    receipt: SignedReceipt | None
    privacy: AnswerPrivacy
    budget: AnswerBudget

    def fields(self) -> RagprivacyFields:
        """The chat's ``ragprivacy`` field: the chat carries the text, not the documents."""
        return RagprivacyFields(
            window_id=self.window_id,
            receipt=self.receipt,
            privacy=self.privacy,
            budget=self.budget,
        )


def _check_chat(request: ChatRequest) -> None:
    """Refuse a chat request that names another model or relies on a parameter this
    service does not honour (it would otherwise be answered as if it were not there)."""
    if request.model != MODEL:
        raise ConfigError(
            f"Unknown model {request.model!r}; this service serves {MODEL!r} (GET /v1/models)."
        )
    unsupported = {
        "n": request.n not in (None, 1),
        "stop": bool(request.stop),
        "tools": bool(request.tools) or request.tool_choice not in (None, "none"),
        "functions": bool(request.functions) or request.function_call not in (None, "none"),
        "response_format": (request.response_format or {}).get("type", "text") != "text",
        "logit_bias": bool(request.logit_bias),
    }
    named = [name for name, used in unsupported.items() if used]
    if named:
        raise ConfigError(
            f"Not supported here: {', '.join(named)}; one text answer per request is what "
            "the tenant's privacy mode releases. Send the request without it."
        )


def _documents(served: ServedAnswer) -> list[RetrievedDocument]:
    return [RetrievedDocument(id=i, text=t) for i, t in served.documents]


class Serving:
    """The service's handlers over ``provider`` (the open window's private answers and
    the public audit) with ``generator`` for answers; thread-safe like the provider."""

    def __init__(
        self,
        provider: ServiceProvider,
        generator: Generator,
        auth_limit: FailedAuthLimit | None = None,
        inflight: InFlightLimit | None = None,
        *,
        on_spent: Callable[[str, float | None], None] | None = None,
    ) -> None:
        self.provider = provider
        # told (route, ε) of every request that spent privacy (metrics), never a replay
        self.on_spent = on_spent
        self.generator = generator
        self.auth_limit = auth_limit or FailedAuthLimit()
        self.inflight = inflight or InFlightLimit()
        self.idempotency = Idempotency(provider.state)

    # ------------------------------------------------------------------ accounts
    def authenticate(self, authorization: str | None, client: str = "") -> str:
        """The account of an ``Authorization: Bearer KEY`` header; :class:`AuthError`
        (naming nothing) for a missing, malformed, unknown or revoked key, and
        :class:`~ragprivacy.service.throttle.AuthThrottledError` (no hash made) while
        ``client``'s address, or everyone's, has failed too many checks lately."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme != "Bearer" or not token:
            raise AuthError("Missing API key.")
        hashed: list[bool] = []

        def before_hash() -> None:
            self.auth_limit.check(client)
            hashed.append(True)

        try:  # exactly the key: no space around it
            return self.provider.state.authenticate(token, before_hash=before_hash)
        except AuthError:
            if hashed:
                self.auth_limit.failed(client)
            raise

    def authenticate_operator(self, authorization: str | None, client: str = "") -> None:
        """Accept the operator key (``Authorization: Bearer rpo_...``), under the same
        failed-check limit as account keys; :class:`AuthError` otherwise."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme != "Bearer" or not token:
            raise AuthError("Missing operator key.")
        hashed: list[bool] = []

        def before_hash() -> None:
            self.auth_limit.check(client)
            hashed.append(True)

        try:
            self.provider.state.check_operator(token, before_hash=before_hash)
        except AuthError:
            if hashed:
                self.auth_limit.failed(client)
            raise

    def retrieve(
        self,
        account: str,
        request: RetrieveRequest,
        idempotency_key: str | None = None,
        gone: Callable[[], bool] | None = None,
    ) -> RetrieveResponse:
        """``POST /v1/retrieve``: the private top-K (refused for a voting tenant); a repeat
        of an ``idempotency_key`` gets the first response (:mod:`~ragprivacy.service.
        idempotency`)."""
        return self.idempotency.run(
            account,
            idempotency_key,
            "/v1/retrieve",
            request.model_dump(mode="json"),
            lambda: self._retrieve(account, request, gone),
            _dumped,
            RetrieveResponse.model_validate,
        )

    def _retrieve(
        self, account: str, request: RetrieveRequest, gone: Callable[[], bool] | None = None
    ) -> RetrieveResponse:
        _still_there(gone)
        with self.inflight.slot(account):
            served = self.provider.retrieve(
                account, request.query, k=request.k, nonce=request.nonce
            )
        self._spent("/v1/retrieve", served.privacy.get("epsilon"))
        return RetrieveResponse(
            window_id=served.window_id,
            documents=_documents(served),
            receipt=SignedReceipt(served.receipt),
            privacy=NoisyTopKPrivacy.model_validate(served.privacy),
            budget=NoisyTopKBudget.model_validate(served.budget),
        )

    def _spent(self, route: str, epsilon: object) -> None:
        if self.on_spent is not None:
            self.on_spent(route, float(epsilon) if isinstance(epsilon, int | float) else None)

    def answer(
        self,
        account: str,
        request: AnswerRequest,
        idempotency_key: str | None = None,
        gone: Callable[[], bool] | None = None,
    ) -> AnswerResponse:
        """``POST /v1/answer``: the account's answer in its tenant's mode (once per
        ``idempotency_key``, as :meth:`retrieve`)."""
        return self.idempotency.run(
            account,
            idempotency_key,
            "/v1/answer",
            request.model_dump(mode="json"),
            lambda: self._answer(account, request, gone),
            _dumped,
            AnswerResponse.model_validate,
        )

    def _answer(
        self, account: str, request: AnswerRequest, gone: Callable[[], bool] | None = None
    ) -> AnswerResponse:
        _still_there(gone)
        with self.inflight.slot(account):
            done = self._answered(
                account, request.query, request.k, request.max_tokens, request.nonce
            )
        self._spent("/v1/answer", getattr(done.privacy, "epsilon", None))
        return AnswerResponse(
            answer=done.completion.text,
            window_id=done.window_id,
            documents=done.documents,
            receipt=done.receipt,
            privacy=done.privacy,
            budget=done.budget,
        )

    def chat(
        self,
        account: str,
        request: ChatRequest,
        idempotency_key: str | None = None,
        gone: Callable[[], bool] | None = None,
    ) -> ChatCompletion | Iterator[ChatCompletionChunk]:
        """``POST /v1/chat/completions``: the answer to the last user message, whole or
        (``stream``) as the chunks to send.

        A stream is charged before its first chunk: the query's record is appended once
        the generator has begun to answer (:meth:`ServiceProvider.answer_stream`), so a
        refusal is still an ordinary 4xx, and the rest of the answer comes token by token
        as the generator streams it. A failure after that is charged and ends the stream
        (the route sends it as an error event). A dp_vote tenant's answer, and a stream
        asked under an ``idempotency_key``, exist whole before the first chunk: the vote
        releases the answer as a whole, and a repeat under the key must stream the same
        chunks (:meth:`retrieve`'s rule)."""
        if request.stream and idempotency_key is None and not self.provider.votes(account):
            return self._chat_stream(account, request, gone)
        out = self.idempotency.run(
            account,
            idempotency_key,
            "/v1/chat/completions",
            request.model_dump(mode="json"),
            lambda: self._chat(account, request, gone),
            _dumped_chat,
            _loaded_chat,
        )
        return out if isinstance(out, ChatCompletion) else iter(out)

    def _chat_query(
        self, account: str, request: ChatRequest, gone: Callable[[], bool] | None
    ) -> str:
        """The chat's query (its last user message), once the request is checked."""
        _check_chat(request)
        _still_there(gone)
        users = [m.text for m in request.messages if m.role == "user" and m.text.strip()]
        if not users:
            raise ConfigError("The chat needs a non-empty user message (it is the query).")
        if request.logprobs or request.top_logprobs:
            if not self.provider.logprobs_allowed(account):
                raise ConfigError(
                    "This account's tenant does not allow log-probabilities (a noisy_topk "
                    "tenant may, with 'tenant create --logprobs'); ask without them."
                )
            if request.top_logprobs:
                raise ConfigError(
                    "'top_logprobs' is not supported: only the chosen tokens' log-"
                    "probabilities are returned (logprobs=true)."
                )
        return users[-1]

    def _chat(
        self, account: str, request: ChatRequest, gone: Callable[[], bool] | None = None
    ) -> ChatCompletion | list[ChatCompletionChunk]:
        query = self._chat_query(account, request, gone)
        with self.inflight.slot(account):
            done = self._answered(account, query, None, request.max_tokens, request.nonce)
        self._spent("/v1/chat/completions", getattr(done.privacy, "epsilon", None))
        head = _chunk_head(request)
        text = done.completion.text
        usage = self._usage(account, query, len(done.completion.tokens))
        if request.stream:
            delta = ChunkDelta(role="assistant", content=text)
            lps = _logprobs(done.completion) if request.logprobs else None
            return [
                _chunk(head, delta, lps),
                *_chunk_tail(head, request, done.fields(), usage),
            ]
        return ChatCompletion(
            **head,
            object="chat.completion",
            choices=[
                ChatChoice(
                    index=0,
                    message=AssistantMessage(role="assistant", content=text),
                    finish_reason="stop",
                    logprobs=_logprobs(done.completion) if request.logprobs else None,
                )
            ],
            usage=usage,
            ragprivacy=done.fields(),
        )

    def _usage(self, account: str, query: str, tokens: int) -> Usage:
        prompt = self.provider.prompt_tokens(account, query, self.generator)
        return Usage(prompt_tokens=prompt, completion_tokens=tokens, total_tokens=prompt + tokens)

    def _chat_stream(
        self, account: str, request: ChatRequest, gone: Callable[[], bool] | None
    ) -> Iterator[ChatCompletionChunk]:
        """A noisy_topk answer streamed as the generator streams it: the query is
        charged here, before the iterator is returned; the account's slot is held until
        the iterator ends or is closed."""
        query = self._chat_query(account, request, gone)
        held = ExitStack()
        held.enter_context(self.inflight.slot(account))
        try:
            served, pieces = self.provider.answer_stream(
                account,
                query,
                self.generator,
                max_tokens=request.max_tokens,
                nonce=request.nonce,
            )
        except BaseException:
            held.close()
            raise
        try:  # the query is paid for from here: a failure is a charged one
            self._spent("/v1/chat/completions", served.privacy.get("epsilon"))
            fields = RagprivacyFields(
                window_id=served.window_id,
                receipt=SignedReceipt(served.receipt),
                privacy=NoisyTopKPrivacy.model_validate(served.privacy),
                budget=NoisyTopKBudget.model_validate(served.budget),
            )
            prompt = self.provider.prompt_tokens(account, query, self.generator)
        except Exception as exc:
            close_iterator(pieces)
            held.close()
            raise self.provider.charged_after_append(served, account, exc) from None
        return self._streamed(served, account, request, pieces, fields, prompt, held)

    def _streamed(
        self,
        served: ServedAnswer,
        account: str,
        request: ChatRequest,
        pieces: Iterator[Completion],
        fields: RagprivacyFields,
        prompt: int,
        held: ExitStack,
    ) -> Iterator[ChatCompletionChunk]:
        """The chunks; however they end, the generation stops and the slot is freed (a
        stream closed or dropped before its first chunk never runs this ``finally``: the
        slot's and the generation's own generators are then finalized as they are
        dropped, which frees and stops them all the same)."""
        head = _chunk_head(request)
        tokens = 0
        first = True  # OpenAI names the role in the first chunk only
        try:
            for piece in pieces:
                tokens += len(piece.tokens)
                lps = _logprobs(piece) if request.logprobs else None
                delta = ChunkDelta(content=piece.text)
                if first:
                    delta = ChunkDelta(role="assistant", content=piece.text)
                yield _chunk(head, delta, lps)
                first = False
            if first:  # an empty answer
                yield _chunk(head, ChunkDelta(role="assistant", content=""), None)
            usage = Usage(
                prompt_tokens=prompt, completion_tokens=tokens, total_tokens=prompt + tokens
            )
            yield from _chunk_tail(head, request, fields, usage)
        except Exception as exc:  # the record is appended: whatever failed is charged
            raise self.provider.charged_after_append(served, account, exc) from None
        finally:
            close_iterator(pieces)  # stops the generation when the client left
            held.close()

    def models(self) -> ModelList:
        """``GET /v1/models``: the one model, whose answers each account's tenant shapes."""
        return ModelList(
            object="list",
            data=[ModelCard(id=MODEL, object="model", created=0, owned_by="ragprivacy")],
        )

    def budget(self, account: str) -> BudgetResponse:
        """``GET /v1/budget``: what the account has left in the open window."""
        left = self.provider.budget(account)
        if self.provider.votes(account):
            return VotingBudget.model_validate(left)
        return NoisyTopKBudgetStatus.model_validate(left)

    def _answered(
        self,
        account: str,
        query: str,
        k: int | None,
        max_tokens: int | None,
        nonce: str = "",
    ) -> _Answered:
        """The account's answer (its tenant's mode) and the fields that ride with it."""
        provider = self.provider
        if provider.votes(account):
            for name, value in (("k", k), ("max_tokens", max_tokens)):
                if value is not None:
                    raise ConfigError(
                        f"'{name}' does not apply to this account's tenant: it releases a "
                        "DP-voted answer whose length and documents the vote fixes."
                    )
            voted, receipt = provider.answer_voted(account, query, self.generator, nonce=nonce)
            return _Answered(
                completion=Completion(voted.text, voted.response.tokens),
                window_id=provider.window_id(),
                documents=[],
                receipt=SignedReceipt(receipt),
                privacy=_VOTED_PRIVACY.validate_python(voted.privacy),
                budget=VotingBudget.model_validate(voted.budget),
            )
        served, completion = provider.answer(
            account, query, self.generator, k=k, max_tokens=max_tokens, nonce=nonce
        )
        return _Answered(
            completion=completion,
            window_id=served.window_id,
            documents=_documents(served),
            receipt=SignedReceipt(served.receipt),
            privacy=NoisyTopKPrivacy.model_validate(served.privacy),
            budget=NoisyTopKBudget.model_validate(served.budget),
        )

    # ------------------------------------------------------------------ public audit
    def _window(self, window_id: str) -> Window:
        try:
            return self.provider.state.window(window_id)
        except ConfigError:  # the state's "no window": the one 404
            raise NotFoundError("Not found.") from None

    # ------------------------------------------------------------------ operations
    def health(self) -> Health:
        """``GET /healthz``: the process is up (touches nothing)."""
        return Health(status="ok")

    def ready(self) -> Readiness:
        """``GET /readyz``: one cheap look-up in the state; :class:`NotReadyError` when
        it fails."""
        try:
            window_id = self.provider.state.open_window_id()
        except BackendError:
            raise NotReadyError("The service's state does not answer.") from None
        return Readiness(status="ready", window_id=window_id)

    def windows(self) -> list[WindowSummary]:
        """``GET /v1/audit/windows``: every window and its status."""
        return [
            WindowSummary(window_id=w.window_id, status=w.status)
            for w in self.provider.state.windows()
        ]

    def commitments(self, window_id: str) -> CommitmentsResponse:
        """The window's signed phase-A commitments, as stored."""
        return CommitmentsResponse(self._window(window_id).commitments)

    def tree_head(self, window_id: str) -> TreeHeadResponse:
        """The window's signed current (or final) tree head."""
        self._window(window_id)
        return TreeHeadResponse(self.provider.tree_head(window_id).to_dict())

    def records(self, window_id: str, start: int, end: int | None) -> RecordsResponse:
        """The ledger's records ``[start, end)`` (to its end when ``end`` is None)."""
        self._window(window_id)
        return RecordsResponse(self.provider.records(window_id, start, end))

    def inclusion_proof(self, window_id: str, position: int, size: int) -> ProofResponse:
        """RFC 9162 inclusion proof of the record at ``position`` in the tree of ``size``."""
        self._window(window_id)
        return ProofResponse(self.provider.inclusion_proof(window_id, position, size))

    def consistency_proof(self, window_id: str, old: int, new: int) -> ProofResponse:
        """RFC 9162 consistency proof between the trees of sizes ``old`` and ``new``."""
        self._window(window_id)
        return ProofResponse(self.provider.consistency_proof(window_id, old, new))

    def coalition(self, window_id: str) -> CoalitionResponse:
        """The certified coalition claim of a closed window."""
        claim = self._window(window_id).coalition
        if claim is None:
            raise NotFoundError("Not found.")
        return CoalitionResponse(claim)


def _logprobs(completion: Completion) -> ChoiceLogprobs | None:
    """OpenAI's ``choices[].logprobs`` for the chosen tokens (None when the generator
    exposes no probabilities)."""
    if completion.logprobs is None:
        return None
    return ChoiceLogprobs(
        content=[
            TokenLogprob(token=t, logprob=lp, bytes=list(t.encode()), top_logprobs=[])
            for t, lp in zip(completion.tokens, completion.logprobs)
        ]
    )


def _dumped(response: RetrieveResponse | AnswerResponse) -> Any:
    """A response as kept under its idempotency key (what was sent, as JSON)."""
    return response.model_dump(mode="json")


def _chunk_head(request: ChatRequest) -> dict[str, Any]:
    """The fields every chunk (and the whole completion) of one answer shares."""
    stamp = int(time.time())
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": stamp, "model": request.model}


def _chunk(
    head: dict[str, Any], delta: ChunkDelta, logprobs: ChoiceLogprobs | None
) -> ChatCompletionChunk:
    """A chunk that carries text (and its tokens' log-probabilities when asked)."""
    choice = ChunkChoice(index=0, delta=delta, finish_reason=None)
    if logprobs is not None:  # the key is sent only when it was asked for
        choice = ChunkChoice(index=0, delta=delta, finish_reason=None, logprobs=logprobs)
    return ChatCompletionChunk(**head, object="chat.completion.chunk", choices=[choice])


def _chunk_tail(
    head: dict[str, Any], request: ChatRequest, fields: RagprivacyFields, usage: Usage
) -> list[ChatCompletionChunk]:
    """The stream's last chunks: the finish reason with ``ragprivacy``, then the usage
    (OpenAI's last chunk, only with ``stream_options.include_usage``)."""
    tail = [
        ChatCompletionChunk(
            **head,
            object="chat.completion.chunk",
            choices=[ChunkChoice(index=0, delta=ChunkDelta(), finish_reason="stop")],
            ragprivacy=fields,
        )
    ]
    if request.stream_options is not None and request.stream_options.include_usage:
        tail.append(
            ChatCompletionChunk(**head, object="chat.completion.chunk", choices=[], usage=usage)
        )
    return tail


def _dumped_chat(out: ChatCompletion | list[ChatCompletionChunk]) -> Any:
    if isinstance(out, list):  # as sent: a key a chunk was not built with stays unset
        return {"chunks": [c.model_dump(mode="json", exclude_unset=True) for c in out]}
    return {"completion": out.model_dump(mode="json")}


def _loaded_chat(kept: dict[str, Any]) -> ChatCompletion | list[ChatCompletionChunk]:
    if "chunks" in kept:
        return [ChatCompletionChunk.model_validate(c) for c in kept["chunks"]]
    return ChatCompletion.model_validate(kept["completion"])


def _still_there(gone: Callable[[], bool] | None) -> None:
    """Refuse a request whose client left while it waited for a thread (a burst of slow
    requests queues the rest): it is cancelled before anything private is read, so it
    spends nothing. Once retrieval began, a request runs to its end and is charged."""
    if gone is not None and gone():
        raise ClientGoneError("The client closed the connection before the request started.")
