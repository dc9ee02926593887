"""Input checks and the exact top-k selection shared by the index backends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ragprivacy._threads import blas_threads
from ragprivacy._validation import check_positive_int
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.index.base import SearchResult

__all__ = [
    "as_queries",
    "as_vectors",
    "blas_threads",
    "check_dim",
    "check_k",
    "check_new_ids",
    "check_num_threads",
    "exact_topk",
    "finish_result",
    "gathered_scores",
    "query_chunk_rows",
]

#: Bytes of score matrix one search chunk may hold (queries x stored vectors x 4).
CHUNK_BYTES = 64 * 2**20


def check_dim(dim: int) -> int:
    """The vector width: an integer >= 1."""
    return check_positive_int("dim", dim)


def check_k(k: int) -> int:
    """The number of results per query: an integer >= 1."""
    return check_positive_int("k", k)


def check_num_threads(num_threads: int | None) -> int | None:
    """``None`` (library default) or an integer >= 1."""
    return None if num_threads is None else check_positive_int("num_threads", num_threads)


def _as_matrix(values: Any, dim: int, what: str, fix: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise DataError(f"The {what} must be a numeric array of shape [n, {dim}]; {exc}.") from None
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != dim:
        raise ConfigError(f"The {what} must have shape [n, {dim}]; got {arr.shape}. {fix}")
    if not np.isfinite(arr).all():
        bad = int(np.flatnonzero(~np.isfinite(arr).all(axis=1))[0])
        raise DataError(
            f"The {what} hold NaN or infinite values (first in row {bad}); "
            "clean or re-encode them before indexing or searching."
        )
    return np.ascontiguousarray(arr)


def as_vectors(vectors: Any, dim: int) -> np.ndarray:
    """Vectors to store: finite float32, C-contiguous, ``[n, dim]`` (a 1-D row is one)."""
    return _as_matrix(
        vectors,
        dim,
        "vectors",
        f"Encode with an embedder of width {dim}, or create the index with the vectors' width.",
    )


def as_queries(queries: Any, dim: int) -> np.ndarray:
    """Query vectors: finite float32, C-contiguous, ``[q, dim]`` (a 1-D row is one)."""
    return _as_matrix(
        queries,
        dim,
        "queries",
        f"Encode queries with the embedder that built this index (width {dim}).",
    )


def check_new_ids(ids: Sequence[str], n_rows: int, existing: set[str]) -> list[str]:
    """The ids of ``n_rows`` new vectors: strings, one per row, unique across the index."""
    if isinstance(ids, (str, bytes)):
        raise DataError(
            f"The 'ids' parameter must be a sequence of strings, not a single string; "
            f"got {ids!r}. Wrap it in a list."
        )
    out = list(ids)
    if len(out) != n_rows:
        raise DataError(f"Got {n_rows} vectors but {len(out)} ids; pass exactly one id per vector.")
    fresh: set[str] = set()
    for value in out:
        if not isinstance(value, str):
            raise DataError(f"Every id must be a string; got {value!r} ({type(value).__name__}).")
        if value in fresh:
            raise DataError(f"The ids hold duplicates (first {value!r}); every id must be unique.")
        fresh.add(value)
    clash = fresh & existing
    if clash:
        raise DataError(
            f"The index already holds id {min(clash)!r} ({len(clash)} clashing ids); "
            "every id must be unique across the index."
        )
    return out


def query_chunk_rows(n_stored: int, budget_bytes: int = CHUNK_BYTES) -> int:
    """How many queries to score at once so one chunk's scores fit ``budget_bytes``."""
    return max(1, budget_bytes // max(1, 4 * n_stored))


def exact_topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of each row of ``scores`` (``k <= n``), best first.

    Ties are broken by lower position, also at the cut-off: among equal scores at the
    k-th place the lowest positions are kept. ``np.partition`` finds each row's k-th
    largest value in O(n); the positions scoring at least that much are read off in
    position order, and only rows with a tie at the cut-off are repaired one by one.

    Returns:
        ``(positions, scores)``, both ``[q, k]`` (int64, float32).
    """
    q, n = scores.shape
    if k >= n:
        part = np.broadcast_to(np.arange(n, dtype=np.int64), (q, n)).copy()
    else:
        kth = np.partition(scores, n - k, axis=1)[:, n - k]
        mask = scores >= kth[:, None]
        clean = np.count_nonzero(mask, axis=1) == k
        part = np.empty((q, k), dtype=np.int64)
        rows = np.flatnonzero(clean)
        if rows.size == q:
            part[:] = np.nonzero(mask)[1].reshape(q, k)
        elif rows.size:
            part[rows] = np.nonzero(mask[rows])[1].reshape(rows.size, k)
        for row in np.flatnonzero(~clean):
            s = scores[row]
            above = np.flatnonzero(s > kth[row])
            tied = np.flatnonzero(s == kth[row])[: k - above.size]
            part[row] = np.concatenate([above, tied])
    top = np.take_along_axis(scores, part, axis=1)
    order = np.lexsort((part, -top), axis=-1)
    return np.take_along_axis(part, order, axis=1), np.take_along_axis(top, order, axis=1)


def finish_result(
    positions: np.ndarray, scores: np.ndarray, k: int, ids: Sequence[str]
) -> SearchResult:
    """Pad ``[q, m]`` results to ``[q, k]`` with position -1 and score ``-inf``.

    ``ids[q]`` holds one id per non-negative position of row ``q``, in order (padding is
    always at the end of a row, so ``ids[q][j]`` belongs to ``indices[q, j]``).
    """
    q, m = positions.shape
    idx = np.full((q, k), -1, dtype=np.int64)
    val = np.full((q, k), -np.inf, dtype=np.float32)
    idx[:, :m] = positions
    val[:, :m] = scores
    invalid = idx < 0
    val[invalid] = -np.inf
    id_rows = tuple(tuple(ids[int(p)] for p in row if p >= 0) for row in idx)
    return SearchResult(indices=idx, scores=val, ids=id_rows)


#: A gathered score block is padded with zero rows to a multiple of this many rows, so
#: that BLAS's main GEMV kernel computes every product, as it does for all but the last
#: few rows of a scan (OpenBLAS's tail kernel sums in another order: measured 1-ulp
#: differences on ~0.4 % of unpadded gathered scores, none on padded ones).
GATHER_PAD = 16


def gathered_scores(stored: np.ndarray, query: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Inner products of one query (``[dim]``) with ``stored[positions]``, float32.

    The same product as a one-query scan, ``query[None, :] @ stored.T``, over a gathered
    (and padded, :data:`GATHER_PAD`) block, so each value is the scan's value bit for bit
    except where the scan's BLAS used its tail kernel or another thread split (measured
    in ``benchmarks/bench_retrieval.py``). A batch scan of several queries (a GEMM) sums
    in another order and differs from both in the last bit for most scores.
    """
    m = positions.size
    if m == 0:
        return np.empty(0, dtype=np.float32)
    block = np.empty((-(-m // GATHER_PAD) * GATHER_PAD, stored.shape[1]), dtype=np.float32)
    np.take(stored, positions, axis=0, out=block[:m])
    block[m:] = 0.0
    q = np.ascontiguousarray(query, dtype=np.float32)[None, :]
    return np.asarray(q @ block.T, dtype=np.float32)[0, :m]
