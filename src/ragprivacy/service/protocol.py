"""The HTTP service's wire models: a request and a response model for every route.

Requests are validated here (a malformed body is a 422 before any handler runs).
Responses are typed where the service builds them — the documents, the privacy an
answer spent, the budget left, the OpenAI-compatible chat objects — and loose where they
carry a signed payload (a receipt, the commitments, a tree head, a coalition claim): those
pass through exactly as signed, so that the verifier re-checks the very bytes the
provider signed; their schemas name the keys they hold.

The privacy and the budget of an answer depend on the account's tenant:

* ``noisy_topk`` (the audited retrieval): :class:`NoisyTopKPrivacy` and
  :class:`NoisyTopKBudget` (:class:`NoisyTopKBudgetStatus`, with the failures, from
  ``GET /v1/budget``);
* the voting tenants: :class:`VotePrivacy` (``dp_vote``) or :class:`FilteredVotePrivacy`
  (``murag``, ``murag_ada``: with the documents' filter budget) and :class:`VotingBudget`.

So :data:`AnswerPrivacy` is ``NoisyTopKPrivacy | VotePrivacy | FilteredVotePrivacy``
(told apart by ``mechanism``), :data:`AnswerBudget` is ``NoisyTopKBudget |
VotingBudget`` and :data:`BudgetResponse` is ``NoisyTopKBudgetStatus | VotingBudget``.

Needs the ``service`` extra (pydantic, with FastAPI).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from ragprivacy.audit import CoalitionClaim, Commitments, Receipt, SignedTreeHead

__all__ = [
    "AnswerBudget",
    "AnswerPrivacy",
    "AnswerRequest",
    "AnswerResponse",
    "AssistantMessage",
    "BudgetResponse",
    "ChatChoice",
    "ChatCompletion",
    "ChatCompletionChunk",
    "ChatMessage",
    "ChatRequest",
    "ChoiceLogprobs",
    "ChunkChoice",
    "ChunkDelta",
    "CoalitionResponse",
    "CommitmentsResponse",
    "FailureCounts",
    "FilteredVotePrivacy",
    "Health",
    "MODEL",
    "ModelCard",
    "ModelList",
    "NoisyTopKBudget",
    "NoisyTopKBudgetStatus",
    "NoisyTopKPrivacy",
    "ProofResponse",
    "RagprivacyFields",
    "Readiness",
    "RecordsResponse",
    "RetrieveRequest",
    "RetrieveResponse",
    "RetrievedDocument",
    "SignedReceipt",
    "TextPart",
    "TokenLogprob",
    "TreeHeadResponse",
    "Usage",
    "VotePrivacy",
    "VotedPrivacy",
    "VotingBudget",
    "WindowSummary",
    "sse_event",
]

_MODES = Literal["dp_vote", "murag", "murag_ada"]


class _Wire(BaseModel):
    """A response model: exactly the keys the service sends (an unknown key is a bug,
    refused where the model is built, never sent unannounced)."""

    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------ requests
class RetrieveRequest(BaseModel):
    """``POST /v1/retrieve``."""

    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=4096)
    k: int | None = Field(default=None, ge=1, le=100)
    #: the client's random n of rec_q (its noise input), echoed in the receipt
    nonce: str = Field(default="", pattern=r"^[0-9a-f]{0,64}$")


class AnswerRequest(RetrieveRequest):
    """``POST /v1/answer``."""

    max_tokens: int | None = Field(default=None, ge=1, le=512)


#: the one model this service serves (each account's tenant decides how it answers)
MODEL = "ragprivacy"


class TextPart(BaseModel):
    """A text part of a message's content (OpenAI's content-part list)."""

    type: Literal["text"]
    text: str = Field(max_length=4096)


class ChatMessage(BaseModel):
    """One message of a chat request: its content a string or a list of text parts."""

    role: str = Field(max_length=32)
    content: str | list[TextPart] = Field(max_length=4096)

    @property
    def text(self) -> str:
        """The content as one string (text parts joined, as OpenAI does)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class StreamOptions(BaseModel):
    """OpenAI's ``stream_options``."""

    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions`` (OpenAI's; the last user message is the query)."""

    model_config = ConfigDict(extra="ignore")  # OpenAI clients send more than we use
    model: str = Field(default=MODEL, max_length=128)
    messages: list[ChatMessage] = Field(min_length=1, max_length=64)
    max_tokens: int | None = Field(default=None, ge=1, le=512)
    stream: bool = False
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    #: the client's random n of rec_q, as on /v1/retrieve (OpenAI clients: ``extra_body``)
    nonce: str = Field(default="", pattern=r"^[0-9a-f]{0,64}$")
    #: OpenAI's ``{"include_usage": true}``: a last chunk with ``usage`` before [DONE]
    stream_options: StreamOptions | None = None
    # OpenAI parameters that would change what comes back: read so that a request relying
    # on them is refused (400) instead of answered as if they were not there
    n: int | None = None
    stop: str | list[str] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    response_format: dict[str, Any] | None = None
    logit_bias: dict[str, Any] | None = None


# ------------------------------------------------------------------ signed payloads
def _sent_always(f: dataclasses.Field[Any]) -> bool:
    """A field a signed object always carries: one without a default of None or an empty
    collection (those — a voted answer's receipt text, a window's voting tenants — are
    carried only when set, so that the others read and sign as before them)."""
    return f.default is not None and f.default_factory is dataclasses.MISSING


def _signed(cls: type[Any], what: str) -> ConfigDict:
    keys: list[Any] = [f.name for f in dataclasses.fields(cls) if _sent_always(f)]
    return ConfigDict(
        json_schema_extra={
            "description": f"{what}, exactly as signed (ragprivacy.audit.{cls.__name__}).",
            "required": keys,
        }
    )


class SignedReceipt(RootModel[dict[str, Any]]):
    """The account's signed receipt of one query."""

    model_config = _signed(Receipt, "The account's signed receipt of one query")


class CommitmentsResponse(RootModel[dict[str, Any]]):
    """``GET /v1/audit/windows/{id}/commitments``."""

    model_config = _signed(Commitments, "The window's signed phase-A commitments")


class TreeHeadResponse(RootModel[dict[str, Any]]):
    """``GET /v1/audit/windows/{id}/tree-head``."""

    model_config = _signed(SignedTreeHead, "The ledger's signed current (or final) tree head")


class CoalitionResponse(RootModel[dict[str, Any]]):
    """``GET /v1/audit/windows/{id}/coalition``."""

    model_config = _signed(CoalitionClaim, "The certified coalition claim of a closed window")


class RecordsResponse(RootModel[list[str]]):
    """``GET /v1/audit/windows/{id}/records``: the ledger's records (JSON text) in order."""


class ProofResponse(RootModel[list[str]]):
    """``GET /v1/audit/windows/{id}/proofs/...``: an RFC 9162 proof, hex hashes in order."""


class Health(_Wire):
    """``GET /healthz``: the process answers."""

    status: Literal["ok"]


class Readiness(_Wire):
    """``GET /readyz``: the state answers; ``window_id`` is the open window (None: no
    window is open, so accounts are refused with 409 until one is)."""

    status: Literal["ready"]
    window_id: str | None


class ModelCard(_Wire):
    """One entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(_Wire):
    """``GET /v1/models`` (OpenAI's): the models the account may ask for."""

    object: Literal["list"]
    data: list[ModelCard]


class WindowSummary(_Wire):
    """One entry of ``GET /v1/audit/windows``."""

    window_id: str
    status: str


# ------------------------------------------------------------------ privacy and budget
class NoisyTopKPrivacy(_Wire):
    """What a ``noisy_topk`` query spent: this query's ε at the account's δ and the
    account's cumulative ε in the window (exact Gaussian DP of its records), σ and Δ."""

    mechanism: Literal["gaussian-noisy-topk"]
    epsilon: float
    delta: float
    cumulative_epsilon: float
    sigma: float
    sensitivity: float
    scope: Literal["retrieval"]


class VotePrivacy(_Wire):
    """What a ``dp_vote`` answer spent (pure DP: δ = 0)."""

    mechanism: Literal["dp_vote"]
    epsilon: float
    epsilon_vote: float
    delta: float
    cumulative_epsilon: float
    scope: Literal["answer"]


class FilteredVotePrivacy(_Wire):
    """What a ``murag`` / ``murag_ada`` answer spent, and each document's filter budget."""

    mechanism: Literal["murag", "murag_ada"]
    epsilon: float
    epsilon_vote: float
    delta: float
    cumulative_epsilon: float
    scope: Literal["answer"]
    document_budget: float


VotedPrivacy = Annotated[VotePrivacy | FilteredVotePrivacy, Field(discriminator="mechanism")]
AnswerPrivacy = Annotated[
    NoisyTopKPrivacy | VotePrivacy | FilteredVotePrivacy, Field(discriminator="mechanism")
]


class FailureCounts(_Wire):
    """An account's failed requests after retrieval in the window."""

    charged: int
    free: int


class NoisyTopKBudget(_Wire):
    """A ``noisy_topk`` account's queries in the window: its rate limit r, used and left."""

    rate_limit: int
    used: int
    remaining: int
    epsilon_acc: float
    delta_acc: float


class NoisyTopKBudgetStatus(NoisyTopKBudget):
    """``GET /v1/budget`` of a ``noisy_topk`` account: the budget and its failures."""

    failures: FailureCounts


class VotingBudget(_Wire):
    """A voting account's answers in the window (the same in answers and from
    ``GET /v1/budget``)."""

    window_id: str
    tenant: str
    mode: _MODES
    used: int
    answers: int
    remaining: int
    epsilon_per_answer: float
    epsilon_spent: float
    failures: FailureCounts


AnswerBudget = NoisyTopKBudget | VotingBudget
BudgetResponse = NoisyTopKBudgetStatus | VotingBudget


# ------------------------------------------------------------------ retrieve and answer
class RetrievedDocument(_Wire):
    """A document of the private top-K."""

    id: str
    text: str


class RetrieveResponse(_Wire):
    """``POST /v1/retrieve`` (``noisy_topk`` tenants only)."""

    window_id: str
    documents: list[RetrievedDocument]
    receipt: SignedReceipt
    privacy: NoisyTopKPrivacy
    budget: NoisyTopKBudget


class AnswerResponse(_Wire):
    """``POST /v1/answer``: a voting tenant's answer has no documents; its receipt (an
    audited ``dp_vote`` tenant's) names the answer instead."""

    answer: str
    window_id: str
    documents: list[RetrievedDocument]
    receipt: SignedReceipt | None
    privacy: AnswerPrivacy
    budget: AnswerBudget


# ------------------------------------------------------------------ chat (OpenAI)
class RagprivacyFields(_Wire):
    """The extra field ``ragprivacy`` of a chat answer: what ``/v1/answer`` returns but
    the text and the documents."""

    window_id: str
    receipt: SignedReceipt | None
    privacy: AnswerPrivacy
    budget: AnswerBudget


class TokenLogprob(_Wire):
    """A chosen token's log-probability (OpenAI's ``logprobs.content[]``)."""

    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[dict[str, Any]] = Field(max_length=0)  # never any alternatives


class ChoiceLogprobs(_Wire):
    """OpenAI's ``choices[].logprobs``: the chosen tokens only."""

    content: list[TokenLogprob]


class AssistantMessage(_Wire):
    """The answer as OpenAI's assistant message."""

    role: Literal["assistant"]
    content: str


class ChatChoice(_Wire):
    """The one choice of a chat answer."""

    index: int
    message: AssistantMessage
    finish_reason: Literal["stop"]
    logprobs: ChoiceLogprobs | None


class Usage(_Wire):
    """The answer's tokens. ``prompt_tokens`` is the prompt's size as the service bounds
    it — the query with every document at its budget (``--doc-tokens``; for a voting
    tenant, every voter's prompt) — never the retrieved documents' own token counts,
    which would tell their lengths."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(_Wire):
    """``POST /v1/chat/completions`` without ``stream``."""

    id: str
    created: int
    model: str
    object: Literal["chat.completion"]
    choices: list[ChatChoice]
    usage: Usage
    ragprivacy: RagprivacyFields


class ChunkDelta(_Wire):
    """The text of a chunk; the last chunk's delta is empty (``{}``)."""

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(_Wire):
    """The one choice of a stream chunk; ``logprobs`` (the chunk's tokens') only when the
    request asked for them."""

    index: int
    delta: ChunkDelta
    finish_reason: Literal["stop"] | None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(_Wire):
    """One server-sent event of ``POST /v1/chat/completions`` with ``stream=true``: the
    answer's text piece by piece as the generator produces it, then the finish reason
    with ``ragprivacy`` (absent from the others). A failure after the stream began is
    sent instead as an event holding OpenAI's ``error`` object and the ``receipt``."""

    id: str
    created: int
    model: str
    object: Literal["chat.completion.chunk"]
    choices: list[ChunkChoice]
    ragprivacy: RagprivacyFields | None = None
    usage: Usage | None = None  # the last chunk's, with stream_options.include_usage


def sse_event(chunk: ChatCompletionChunk) -> str:
    """``chunk`` as one of OpenAI's server-sent events. A key the chunk was not built
    with (``ragprivacy`` but in the last, ``logprobs`` unless asked) is not sent."""
    return f"data: {json.dumps(chunk.model_dump(mode='json', exclude_unset=True))}\n\n"
