"""Vectors → exact or approximate inner-product scores.

Backends (registered names): ``exact`` (:class:`ExactIndex`, numpy/BLAS), ``faiss-flat``
(:class:`FaissFlatIndex`) and ``faiss-hnsw`` (:class:`FaissHnswIndex`). FAISS is imported
only when a FAISS index is created or loaded.
"""

from __future__ import annotations

from ragprivacy.index.base import (
    SearchResult,
    VectorIndex,
    create_index,
    index_names,
    load_index,
    register_index,
)
from ragprivacy.index.exact import ExactIndex
from ragprivacy.index.faiss_index import FaissFlatIndex, FaissHnswIndex, HnswSettings

__all__ = [
    "ExactIndex",
    "FaissFlatIndex",
    "FaissHnswIndex",
    "HnswSettings",
    "SearchResult",
    "VectorIndex",
    "create_index",
    "index_names",
    "load_index",
    "register_index",
]

register_index("exact", ExactIndex, replace=True)
register_index("faiss-flat", FaissFlatIndex, replace=True)
register_index("faiss-hnsw", FaissHnswIndex, replace=True)
