"""FAISS backends: ``FaissFlatIndex`` (exact) and ``FaissHnswIndex`` (approximate).

FAISS is imported when an index is created, never at package import; without it the
constructors raise :class:`~ragprivacy.errors.BackendError`.

Both backends answer :meth:`scores` exactly, for every stored vector, by a matrix
product over the vectors FAISS itself stores (read in place, no second copy): DP
retrieval noises every score, so an approximate score matrix would be wrong. Only
:meth:`search` of the HNSW backend is approximate.
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive_int
from ragprivacy.errors import BackendError, DataError
from ragprivacy.index._checks import (
    as_queries,
    as_vectors,
    blas_threads,
    check_dim,
    check_k,
    check_new_ids,
    check_num_threads,
    finish_result,
    gathered_scores,
)
from ragprivacy.index.base import SearchResult, VectorIndex

__all__ = ["FaissFlatIndex", "FaissHnswIndex", "HnswSettings", "import_faiss"]


def import_faiss() -> Any:
    """Import FAISS or raise a :class:`BackendError` saying how to install it."""
    try:
        import faiss
    except ImportError as exc:
        raise BackendError(
            "The FAISS index backends need the 'faiss' package, which is not installed; "
            "install the faiss extra (pip install 'ragprivacy[faiss]') or use the "
            f"'exact' index. ({exc})"
        ) from exc
    return faiss


@contextlib.contextmanager
def _omp_threads(faiss: Any, num_threads: int | None) -> Iterator[None]:
    """Set FAISS's OpenMP thread count inside the block and restore it after."""
    if num_threads is None:
        yield
        return
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(num_threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


class _FaissIndex(VectorIndex):
    """Shared parts: ids, validation, exact scores over FAISS's storage, persistence."""

    def __init__(self, dim: int, *, num_threads: int | None = None) -> None:
        super().__init__(check_dim(dim))
        self.num_threads = check_num_threads(num_threads)
        self._faiss = import_faiss()
        self._index = self._new_index()
        self._id_set: set[str] = set()

    @abstractmethod
    def _new_index(self) -> Any:
        """An empty FAISS index for this backend."""

    @abstractmethod
    def _flat_storage(self) -> Any:
        """The ``IndexFlat`` that holds the raw vectors."""

    def _search_params(self, k: int) -> Any:
        return None

    def config(self) -> dict[str, Any]:
        return {"num_threads": self.num_threads}

    def _stored(self) -> np.ndarray:
        """The stored vectors ``[n, dim]`` as a view of FAISS's memory (valid until the
        next ``add``)."""
        n = len(self)
        if n == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        xb = self._faiss.rev_swig_ptr(self._flat_storage().get_xb(), n * self.dim)
        return np.asarray(xb, dtype=np.float32).reshape(n, self.dim)

    def vectors(self) -> FloatArray:
        """The stored vectors ``[n, dim]``, a read-only view of FAISS's own storage."""
        view = self._stored()
        view.flags.writeable = False
        return view

    def add(self, vectors: FloatArray, ids: Sequence[str]) -> None:
        rows = as_vectors(vectors, self.dim)
        new_ids = check_new_ids(ids, rows.shape[0], self._id_set)
        if rows.shape[0] == 0:
            return
        with _omp_threads(self._faiss, self.num_threads):
            self._index.add(rows)
        self._ids.extend(new_ids)
        self._id_set.update(new_ids)
        if self._index.ntotal != len(self._ids):  # pragma: no cover - FAISS invariant
            raise BackendError(
                f"FAISS holds {self._index.ntotal} vectors but {len(self._ids)} ids were added."
            )

    def scores(self, queries: FloatArray) -> FloatArray:
        """Exact scores of every stored vector: one BLAS product over FAISS's storage.

        FAISS's own inner-product kernel (``fvec_inner_products_ny``, split over two
        threads) was measured against it on a busy 2-core machine and was no faster
        (benchmarks/README.md, "Embedders and indices"), so the BLAS product stays."""
        q = as_queries(queries, self.dim)
        with blas_threads(self.num_threads):
            return np.asarray(q @ self._stored().T, dtype=np.float32)

    def scores_at(self, query: FloatArray, positions: IntArray) -> FloatArray:
        """The scores of ``positions`` for one query: :meth:`scores`'s BLAS product over
        the gathered rows of FAISS's storage, under the same thread setting (bit-identical
        to a one-query :meth:`scores` except where BLAS used its tail kernel,
        :func:`~ragprivacy.index._checks.gathered_scores`)."""
        q, pos = self._scores_at_args(query, positions)
        with blas_threads(self.num_threads):
            return gathered_scores(self._stored(), q[0], pos)

    def search(self, queries: FloatArray, k: int) -> SearchResult:
        q = as_queries(queries, self.dim)
        k = check_k(k)
        k_eff = min(k, len(self))
        if k_eff == 0:
            empty = np.empty((q.shape[0], 0))
            return finish_result(empty.astype(np.int64), empty.astype(np.float32), k, self._ids)
        with _omp_threads(self._faiss, self.num_threads):
            values, positions = self._index.search(q, k_eff, params=self._search_params(k_eff))
        positions = positions.astype(np.int64)
        values = values.astype(np.float32)
        missing = positions < 0
        values[missing] = -np.inf
        # deterministic order: best score first, equal scores by lower position, misses last
        order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, positions), -values))
        return finish_result(
            np.take_along_axis(positions, order, axis=1),
            np.take_along_axis(values, order, axis=1),
            k,
            self._ids,
        )

    def save(self, path: str | Path) -> None:
        from ragprivacy.index._persist import FAISS_FILE, save_index_dir

        faiss = self._faiss
        save_index_dir(
            path,
            backend=self.name,
            dim=self.dim,
            ids=self._ids,
            vectors=self._stored(),
            config=self.config(),
            extra_files={FAISS_FILE: lambda p: faiss.write_index(self._index, str(p))},
        )

    @abstractmethod
    def _check_loaded(self, index: Any) -> bool:
        """Whether a FAISS index read from disk has this backend's type and metric."""

    @classmethod
    def _from_saved(cls, saved: Any) -> _FaissIndex:
        from ragprivacy.index._persist import FAISS_FILE

        dim = int(saved.manifest["dim"])
        out = cls(dim, **saved.config)
        path = saved.file(FAISS_FILE)
        if not path.is_file():
            raise DataError(f"The FAISS index file {str(path)!r} is missing; save the index again.")
        try:
            loaded = out._faiss.read_index(str(path))
        except RuntimeError as exc:
            raise DataError(f"The FAISS index file {str(path)!r} cannot be read: {exc}") from None
        if not out._check_loaded(loaded) or loaded.d != dim or loaded.ntotal != len(saved.ids):
            raise DataError(
                f"The FAISS index file {str(path)!r} ({type(loaded).__name__}, d={loaded.d}, "
                f"{loaded.ntotal} vectors) does not match its manifest ({cls.name}, d={dim}, "
                f"{len(saved.ids)} vectors)."
            )
        out._index = loaded
        out._ids = list(saved.ids)
        out._id_set = set(saved.ids)
        if not np.array_equal(out._stored(), saved.vectors):
            raise DataError(
                f"The FAISS index in {str(saved.directory)!r} holds other vectors than "
                "vectors.npy; save the index again."
            )
        out._after_load()
        return out

    def _after_load(self) -> None:
        """Re-apply settings that a FAISS file does not keep."""


