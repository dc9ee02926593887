"""A private retriever as a LlamaIndex retriever (the ``llamaindex`` extra).

:class:`PrivateRetriever` is a ``llama_index.core`` ``BaseRetriever``: ``retrieve(query)``
returns ``NodeWithScore``\\ s whose ``TextNode`` has our document id as its ``id_`` and in
its metadata (``ragprivacy_id``), with the score and the privacy the query spent
(``privacy``); it plugs into ``RetrieverQueryEngine.from_args(retriever, llm=…)``. Its
documents come from one of our private retrievers in this process or from a running
ragprivacy service (:meth:`PrivateRetriever.from_service`).

A query the budget refuses raises :class:`~ragprivacy.errors.BudgetExhaustedError`,
spending nothing, and the query engine surfaces it.

Offline use: LlamaIndex counts prompt tokens with ``tiktoken``, whose encodings are
downloaded on first use; set ``Settings.tokenizer`` (any ``str -> list``) before building
a query engine on a machine without network.
"""

from __future__ import annotations

from typing import Any

from ragprivacy.integrations._source import (
    LibrarySource,
    PrivateSource,
    ServiceSource,
    close_source,
    private_source,
)
from ragprivacy.retrieval import Retriever

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # pragma: no cover - the extra is installed in dev and CI
    raise ImportError(
        "ragprivacy.integrations.llama_index needs llama-index-core; install it with "
        "pip install 'ragprivacy[llamaindex]'."
    ) from exc

__all__ = ["PrivateRetriever"]


class PrivateRetriever(BaseRetriever):
    """A LlamaIndex retriever over a ragprivacy private retriever or service.

    Args:
        retriever: one of our retrievers (e.g. ``NoisyTopKRetriever``); or
        source: any :class:`~ragprivacy.integrations.PrivateSource`.
        account: the account whose budget each query spends.
    """

    def __init__(
        self,
        retriever: Retriever | None = None,
        *,
        source: PrivateSource | None = None,
        account: str | None = None,
        **kwargs: object,
    ) -> None:
        self.source: PrivateSource = private_source(retriever, source, account)
        self.account = account
        super().__init__(**kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_service(cls, url: str, api_key: str, **options: Any) -> PrivateRetriever:
        """A retriever over a running ragprivacy service, as the API key's account
        (``options``: ``k``, ``receipts_dir``, ``timeout``; see
        :meth:`ServiceSource.connect`)."""
        return cls(source=ServiceSource.connect(url, api_key, **options))

    def close(self) -> None:
        """Close the service connections (a retriever from :meth:`from_service` holds
        some); a library retriever holds none."""
        close_source(self.source)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        account = self.account if isinstance(self.source, LibrarySource) else None
        out = []
        for d in self.source.retrieve(query_bundle.query_str, account=account):
            meta = d.metadata()
            # The LLM and the embedder see the text only: the privacy record and the
            # score are for the caller, not for the prompt.
            node = TextNode(
                id_=d.id,
                text=d.text,
                metadata=meta,
                excluded_llm_metadata_keys=list(meta),
                excluded_embed_metadata_keys=list(meta),
            )
            out.append(NodeWithScore(node=node, score=d.score))
        return out
