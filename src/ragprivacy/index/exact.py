"""``ExactIndex``: brute-force inner products with numpy/BLAS."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive_int
from ragprivacy.index._checks import (
    CHUNK_BYTES,
    as_queries,
    as_vectors,
    blas_threads,
    check_dim,
    check_k,
    check_new_ids,
    check_num_threads,
    exact_topk,
    finish_result,
    gathered_scores,
    query_chunk_rows,
)
from ragprivacy.index.base import SearchResult, VectorIndex

__all__ = ["ExactIndex"]


class ExactIndex(VectorIndex):
    """Exact inner-product scan over float32 vectors held in one numpy array.

    ``scores`` is one matrix product; ``search`` scores the queries in chunks (at most
    ``chunk_bytes`` of scores at a time), finds each row's k-th largest score with
    ``np.partition`` and sorts the k best, breaking ties by lower position (also at the
    cut-off). A query against n stored vectors costs one GEMV over ``n x dim`` floats,
    bound by memory bandwidth (benchmarks/README.md, "Embedders and indices").
    ``add`` appends in amortised O(new rows) by growing a buffer.

    When ``k`` exceeds the number of stored vectors, results are padded with position
    -1 and score ``-inf`` (as :class:`~ragprivacy.index.base.SearchResult` specifies).

    Args:
        dim: vector width.
        num_threads: BLAS threads during scoring (``None``: the BLAS default). On a busy
            machine one thread can be faster than two.
        chunk_bytes: bytes of score matrix one search chunk may use.

    >>> import numpy as np
    >>> index = ExactIndex(2)
    >>> index.add(np.array([[1.0, 0.0], [0.0, 1.0]]), ["x", "y"])
    >>> index.search(np.array([0.6, 0.8]), k=1).ids
    (('y',),)
    """

    name = "exact"

    def __init__(
        self, dim: int, *, num_threads: int | None = None, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        super().__init__(check_dim(dim))
        self.num_threads = check_num_threads(num_threads)
        self.chunk_bytes = check_positive_int("chunk_bytes", chunk_bytes)
        self._buffer = np.empty((0, self.dim), dtype=np.float32)
        self._id_set: set[str] = set()

    @property
    def is_exact(self) -> bool:
        return True

    def config(self) -> dict[str, Any]:
        return {"num_threads": self.num_threads, "chunk_bytes": self.chunk_bytes}

    def vectors(self) -> FloatArray:
        """The stored vectors ``[n, dim]`` (a read-only view)."""
        view = self._buffer[: len(self)]
        view.flags.writeable = False
        return view

    def add(self, vectors: FloatArray, ids: Sequence[str]) -> None:
        rows = as_vectors(vectors, self.dim)
        new_ids = check_new_ids(ids, rows.shape[0], self._id_set)
        n, m = len(self), rows.shape[0]
        if n + m > self._buffer.shape[0]:
            grown = np.empty((max(n + m, 2 * self._buffer.shape[0], 1024), self.dim), np.float32)
            grown[:n] = self._buffer[:n]
            self._buffer = grown
        self._buffer[n : n + m] = rows
        self._ids.extend(new_ids)
        self._id_set.update(new_ids)

    def scores(self, queries: FloatArray) -> FloatArray:
        q = as_queries(queries, self.dim)
        with blas_threads(self.num_threads):
            return np.asarray(q @ self._buffer[: len(self)].T, dtype=np.float32)

    def scores_at(self, query: FloatArray, positions: IntArray) -> FloatArray:
        """The scores of ``positions`` for one query: :meth:`scores`'s product over the
        gathered rows, under the same BLAS thread setting (bit-identical to a one-query
        :meth:`scores` except where BLAS used its tail kernel, :func:`gathered_scores`)."""
        q, pos = self._scores_at_args(query, positions)
        with blas_threads(self.num_threads):
            return gathered_scores(self._buffer[: len(self)], q[0], pos)

    def search(self, queries: FloatArray, k: int) -> SearchResult:
        q = as_queries(queries, self.dim)
        k = check_k(k)
        n = len(self)
        k_eff = min(k, n)
        positions = np.empty((q.shape[0], k_eff), dtype=np.int64)
        values = np.empty((q.shape[0], k_eff), dtype=np.float32)
        if k_eff > 0:
            stored = self._buffer[:n]
            step = query_chunk_rows(n, self.chunk_bytes)
            with blas_threads(self.num_threads):
                for start in range(0, q.shape[0], step):
                    block = q[start : start + step] @ stored.T
                    p, v = exact_topk(block, k_eff)
                    positions[start : start + step] = p
                    values[start : start + step] = v
        return finish_result(positions, values, k, self._ids)

    def save(self, path: str | Path) -> None:
        from ragprivacy.index._persist import save_index_dir

        save_index_dir(
            path,
            backend=self.name,
            dim=self.dim,
            ids=self._ids,
            vectors=self._buffer[: len(self)],
            config=self.config(),
        )

    @classmethod
    def _from_saved(cls, saved: Any) -> ExactIndex:
        cfg = saved.config
        index = cls(
            int(saved.manifest["dim"]),
            num_threads=cfg.get("num_threads"),
            chunk_bytes=int(cfg.get("chunk_bytes", CHUNK_BYTES)),
        )
        index.add(saved.vectors, saved.ids)
        return index