class FaissFlatIndex(_FaissIndex):
    """Exact inner-product search with FAISS ``IndexFlatIP``.

    Same results as :class:`~ragprivacy.index.exact.ExactIndex` (up to the order of
    exactly tied scores at the k-th place); FAISS's blocked top-k is often faster for
    batches of queries.

    Args:
        dim: vector width.
        num_threads: OpenMP/BLAS threads (``None``: the library default).
    """

    name = "faiss-flat"

    @property
    def is_exact(self) -> bool:
        return True

    def _new_index(self) -> Any:
        return self._faiss.IndexFlatIP(self.dim)

    def _flat_storage(self) -> Any:
        return self._index

    def _check_loaded(self, index: Any) -> bool:
        return bool(
            isinstance(index, self._faiss.IndexFlat)
            and index.metric_type == self._faiss.METRIC_INNER_PRODUCT
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HnswSettings:
    """Settings of an HNSW graph (Malkov & Yashunin, 2018).

    Attributes:
        m: neighbours per node per layer (memory and recall grow with it).
        ef_construction: candidate list size while building (build time grows with it).
        ef_search: candidate list size while searching (raised to ``k`` when smaller).
    """

    m: int = 32
    ef_construction: int = 200
    ef_search: int = 128

    def __post_init__(self) -> None:
        check_positive_int("m", self.m)
        check_positive_int("ef_construction", self.ef_construction)
        check_positive_int("ef_search", self.ef_search)


class FaissHnswIndex(_FaissIndex):
    """Approximate inner-product search with FAISS ``IndexHNSWFlat``.

    :meth:`search` may miss true neighbours (recall@10 is measured against the exact scan
    in the benchmarks); :meth:`scores` stays exact. Building costs far more than a flat
    index (benchmarks/README.md, "Embedders and indices").

    Args:
        dim: vector width.
        m: HNSW neighbours per node (default 32).
        ef_construction: build-time candidate list (default 200).
        ef_search: search-time candidate list (default 128; settable later).
        num_threads: OpenMP threads (``None``: the FAISS default).
    """

    name = "faiss-hnsw"

    def __init__(
        self,
        dim: int,
        *,
        m: int = 32,
        ef_construction: int = 200,
        ef_search: int = 128,
        num_threads: int | None = None,
    ) -> None:
        self.settings = HnswSettings(m=m, ef_construction=ef_construction, ef_search=ef_search)
        super().__init__(dim, num_threads=num_threads)

    @property
    def ef_search(self) -> int:
        return self.settings.ef_search

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self.settings = HnswSettings(
            m=self.settings.m, ef_construction=self.settings.ef_construction, ef_search=value
        )
        self._index.hnsw.efSearch = self.settings.ef_search

    def config(self) -> dict[str, Any]:
        return {**asdict(self.settings), "num_threads": self.num_threads}

    def _new_index(self) -> Any:
        index = self._faiss.IndexHNSWFlat(
            self.dim, self.settings.m, self._faiss.METRIC_INNER_PRODUCT
        )
        index.hnsw.efConstruction = self.settings.ef_construction
        index.hnsw.efSearch = self.settings.ef_search
        return index

    def _flat_storage(self) -> Any:
        return self._faiss.downcast_index(self._index.storage)

    def _search_params(self, k: int) -> Any:
        return self._faiss.SearchParametersHNSW(efSearch=max(self.settings.ef_search, k))

    def _check_loaded(self, index: Any) -> bool:
        return bool(
            isinstance(index, self._faiss.IndexHNSWFlat)
            and index.metric_type == self._faiss.METRIC_INNER_PRODUCT
            and index.hnsw.nb_neighbors(1) == self.settings.m
        )

    def _after_load(self) -> None:
        self._index.hnsw.efConstruction = self.settings.ef_construction
        self._index.hnsw.efSearch = self.settings.ef_search
