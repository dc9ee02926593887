"""Vectors → exact or approximate inner-product scores.

Backends (registered names): ``exact`` (:class:`ExactIndex`, numpy/BLAS), ``faiss-flat``
(:class:`FaissFlatIndex`), ``faiss-hnsw`` (:class:`FaissHnswIndex`) and ``pgvector``
(:class:`PgvectorIndex`, a PostgreSQL table with a pgvector HNSW index; spec
``"pgvector:postgresql://user@host/db"``). FAISS, psycopg and pgvector are imported only
when such an index is created or loaded.
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
from ragprivacy.index.pgvector_index import PgvectorIndex

__all__ = [
    "ExactIndex",
    "FaissFlatIndex",
    "FaissHnswIndex",
    "HnswSettings",
    "PgvectorIndex",
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
register_index("pgvector", PgvectorIndex, replace=True)
