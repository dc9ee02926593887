"""Where a drop-in retriever gets its documents: one of our private retrievers, or a
running ragprivacy service.

Both give the same thing, :class:`RetrievedDocument`\\ s carrying our document id, the
text, the (noisy) score where there is one, and the privacy the query spent, so the
LangChain and LlamaIndex adapters stay thin translations. A query that the account's
budget refuses raises :class:`~ragprivacy.errors.BudgetExhaustedError` (from the retriever,
or from the service's HTTP 429) and spends nothing; the adapters let it propagate so a
chain or query engine surfaces it instead of answering from no context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragprivacy.dp import event_epsilon
from ragprivacy.errors import ConfigError
from ragprivacy.retrieval import Retriever
from ragprivacy.service import Client

__all__ = [
    "LibrarySource",
    "PrivateSource",
    "RetrievedDocument",
    "ServiceSource",
    "close_source",
    "private_source",
]

_REPORT_DELTA = 1e-6  # δ for events of a retriever that names none (as rag answers do)


@dataclass(frozen=True, slots=True)
class RetrievedDocument:
    """One retrieved document and what its query spent (``privacy``: the same for every
    document of one query)."""

    id: str
    text: str
    score: float | None
    privacy: dict[str, Any] = field(default_factory=dict)

    def metadata(self) -> dict[str, Any]:
        """The metadata the adapters attach: ``ragprivacy_id``, the score and ``privacy``."""
        return {"ragprivacy_id": self.id, "score": self.score, "privacy": dict(self.privacy)}


class PrivateSource(Protocol):
    """Anything that answers a query with documents on behalf of an account."""

    def retrieve(self, query: str, *, account: str | None = None) -> list[RetrievedDocument]:
        """The documents for ``query``, best first."""
        ...  # pragma: no cover


def private_source(
    retriever: object | None, source: object | None, account: str | None
) -> PrivateSource:
    """The source an adapter reads: exactly one of ``retriever`` (one of our retrievers,
    wrapped as a :class:`LibrarySource` with ``account``) or ``source``."""
    if (retriever is None) == (source is None):
        raise ConfigError(
            "PrivateRetriever needs exactly one of 'retriever' (a ragprivacy Retriever) "
            "or 'source'; use PrivateRetriever.from_service(url, api_key) for a service."
        )
    if retriever is not None:
        return LibrarySource(retriever, account)  # type: ignore[arg-type]  # checked there
    return source  # type: ignore[return-value]


def close_source(source: object) -> None:
    """Close ``source``'s connections where it holds any (a service source does)."""
    close = getattr(source, "close", None)
    if callable(close):
        close()


class LibrarySource:
    """A :class:`~ragprivacy.retrieval.Retriever` in this process; ``account`` is the
    default account (a query may name another).

    The privacy of each query is the retriever's event stated as (ε, δ) at the
    retriever's δ (``1e-6`` where it names none), with the retriever's name.
    """

    def __init__(self, retriever: Retriever, account: str | None = None) -> None:
        if not isinstance(retriever, Retriever):
            raise ConfigError(
                "The 'retriever' parameter must be a ragprivacy Retriever (e.g. "
                f"NoisyTopKRetriever); got {type(retriever).__name__}."
            )
        self.retriever = retriever
        self.account = account

    def retrieve(self, query: str, *, account: str | None = None) -> list[RetrievedDocument]:
        who = account if account is not None else self.account
        got = self.retriever.retrieve(query, account=who)
        delta = self.retriever.delta_for(who)
        epsilon, used_delta = event_epsilon(got.event, _REPORT_DELTA if delta is None else delta)
        privacy = {
            "mechanism": self.retriever.name,
            "epsilon": epsilon if math.isfinite(epsilon) else None,
            "delta": used_delta,
            "guaranteed": got.event.guaranteed,
            "account": who,
        }
        kb = self.retriever.knowledge_base_for(who)
        texts = kb.texts(got.indices)
        return [
            RetrievedDocument(doc_id, text, float(score), privacy)
            for doc_id, text, score in zip(got.ids, texts, got.scores)
        ]


class ServiceSource:
    """A running ragprivacy service, through the account's :class:`~ragprivacy.service.Client`
    (which keeps the signed receipts when it was given a ``receipts_dir``).

    The account is the API key's; a per-query ``account`` cannot change it and is refused.
    The privacy of each query is the service's ``privacy`` field plus the ``budget`` left.
    """

    def __init__(self, client: Client, *, k: int | None = None) -> None:
        self.client = client
        self.k = k

    @classmethod
    def connect(
        cls,
        url: str,
        api_key: str,
        *,
        k: int | None = None,
        receipts_dir: str | Path | None = None,
        timeout: float = 30.0,
    ) -> ServiceSource:
        """A source over the service at ``url`` as the API key's account;
        ``receipts_dir`` keeps the signed receipts for the audit."""
        return cls(Client(url, api_key, receipts_dir=receipts_dir, timeout=timeout), k=k)

    def close(self) -> None:
        """Close the client's HTTP connections."""
        self.client.close()

    def retrieve(self, query: str, *, account: str | None = None) -> list[RetrievedDocument]:
        if account is not None:
            raise ConfigError(
                "A service retriever queries as its API key's account; an 'account' given "
                "per query cannot change it (make one retriever per key)."
            )
        out = self.client.retrieve(query, k=self.k)
        privacy = {**dict(out.get("privacy") or {}), "budget": out.get("budget")}
        privacy["window_id"] = out.get("window_id")
        return [
            RetrievedDocument(str(d["id"]), str(d["text"]), None, privacy)
            for d in out.get("documents", [])
        ]
