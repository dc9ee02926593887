"""The ``RAGSystem`` interface, queries, and the non-private systems (non-RAG, standard)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any

from ragprivacy._registry import Registry
from ragprivacy.dp import compose, event_epsilon
from ragprivacy.errors import ChargedFailureError, GeneratorUnavailableError, RagPrivacyError
from ragprivacy.generate import Generator, Prompt, PromptBudget, Task, tracking_prompts
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
    "charged_failure",
    "charged_on_failure",
    "create_system",
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
        """Answer several queries in order (systems override this to batch). If one is
        refused or fails, its error carries the answers made before it (``answered``:
        paid for, so they are the caller's); a failure after its own retrieval is charged
        too (:func:`charged_on_failure`)."""
        out: list[Response] = []
        for q in queries:
            try:
                out.append(self.answer(q, account=account))
            except RagPrivacyError as exc:
                exc.answered = tuple(out)
                raise
        return out

    def describe(self) -> dict[str, Any]:
        """JSON-ready description of the system (recorded in results)."""
        return {"name": self.name}


def charged_failure(exc: BaseException) -> ChargedFailureError:
    """The error a caller sees when a request failed after private data was read.

    It was charged like an answer (module docstring of :func:`charged_on_failure`). The
    backend's own message is withheld: it may describe the retrieved documents (an HTTP
    400 body, a context-length error counting their tokens). The original stays on
    ``withheld`` for the operator's debugging; it must not be forwarded to the caller.
    """
    return ChargedFailureError(
        f"Generation failed after retrieval ({type(exc).__name__}); the request was charged "
        "like an answer, because whether it fails can depend on the documents it read. The "
        "backend's message is withheld because it may describe them; check the generator.",
        withheld=exc,
    )


@contextmanager
def charged_on_failure(
    retriever: Retriever, retrievals: Sequence[Retrieval], account: str | None
) -> Iterator[None]:
    """The failure rule for a block that runs after ``retrievals`` were read.

    **A failure is an answer.** Once private data has been read by anything whose success
    or failure the caller can observe, the request is charged, failed or not: whether a
    generator fails can depend on what it was given (a hosted model's context-length 400
    depends on the documents' lengths), so a refunded failure would be a free,
    data-dependent answer — an oracle outside every guarantee. So an error in the block
    keeps what ``retrievals`` spent and is replaced by :func:`charged_failure` (no backend
    detail reaches the caller); a cancel (``KeyboardInterrupt``) keeps it too and
    propagates as it is.

    The one exception is a failure that provably does not depend on the data:
    :class:`~ragprivacy.errors.GeneratorUnavailableError` at the block's *first*
    generator call (the generator was never reached, so no byte of the prompt left). Its
    retrievals are given back (``Retriever.release``) and it propagates. An unreachable
    generator after an earlier call of the block carried the documents is charged like
    any failure: the documents left, and whether the request got to that later call (a
    DP vote's next token) depends on what the earlier calls answered
    (:mod:`ragprivacy.generate.sent`). Refusals before retrieval (validation, budgets, a
    prompt that could overflow the context: :class:`ragprivacy.generate.PromptBudget`)
    never get here and spend nothing.
    """
    with tracking_prompts() as used:
        try:
            yield
        except GeneratorUnavailableError as exc:
            if used[0]:  # an earlier call carried the documents
                raise charged_failure(exc) from None
            retriever.release(retrievals, account=account)
            raise
        except ChargedFailureError:
            raise
        except Exception as exc:
            raise charged_failure(exc) from None


def check_prompt(
    budget: PromptBudget | None,
    generator: Generator,
    instruction: str | None,
    query: Query,
    documents: int,
) -> None:
    """Refuse ``query`` before retrieval if its prompt with ``documents`` documents of the
    budget could overflow the generator's context (:meth:`PromptBudget.check`)."""
    if budget is None:
        return
    new_tokens = query.options.get("max_tokens") or getattr(generator, "max_tokens", None)
    prompt = Prompt(query.task, query.text, (), instruction, query.options)
    budget.check(prompt, documents, int(new_tokens or 64))


def fitted_texts(
    kb: KnowledgeBase, retrieval: Retrieval, budget: PromptBudget | None
) -> tuple[str, ...]:
    """The retrieved documents' texts, each cut and padded to ``budget`` (when given)."""
    texts = kb.texts(retrieval.indices)
    return tuple(texts) if budget is None else budget.fit(texts)


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
    budget: PromptBudget | None = None,
) -> list[Response]:
    """Prompt each query with the texts of its retrieved documents in ``kb`` (fitted to
    ``budget``), generate in one batch, and report each retrieval's event (named
    ``mechanism``, stated at ``delta``) as the answer's cost, scoped to the retrieval: the
    guarantee covers which documents were retrieved, not their text, which the generator
    reads."""
    prompts = [
        Prompt(q.task, q.text, fitted_texts(kb, r, budget), instruction, q.options)
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

    A generation that fails after retrieval is charged like an answer
    (:func:`charged_on_failure`). With ``prompt_budget`` every retrieved document is cut
    and padded to its budget and a query whose prompt could overflow the generator's
    context is refused before retrieval, for nothing (:class:`ragprivacy.generate.
    PromptBudget`).
    """

    name = "rag"

    def __init__(
        self,
        retriever: Retriever,
        generator: Generator,
        *,
        instruction: str | None = None,
        prompt_budget: PromptBudget | None = None,
    ) -> None:
        self.retriever = retriever
        self.generator = generator
        self.instruction = instruction
        self.prompt_budget = prompt_budget

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self.answer_batch([query], account=account)[0]

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        qs = [Query.of(q) for q in queries]
        for q in qs:  # before anything private is read: a refusal costs nothing
            check_prompt(self.prompt_budget, self.generator, self.instruction, q, self.retriever.k)
        retrievals = self.retriever.retrieve_batch([q.search_text for q in qs], account=account)
        with charged_on_failure(self.retriever, retrievals, account):
            return _answer_with_retrievals(
                self.generator,
                self.instruction,
                qs,
                retrievals,
                self.retriever.knowledge_base_for(account),
                self.retriever.name,
                self.retriever.delta_for(account),
                self.prompt_budget,
            )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "retriever": self.retriever.config(),
            "generator": self.generator.name,
            "instruction": self.instruction,
            "prompt_budget": None if self.prompt_budget is None else asdict(self.prompt_budget),
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
