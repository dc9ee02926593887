"""``KnowledgeBase``: a corpus with its embedder and vector index, kept in step."""

from __future__ import annotations

from collections.abc import Sequence

from ragprivacy.corpus import Corpus
from ragprivacy.embed import Embedder, create_embedder
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.index import VectorIndex, create_index
from ragprivacy.types import Document

__all__ = ["KnowledgeBase"]


class KnowledgeBase:
    """The documents a RAG system retrieves from: corpus, embedder and index together.

    Position ``i`` of the index holds ``corpus[i]``. Build one with :meth:`build`, which
    fits a learning embedder (``lsa``) on the corpus texts first.
    """

    def __init__(self, corpus: Corpus, embedder: Embedder, index: VectorIndex) -> None:
        if len(index) != len(corpus):
            raise DataError(
                f"The index holds {len(index)} vectors but the corpus {corpus.name!r} holds "
                f"{len(corpus)} documents; rebuild the index from this corpus."
            )
        if index.dim != embedder.dim:
            raise ConfigError(
                f"The index width {index.dim} differs from the embedder width {embedder.dim}."
            )
        if index.ids != corpus.ids:
            raise DataError(
                "The index ids are not the corpus ids in order; rebuild the index from "
                f"corpus {corpus.name!r}."
            )
        self.corpus = corpus
        self.embedder = embedder
        self.index = index

    @classmethod
    def build(
        cls,
        corpus: Corpus,
        *,
        embedder: Embedder | str = "lsa",
        index: str = "exact",
        fit_texts: Sequence[str] | None = None,
        progress: bool | None = None,
    ) -> KnowledgeBase:
        """Embed ``corpus`` and index it.

        Args:
            corpus: the documents (must not be empty).
            embedder: an embedder or a registry spec (``"lsa"``, ``"minilm"``, ...). A
                spec's embedder is fitted on ``fit_texts`` (default: the corpus texts).
            index: an index registry spec (``"exact"``, ``"faiss-flat"``, ``"faiss-hnsw"``,
                ``"pgvector:postgresql://..."``: a new table in that database).
            fit_texts: texts to fit a learning embedder on.
            progress: show a progress bar while encoding (default: only for large inputs).
        """
        corpus.require_nonempty()
        emb = create_embedder(embedder) if isinstance(embedder, str) else embedder
        if isinstance(embedder, str) or not emb.is_fitted:
            emb.fit(list(fit_texts) if fit_texts is not None else corpus.texts)
        vectors = emb.encode(corpus.texts, progress=progress)
        idx = create_index(index, dim=emb.dim)
        idx.add(vectors, corpus.ids)
        return cls(corpus, emb, idx)

    def __len__(self) -> int:
        return len(self.corpus)

    def document(self, position: int) -> Document:
        doc: Document = self.corpus[int(position)]
        return doc

    def texts(self, positions: Sequence[int]) -> tuple[str, ...]:
        return tuple(self.corpus[int(p)].text for p in positions)
