"""The ``VectorIndex`` interface: stored vectors → scores against queries."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._registry import Registry
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy.errors import ConfigError

__all__ = [
    "SearchResult",
    "VectorIndex",
    "create_index",
    "index_names",
    "load_index",
    "register_index",
]


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Top-k of a batch of queries: ``indices[q, j]`` (positions, -1 = none) and
    ``scores[q, j]`` (inner products), best first, plus the ids of those positions."""

    indices: IntArray
    scores: FloatArray
    ids: tuple[tuple[str, ...], ...]


class VectorIndex(ABC):
    """Inner-product index over unit-norm float32 vectors with string ids.

    ``scores(queries)`` returns the full ``[q, n]`` score matrix — what DP retrieval must
    noise; ``search(queries, k)`` returns the top-k. Positions are assigned in insertion
    order and never change.
    """

    name: str = "index"

    def __init__(self, dim: int) -> None:
        if int(dim) < 1:
            raise ValueError(f"The 'dim' parameter must be >= 1; got {dim}.")
        self.dim = int(dim)
        self._ids: list[str] = []

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def id_at(self, position: int) -> str:
        return self._ids[position]

    @abstractmethod
    def add(self, vectors: FloatArray, ids: Sequence[str]) -> None:
        """Append vectors (``[n, dim]``) with their ids."""

    @abstractmethod
    def scores(self, queries: FloatArray) -> FloatArray:
        """Exact inner products of every query with every stored vector, ``[q, n]``."""

    @abstractmethod
    def search(self, queries: FloatArray, k: int) -> SearchResult:
        """Top-``k`` stored vectors per query by inner product (approximate backends may
        miss some)."""

    def scores_at(self, query: FloatArray, positions: IntArray) -> FloatArray:
        """Exact inner products of one query (``[dim]`` or ``[1, dim]``) with the stored
        vectors at ``positions``, in that order, float32. Default: from :meth:`vectors`,
        the one-query scan's product over the gathered rows
        (:func:`~ragprivacy.index._checks.gathered_scores`); a database backend scores
        them where they are stored."""
        from ragprivacy.index._checks import gathered_scores

        q, pos = self._scores_at_args(query, positions)
        return gathered_scores(np.asarray(self.vectors()), q[0], pos)

    def _scores_at_args(
        self, query: FloatArray, positions: IntArray
    ) -> tuple[np.ndarray, np.ndarray]:
        """One query as ``[1, dim]`` float32 and the positions as int64, both checked."""
        from ragprivacy.index._checks import as_queries

        q = as_queries(query, self.dim)
        if q.shape[0] != 1:
            raise ConfigError(f"scores_at takes one query; got {q.shape[0]}.")
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        if pos.size and (pos.min() < 0 or pos.max() >= len(self)):
            raise ConfigError(
                f"Positions must lie in [0, {len(self)}); got {pos.min()}..{pos.max()}."
            )
        return q, pos

    @abstractmethod
    def vectors(self) -> FloatArray:
        """The stored vectors ``[n, dim]`` in position order, read-only and without a copy
        (valid until the next :meth:`add`); what projection and exact re-scoring need."""

    @abstractmethod
    def save(self, path: str | Path) -> None:
        """Write the index to a directory; :func:`load_index` reads it back."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """JSON-ready settings."""

    @property
    def is_exact(self) -> bool:
        """True when :meth:`search` returns the exact top-k."""
        return False


_REGISTRY: Registry[VectorIndex] = Registry("index")


def register_index(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register an index factory (called as ``factory(dim=..., **options)``)."""
    _REGISTRY.register(name, factory, replace=replace)


def create_index(spec: str, *, dim: int, **kwargs: Any) -> VectorIndex:
    """Build an empty index from a spec such as ``"exact"``, ``"faiss-flat"``,
    ``"faiss-hnsw"`` or ``"pgvector:postgresql://user@host/db"``."""
    return _REGISTRY.create(spec, dim=dim, **kwargs)


def index_names() -> list[str]:
    return _REGISTRY.names()


def load_index(path: str | Path) -> VectorIndex:
    """Load an index written by :meth:`VectorIndex.save` (dispatches on its manifest)."""
    from ragprivacy.index._persist import load_index as _load

    return _load(path)


def _as_queries(queries: FloatArray, dim: int) -> np.ndarray:
    q = np.asarray(queries, dtype=np.float32)
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2 or q.shape[1] != dim:
        raise ValueError(f"Queries must have shape [q, {dim}]; got {q.shape}.")
    return np.ascontiguousarray(q)
