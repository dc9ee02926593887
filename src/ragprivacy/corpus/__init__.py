"""Documents: collections, readers/writers, dataset loaders and synthetic corpora."""

from __future__ import annotations

from ragprivacy.corpus.collection import Corpus, QAItem

__all__ = ["Corpus", "QAItem"]
