"""The ``RAGSystem`` interface, queries, and the non-private systems (non-RAG, standard)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ragprivacy._registry import Registry
from ragprivacy.dp import compose, event_epsilon
from ragprivacy.errors import BackendError
from ragprivacy.generate import Generator, Prompt, Task
from ragprivacy.retrieval import KnowledgeBase, Retriever
from ragprivacy.types import (
    Completion,
    NoOpEvent,
    PrivacyCost,
    PrivacyEvent,
    Response,
    Retrieval,
)

__all__ = [
    "REPORT_DELTA",
    "NonRAG",
    "Query",
    "RAGSystem",
    "StandardRAG",
    "answer_cost",
    "create_system",
    "refunded_failure",
    "register_system",
    "system_names",
]


@dataclass(frozen=True, slots=True)
class Query:
    """A request to a RAG system.

    Attributes:
        text: what the user sends (a question, a text to continue, a masked text, ...).
        task: how the system's prompt frames it (``Task.ANSWER`` for plain questions).
        retrieval_text: what is embedded for retrieval (default: ``text``).
        options: prompt options (``template``, ``max_tokens``, ...).
    """

    text: str
    task: Task = Task.ANSWER
    retrieval_text: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"A Query text must be a string; got {type(self.text).__name__}.")
        object.__setattr__(self, "task", Task(self.task))
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    @property
    def search_text(self) -> str:
        return self.retrieval_text if self.retrieval_text is not None else self.text

    @classmethod
    def of(cls, query: str | Query) -> Query:
        return query if isinstance(query, Query) else cls(query)


class RAGSystem(ABC):
    """A system under test: it answers queries for an account and reports what it spent.

    ``answer`` returns a :class:`~ragprivacy.types.Response` whose public part (text,
    tokens, log-probabilities) is all an attack may see; ``Response.retrieval`` records
    the retrieved documents for evaluation and audit.
    """

    name: str = "rag"

    @abstractmethod
    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        """Answer one query."""

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        """Answer several queries in order, all or nothing: if one fails, what the earlier
        ones spent is given back (no answer reached the caller). Systems override this to
        batch."""
        refunds: list[Callable[[], None]] = []
        out: list[Response] = []
        try:
            for q in queries:
                out.append(self._answer_refundable(q, account, refunds))
        except BaseException:
            for undo in reversed(refunds):
                undo()
            raise
        return out

    def _answer_refundable(
        self, query: str | Query, account: str | None, refunds: list[Callable[[], None]]
    ) -> Response:
        """Answer one query and append to ``refunds`` how to give back what it spent, for
        a batch that fails later. Systems that spend budgets override this (and answer
        through it); the default spends nothing to give back."""
        return self.answer(query, account=account)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description of the system (recorded in results)."""
        return {"name": self.name}


def refunded_failure(exc: Exception) -> BackendError:
    """The error a caller sees when a request failed after retrieval and was refunded.

    The backend's own message is withheld: it may describe the retrieved private
    documents (an HTTP 400 body, a context-length error counting their tokens), and a
    refunded request must release nothing. The original stays on ``withheld`` for the
    provider's own debugging; it must not be forwarded to the caller.
    """
    err = BackendError(
        f"Generation failed after retrieval ({type(exc).__name__}); the request was refunded "
        "and spent nothing. The backend's message is withheld because it may describe the "
        "retrieved documents; retry, or check the generator."
    )
    err.withheld = exc  # type: ignore[attr-defined]
    return err


@contextmanager
def released_on_failure(
    retriever: Retriever, retrievals: Sequence[Retrieval], account: str | None
) -> Iterator[None]:
    """Give the retrievals' reservations back if the block fails (spend only on success).

    Generation comes after retrieval; if it fails or is cancelled, no answer reaches the
    caller, so the request spends nothing. An error is replaced by
    :func:`refunded_failure` (no backend detail reaches the caller); a cancel
    (``KeyboardInterrupt``) propagates as it is. What remains observable is *that* the
    request failed: if a generator's failures depend on the documents it was given
    (context length), each refunded failure reveals one such bit; bound the failures an
    account may cause (the service's rate limit on requests) where that matters.
    """
    try:
        yield
    except Exception as exc:
        retriever.release(retrievals, account=account)
        raise refunded_failure(exc) from None
    except BaseException:
        retriever.release(retrievals, account=account)
        raise


REPORT_DELTA = 1e-6  # δ for answers whose events need one and whose retriever names none


