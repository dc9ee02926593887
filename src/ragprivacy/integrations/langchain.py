"""A private retriever as a LangChain retriever (the ``langchain`` extra).

:class:`PrivateRetriever` is a ``langchain_core`` ``BaseRetriever``: it drops into any
chain (``retriever | format_docs``, ``create_retrieval_chain``, …) and returns
``Document``\\ s whose ``metadata`` carries our document id (``ragprivacy_id``), the score
and the privacy the query spent (``privacy``: mechanism, ε, δ, and for the service the
budget left and the window). Its documents come from one of our private retrievers in
this process (``PrivateRetriever(retriever=…, account=…)``) or from a running ragprivacy
service (``PrivateRetriever.from_service(url, api_key)``).

The account is, in order: ``metadata={"ragprivacy_account": …}`` in the run's
configuration (``retriever.invoke(q, config={"metadata": {...}})``), then the retriever's
own ``account``. A service retriever queries as its API key's account only.

A query the budget refuses raises :class:`~ragprivacy.errors.BudgetExhaustedError`,
spending nothing; the chain surfaces it instead of answering from an empty context.
"""

from __future__ import annotations

from typing import Any

from ragprivacy.errors import ConfigError
from ragprivacy.integrations._source import (
    PrivateSource,
    ServiceSource,
    close_source,
    private_source,
)

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables.config import run_in_executor
except ImportError as exc:  # pragma: no cover - the extra is installed in dev and CI
    raise ImportError(
        "ragprivacy.integrations.langchain needs langchain-core; install it with "
        "pip install 'ragprivacy[langchain]'."
    ) from exc

__all__ = ["ACCOUNT_KEY", "PrivateRetriever"]

ACCOUNT_KEY = "ragprivacy_account"  # the run-configuration metadata key naming the account


class PrivateRetriever(BaseRetriever):
    """A LangChain retriever over a ragprivacy private retriever or service.

    Args:
        retriever: one of our retrievers (e.g. ``NoisyTopKRetriever``); or
        source: any :class:`~ragprivacy.integrations.PrivateSource` (what
            :meth:`from_service` builds).
        account: the default account whose budget a query spends.

    >>> from ragprivacy.corpus import Corpus
    >>> from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
    >>> from ragprivacy.types import Document as Doc
    >>> corpus = Corpus([Doc("d1", "velmora is a city"), Doc("d2", "tide tables")])
    >>> kb = KnowledgeBase.build(corpus, embedder="hashing")
    >>> docs = PrivateRetriever(retriever=TopKRetriever(kb, k=1)).invoke("velmora")
    >>> docs[0].metadata["ragprivacy_id"]
    'd1'
    """

    retriever: Any = None
    source: Any = None
    account: str | None = None

    def __init__(self, **data: Any) -> None:
        # Checked before pydantic so that a wrong argument is our one-line ConfigError, not
        # a ValidationError wrapping it.
        data["source"] = private_source(
            data.get("retriever"), data.get("source"), data.get("account")
        )
        super().__init__(**data)

    @classmethod
    def from_service(cls, url: str, api_key: str, **options: Any) -> PrivateRetriever:
        """A retriever over a running ragprivacy service, as the API key's account
        (``options``: ``k``, ``receipts_dir`` to keep the signed receipts, ``timeout``; see
        :meth:`ServiceSource.connect`)."""
        return cls(source=ServiceSource.connect(url, api_key, **options))

    def close(self) -> None:
        """Close the service connections (a retriever from :meth:`from_service` holds
        some); a library retriever holds none."""
        close_source(self.source)

    def _account(self, run_manager: Any) -> str | None:
        meta = getattr(run_manager, "metadata", None) or {}
        named = meta.get(ACCOUNT_KEY)
        if named is not None and not isinstance(named, str):
            raise ConfigError(
                f"The run metadata {ACCOUNT_KEY!r} must be an account name (a string); "
                f"got {type(named).__name__}."
            )
        return named

    def _documents(self, query: str, account: str | None) -> list[Document]:
        source: PrivateSource = self.source
        return [
            Document(page_content=d.text, metadata=d.metadata(), id=d.id)
            for d in source.retrieve(query, account=account)
        ]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self._documents(query, self._account(run_manager))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        # Our retrievers and the service client are synchronous (a budget charge is one
        # SQLite transaction): run them in the executor so the event loop keeps going.
        result: list[Document] = await run_in_executor(
            None, self._documents, query, self._account(run_manager)
        )
        return result
