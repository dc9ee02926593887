"""The shared dataclasses (see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ragprivacy.types._privacy import NonPrivateEvent, PrivacyEvent

__all__ = [
    "Completion",
    "Document",
    "Hit",
    "PIISpan",
    "PrivacyCost",
    "Response",
    "Retrieval",
]


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True, slots=True)
class PIISpan:
    """A piece of personal data inside a document: ``text[start:end]`` of type ``kind``.

    ``kind`` is a lower-case label such as ``name``, ``email``, ``phone``, ``url``,
    ``age``, ``address``, ``condition``, ``drug``, ``date``, ``organization``.
    """

    start: int
    end: int
    kind: str
    value: str

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"PIISpan needs 0 <= start <= end; got {self.start}, {self.end}.")

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "kind": self.kind, "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PIISpan:
        return cls(int(data["start"]), int(data["end"]), str(data["kind"]), str(data["value"]))


@dataclass(frozen=True, slots=True)
class Document:
    """A stored text with an id, free-form metadata and its PII ground truth."""

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict)
    pii: tuple[PIISpan, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"A Document id must be a non-empty string; got {self.id!r}.")
        if not isinstance(self.text, str):
            raise ValueError(f"Document {self.id!r}: text must be a string.")
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata))
        object.__setattr__(self, "pii", tuple(self.pii))
        for span in self.pii:
            if span.end > len(self.text):
                raise ValueError(
                    f"Document {self.id!r}: PII span [{span.start}, {span.end}) lies past the "
                    f"end of the text ({len(self.text)} characters)."
                )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the JSONL record format)."""
        out: dict[str, Any] = {"id": self.id, "text": self.text}
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        if self.pii:
            out["pii"] = [s.to_dict() for s in self.pii]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Document:
        return cls(
            id=str(data["id"]),
            text=str(data["text"]),
            metadata=dict(data.get("metadata") or {}),
            pii=tuple(PIISpan.from_dict(s) for s in data.get("pii") or ()),
        )

    def with_text(self, text: str) -> Document:
        """A copy with new text; PII spans are dropped since their offsets no longer hold."""
        return replace(self, text=text, pii=())


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved document: its id, its position in the index and its score."""

    doc_id: str
    index: int
    score: float


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What a retriever returned for one query, best first.

    ``scores`` are the scores the selection used (noisy ones under a noisy retriever; for
    instrumented evaluation only). ``event`` is the privacy event the retrieval consumed:
    :class:`NonPrivateEvent` (the default, and what ``None`` means) for a retriever
    without a DP guarantee, a ``ragprivacy.dp`` event otherwise. ``charge_ids``
    name the budget-store charges it made (per-document filters), so that a request that
    fails afterwards can give them back (``Retriever.release``).
    """

    ids: tuple[str, ...]
    indices: tuple[int, ...]
    scores: tuple[float, ...]
    event: PrivacyEvent = field(default_factory=NonPrivateEvent)
    charge_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not len(self.ids) == len(self.indices) == len(self.scores):
            raise ValueError("Retrieval ids, indices and scores must have equal lengths.")
        if self.event is None:
            object.__setattr__(self, "event", NonPrivateEvent())
        elif not isinstance(self.event, PrivacyEvent):
            raise TypeError(
                f"A Retrieval's event must be a PrivacyEvent; got {type(self.event).__name__}."
            )

    @property
    def hits(self) -> tuple[Hit, ...]:
        return tuple(Hit(d, i, s) for d, i, s in zip(self.ids, self.indices, self.scores))

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, slots=True)
class Completion:
    """A generator's output: text, its tokens, and each token's log-probability.

    ``logprobs`` is ``None`` when the backend does not expose probabilities. ``usage`` is
    what the backend reported the call cost in tokens (``prompt_tokens``,
    ``completion_tokens``; ``None`` when it reported nothing) and ``cached`` says the
    completion came from a call cache rather than a new call; ``stated_privacy`` is what a
    private endpoint said the answer spent (ragprivacy's service: ``epsilon``, ``delta``,
    ``cumulative_epsilon``, ``mechanism`` of its ``ragprivacy.privacy`` block), its word,
    not a guarantee; none of the three takes part in equality (they say how the output
    was obtained, not what it is).
    """

    text: str
    tokens: tuple[str, ...] = ()
    logprobs: tuple[float, ...] | None = None
    usage: Mapping[str, int] | None = field(default=None, compare=False)
    cached: bool = field(default=False, compare=False)
    stated_privacy: Mapping[str, Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(self.tokens))
        if self.usage is not None:
            object.__setattr__(self, "usage", _frozen_mapping(self.usage))
        if self.stated_privacy is not None:
            object.__setattr__(self, "stated_privacy", _frozen_mapping(self.stated_privacy))
        if self.logprobs is not None:
            object.__setattr__(self, "logprobs", tuple(float(x) for x in self.logprobs))
            if len(self.logprobs) != len(self.tokens):
                raise ValueError("Completion logprobs must align with tokens.")

    @property
    def mean_logprob(self) -> float:
        """Mean token log-probability (NaN without probabilities or tokens)."""
        if not self.logprobs:
            return math.nan
        return sum(self.logprobs) / len(self.logprobs)