def answer_cost(
    events: Sequence[PrivacyEvent],
    *,
    mechanism: str,
    delta: float | None = None,
    cumulative_epsilon: float | None = None,
    per_document: Mapping[str, float] | None = None,
    scope: str = "answer",
) -> PrivacyCost:
    """The :class:`PrivacyCost` of an answer whose steps consumed ``events``.

    The events are composed into the answer's one event and stated as (ε, δ) by
    :func:`ragprivacy.dp.event_epsilon` (no guarantee: ∞; no data used: 0). No events at
    all means the answer used no private data. ``scope`` is what the guarantee covers
    (:class:`~ragprivacy.types.PrivacyCost`).
    """
    event: PrivacyEvent = compose(events) if events else NoOpEvent()
    epsilon, used_delta = event_epsilon(event, REPORT_DELTA if delta is None else delta)
    return PrivacyCost(
        event=event,
        epsilon=epsilon,
        delta=used_delta,
        mechanism=mechanism,
        cumulative_epsilon=cumulative_epsilon,
        per_document=per_document or {},
        scope=scope,
    )


def _response(completion: Completion, retrieval: Retrieval | None, cost: PrivacyCost) -> Response:
    return Response(
        text=completion.text,
        tokens=completion.tokens,
        logprobs=completion.logprobs,
        privacy=cost,
        retrieval=retrieval,
    )


def _answer_with_retrievals(
    generator: Generator,
    instruction: str | None,
    queries: Sequence[Query],
    retrievals: Sequence[Retrieval],
    kb: KnowledgeBase,
    mechanism: str,
    delta: float | None = None,
) -> list[Response]:
    """Prompt each query with the texts of its retrieved documents in ``kb``, generate in
    one batch, and report each retrieval's event (named ``mechanism``, stated at
    ``delta``) as the answer's cost, scoped to the retrieval: the guarantee covers which
    documents were retrieved, not their text, which the generator reads."""
    prompts = [
        Prompt(q.task, q.text, kb.texts(r.indices), instruction, q.options)
        for q, r in zip(queries, retrievals)
    ]
    completions = generator.generate_batch(prompts)
    return [
        _response(c, r, answer_cost([r.event], mechanism=mechanism, delta=delta, scope="retrieval"))
        for c, r in zip(completions, retrievals)
    ]


class NonRAG(RAGSystem):
    """The generator alone, with no retrieved context (the utility floor; no privacy cost)."""

    name = "non-rag"

    def __init__(self, generator: Generator, *, instruction: str | None = None) -> None:
        self.generator = generator
        self.instruction = instruction

    def _prompt(self, q: Query) -> Prompt:
        return Prompt(q.task, q.text, (), self.instruction, q.options)

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self.answer_batch([query], account=account)[0]

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        prompts = [self._prompt(Query.of(q)) for q in queries]
        cost = answer_cost([], mechanism="none")  # no private data: it spends nothing
        return [_response(c, None, cost) for c in self.generator.generate_batch(prompts)]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "generator": self.generator.name}


class StandardRAG(RAGSystem):
    """Retrieve the top-K documents, put them in the prompt, generate (Lewis et al. 2020).

    Non-private with a plain retriever: the retrieved documents reach the generator
    unprotected, and each answer's cost is ``NonPrivateEvent`` (ε = ∞). With a private
    ``retriever`` the answer costs the retrieval's event (ε at the retriever's δ).
    """

    name = "rag"

    def __init__(
        self, retriever: Retriever, generator: Generator, *, instruction: str | None = None
    ) -> None:
        self.retriever = retriever
        self.generator = generator
        self.instruction = instruction

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self.answer_batch([query], account=account)[0]

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        qs = [Query.of(q) for q in queries]
        retrievals = self.retriever.retrieve_batch([q.search_text for q in qs], account=account)
        with released_on_failure(self.retriever, retrievals, account):
            return _answer_with_retrievals(
                self.generator,
                self.instruction,
                qs,
                retrievals,
                self.retriever.knowledge_base_for(account),
                self.retriever.name,
                self.retriever.delta_for(account),
            )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "retriever": self.retriever.config(),
            "generator": self.generator.name,
            "instruction": self.instruction,
        }


_REGISTRY: Registry[RAGSystem] = Registry("system")


def register_system(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register a RAG system factory (called as ``factory(retriever=..., generator=...,
    **options)``)."""
    _REGISTRY.register(name, factory, replace=replace)


def create_system(spec: str, **kwargs: Any) -> RAGSystem:
    """Build a RAG system from a registry spec (``"non-rag"``, ``"rag"``, ...)."""
    return _REGISTRY.create(spec, **kwargs)


def system_names() -> list[str]:
    return _REGISTRY.names()


def _make_nonrag(*, generator: Generator, retriever: Retriever | None = None, **kw: Any) -> NonRAG:
    return NonRAG(generator, **kw)


register_system("non-rag", _make_nonrag)
register_system("rag", StandardRAG)
