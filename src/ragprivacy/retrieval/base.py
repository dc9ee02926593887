"""The ``Retriever`` interface and the plain (non-private) top-K retriever."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from ragprivacy._registry import Registry
from ragprivacy._validation import check_positive_int
from ragprivacy.retrieval.knowledge_base import KnowledgeBase
from ragprivacy.types import Retrieval

__all__ = [
    "Retriever",
    "TopKRetriever",
    "create_retriever",
    "register_retriever",
    "retriever_names",
]


class Retriever(ABC):
    """Query text → ranked documents of a :class:`KnowledgeBase`.

    This is where the privacy of retrieval is decided: a private retriever adds noise,
    screens by threshold or projects, and reports the privacy event it consumed in
    ``Retrieval.event`` (``NonPrivateEvent`` when it gives no guarantee, as plain top-K
    does); an ``account`` lets it charge per-account budgets.
    """

    name: str = "retriever"
    #: δ at which the ε of this retriever's per-query events is stated (None: the events
    #: are pure, or there is no guarantee).
    delta: float | None = None

    def __init__(self, kb: KnowledgeBase, *, k: int = 5) -> None:
        self.kb = kb
        self.k = check_positive_int("k", k)

    @abstractmethod
    def retrieve(self, query: str, *, account: str | None = None) -> Retrieval:
        """The documents for one query, best first."""

    def retrieve_batch(
        self, queries: Sequence[str], *, account: str | None = None
    ) -> list[Retrieval]:
        """The documents for several queries (private retrievers charge each)."""
        return [self.retrieve(q, account=account) for q in queries]

    def release(self, retrievals: Sequence[Retrieval], *, account: str | None = None) -> None:
        """Give back what ``retrievals`` reserved, because the request that made them
        failed in a way that provably does not depend on the data.

        A failure after retrieval is charged like an answer (``rag.charged_on_failure``):
        whether it fails can depend on what was read. Systems call this only for the
        failure that cannot — a generator that was never reached
        (``GeneratorUnavailableError``). Retrievers without budgets keep nothing (the
        default).
        """

    def knowledge_base_for(self, account: str | None) -> KnowledgeBase:
        """The knowledge base ``account``'s retrievals index into (one for most retrievers;
        the account's tenant's for a multi-tenant one)."""
        return self.kb

    def delta_for(self, account: str | None) -> float | None:
        """δ at which the ε of ``account``'s retrieval events is stated (:attr:`delta`)."""
        return self.delta

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "k": self.k}


class TopKRetriever(Retriever):
    """Plain top-K by inner product: the non-private baseline (no privacy event).

    >>> from ragprivacy.corpus import Corpus
    >>> from ragprivacy.types import Document
    >>> docs = [Document("a", "red apples and pears"), Document("b", "blue sky at night"),
    ...         Document("c", "green pears in autumn")]
    >>> kb = KnowledgeBase.build(Corpus(docs), embedder="hashing")
    >>> TopKRetriever(kb, k=1).retrieve("blue night sky").ids
    ('b',)
    """

    name = "topk"

    def retrieve(self, query: str, *, account: str | None = None) -> Retrieval:
        return self.retrieve_batch([query], account=account)[0]

    def retrieve_batch(
        self, queries: Sequence[str], *, account: str | None = None
    ) -> list[Retrieval]:
        if not queries:
            return []
        vectors = self.kb.embedder.encode(list(queries))
        found = self.kb.index.search(vectors, self.k)
        out = []
        for row in range(len(queries)):
            keep = [j for j, pos in enumerate(found.indices[row]) if pos >= 0]
            out.append(
                Retrieval(
                    ids=tuple(found.ids[row][j] for j in keep),
                    indices=tuple(int(found.indices[row][j]) for j in keep),
                    scores=tuple(float(found.scores[row][j]) for j in keep),
                )
            )
        return out


_REGISTRY: Registry[Retriever] = Registry("retriever")


def register_retriever(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register a retriever factory (called as ``factory(kb, k=..., **options)``)."""
    _REGISTRY.register(name, factory, replace=replace)


def create_retriever(spec: str, kb: KnowledgeBase, **kwargs: Any) -> Retriever:
    """Build a retriever over ``kb`` from a registry spec (``"topk"``, ...)."""
    return _REGISTRY.create(spec, kb, **kwargs)


def retriever_names() -> list[str]:
    return _REGISTRY.names()


register_retriever("topk", TopKRetriever)