@dataclass(frozen=True, slots=True)
class PrivacyCost:
    """The privacy one answer spent: one typed event, stated as one (ε, δ) pair.

    ``event`` is the composed privacy event of the whole answer: a ``ragprivacy.dp`` event
    for a DP system, :class:`NoOpEvent` for one that used no private data,
    :class:`NonPrivateEvent` (the default) for one without a guarantee. ``epsilon`` at
    ``delta`` is that event under the system's own accounting (``ragprivacy.dp.
    event_epsilon``): it is ∞ for an answer without a guarantee, whatever was passed, and
    0 for one that used no data. ``cumulative_epsilon`` is the total so far where the
    system tracks one; ``per_document`` maps document ids to what each was charged
    (per-document filters, whose guarantee is per document: ``event`` is then the charge
    of one document).

    ``scope`` says what the guarantee covers. ``"answer"``: the whole released answer (DP
    voting, MURAG, no data). ``"retrieval"``: *which* documents were retrieved (noisy
    top-K, DP-RP-G, under RAG or kNN-LM) — the generator then reads the retrieved
    documents' text, which that guarantee does not cover (collusion paper §7), so the
    answer's own text is not ε-DP under replace-one neighbours.

    >>> from ragprivacy.types import NoOpEvent
    >>> PrivacyCost().epsilon, PrivacyCost(event=NoOpEvent()).epsilon
    (inf, 0.0)
    """

    event: PrivacyEvent = field(default_factory=NonPrivateEvent)
    epsilon: float = math.nan
    delta: float = 0.0
    mechanism: str = "none"
    cumulative_epsilon: float | None = None
    per_document: Mapping[str, float] = field(default_factory=dict)
    scope: str = "answer"

    def __post_init__(self) -> None:
        if self.scope not in ("answer", "retrieval"):
            raise ValueError(f"A PrivacyCost scope is 'answer' or 'retrieval'; got {self.scope!r}.")
        if not isinstance(self.event, PrivacyEvent):
            raise TypeError(
                f"A PrivacyCost's event must be a PrivacyEvent; got {type(self.event).__name__}."
            )
        if not self.event.guaranteed:
            object.__setattr__(self, "epsilon", math.inf)
        elif not self.event.flatten():  # no private data was used
            object.__setattr__(self, "epsilon", 0.0)
        elif math.isnan(self.epsilon) or not self.epsilon > 0:
            raise ValueError(
                f"A PrivacyCost of {type(self.event).__name__} must state its epsilon, a "
                f"positive number (ragprivacy.dp.event_epsilon computes it); got "
                f"{self.epsilon!r}."
            )
        object.__setattr__(self, "per_document", _frozen_mapping(self.per_document))

    @property
    def guaranteed(self) -> bool:
        """Whether the answer has a DP guarantee (ε < ∞)."""
        return self.event.guaranteed


@dataclass(frozen=True, slots=True)
class Response:
    """What a RAG system answers.

    ``text``, ``tokens`` and ``logprobs`` are public: they are all a black-box attack may
    read (``logprobs`` only when the deployment exposes them). ``retrieval`` records what
    was retrieved, for evaluation and audit only; :meth:`public` strips it.
    """

    text: str
    tokens: tuple[str, ...] = ()
    logprobs: tuple[float, ...] | None = None
    privacy: PrivacyCost = field(default_factory=PrivacyCost)
    retrieval: Retrieval | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(self.tokens))
        if self.logprobs is not None:
            object.__setattr__(self, "logprobs", tuple(self.logprobs))
        object.__setattr__(self, "metadata", _frozen_mapping(self.metadata))

    @property
    def retrieved_ids(self) -> tuple[str, ...]:
        """Ids of the retrieved documents (evaluation-only view)."""
        return self.retrieval.ids if self.retrieval is not None else ()

    def public(self) -> Response:
        """The view an attacker gets: text, tokens, log-probabilities and the answer's cost,
        but nothing retrieved and no document id (``per_document`` names the documents a
        filtered system charged, i.e. the private screened set)."""
        return Response(
            text=self.text,
            tokens=self.tokens,
            logprobs=self.logprobs,
            privacy=replace(self.privacy, per_document={}),
        )
