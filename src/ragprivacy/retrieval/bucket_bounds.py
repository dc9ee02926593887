"""Per-bucket certified upper bounds on retrieval scores, for the lazy noise-then-select.

The index's vectors are partitioned once, offline and without any noise, into buckets
(k-means cells, as the coarse cells of an IVF index). For bucket b the partition keeps its
centre c_b and radius r_b = max_{x ∈ b} ‖x − c_b‖. By Cauchy–Schwarz, for every query q
and every x in bucket b,

    q·x = q·c_b + q·(x − c_b) ≤ q·c_b + ‖q‖·‖x − c_b‖ ≤ q·c_b + ‖q‖·r_b =: u_b(q),

a *certified* bound (it holds for every member, whatever the partition's quality; the
clustering only decides how tight it is). :meth:`BucketBounds.bounds` adds a small
``margin`` for the float32 rounding of the scores the mechanism compares (a dot product of
two unit 384-d float32 vectors is off by at most ~d·2⁻²⁴ ≈ 2.3·10⁻⁵).

The partition is public-data-independent only in the sense that matters for exactness:
it does not depend on the noise. It is a function of the documents, like the index itself.

Layout: ``order`` lists the positions bucket by bucket (bucket b holds
``order[starts[b]:starts[b + 1]]``); ``inverse[p]`` is where position p sits in ``order``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.errors import ConfigError

__all__ = ["BucketBounds"]

_CHUNK_ROWS = 8192


@dataclass(frozen=True, slots=True, eq=False)
class BucketBounds:
    """A partition of n vectors into buckets with centres and radii (see the module doc).

    Attributes:
        centroids: (B, d) bucket centres (float64).
        radii: (B,) r_b = max ‖x − c_b‖ over the bucket's members (float64, exact up to
            rounding, then raised by one part in 10⁶ so that rounding never makes it short).
        order: (n,) positions grouped by bucket.
        starts: (B + 1,) offsets of the buckets in ``order``.
        inverse: (n,) the offset of each position in ``order``.
        margin: added to every bound for float rounding of the scores.

    >>> x = np.eye(4, dtype=np.float32)
    >>> bb = BucketBounds.build(x, buckets=2, rng=0)
    >>> bool(np.all(bb.bounds(x[0]) >= 0.0)), bb.n, bb.count
    (True, 4, 2)
    """

    centroids: FloatArray
    radii: FloatArray
    order: IntArray
    starts: IntArray
    inverse: IntArray
    margin: float = 1e-4

    @property
    def n(self) -> int:
        """The number of vectors partitioned."""
        return int(self.order.size)

    @property
    def count(self) -> int:
        """The number of buckets B."""
        return int(self.radii.size)

    @property
    def sizes(self) -> IntArray:
        """The number of members of each bucket."""
        return np.diff(self.starts)

    def bucket_of(self, positions: IntArray) -> IntArray:
        """The bucket of each position."""
        flat = self.inverse[np.asarray(positions, dtype=np.int64)]
        return np.searchsorted(self.starts, flat, side="right") - 1

    def bounds(self, query: FloatArray) -> FloatArray:
        """u_b(q) = q·c_b + ‖q‖·r_b + margin for every bucket (certified upper bounds)."""
        q = np.asarray(query, dtype=np.float64).reshape(-1)
        if q.size != self.centroids.shape[1]:
            raise ConfigError(
                f"The query has {q.size} dimensions but the buckets were built on "
                f"{self.centroids.shape[1]}; use a query from the same embedder."
            )
        return self.centroids @ q + float(np.linalg.norm(q)) * self.radii + self.margin

    @classmethod
    def build(
        cls,
        vectors: FloatArray,
        *,
        buckets: int | None = None,
        iterations: int = 8,
        sample: int = 65_536,
        margin: float = 1e-4,
        rng: RngLike = None,
    ) -> BucketBounds:
        """Partition ``vectors`` by k-means (Lloyd on a sample, then one full assignment).

        Args:
            vectors: (n, d) the index's stored vectors, in position order.
            buckets: B (default ⌈√n⌉, at most 4096 and at most n).
            iterations: Lloyd iterations on the sample.
            sample: at most this many vectors train the centres.
            margin: added to every bound (float rounding of scores).
            rng: seed or generator for the initial centres and the sample.
        """
        x = np.asarray(vectors, dtype=np.float32)
        if x.ndim != 2 or x.shape[0] == 0 or not np.all(np.isfinite(x)):
            raise ConfigError(
                f"BucketBounds.build needs a non-empty finite (n, d) array; got shape {x.shape}."
            )
        n = x.shape[0]
        b = min(n, 4096, int(np.ceil(np.sqrt(n)))) if buckets is None else buckets
        b = min(check_positive_int("buckets", b), n)
        iterations = check_positive_int("iterations", iterations, allow_zero=True)
        margin = check_positive("margin", margin, allow_zero=True)
        gen = make_rng(rng)
        train = x if n <= sample else x[np.sort(gen.choice(n, size=sample, replace=False))]
        cent = train[gen.choice(train.shape[0], size=b, replace=False)].astype(np.float32)
        for _ in range(iterations):
            lab = _assign(train, cent)
            counts = np.bincount(lab, minlength=b)
            full = counts > 0
            srt = np.argsort(lab, kind="stable")
            first = np.concatenate([[0], np.cumsum(counts)[:-1]])[full]
            sums = np.add.reduceat(train[srt].astype(np.float64), first, axis=0)
            cent[full] = (sums / counts[full, None]).astype(np.float32)
            # Empty cells restart at random training points (any centre keeps bounds valid).
            if not full.all():
                cent[~full] = train[gen.choice(train.shape[0], size=int((~full).sum()))]
        lab = _assign(x, cent)
        counts = np.bincount(lab, minlength=b)
        keep = counts > 0
        remap = np.cumsum(keep) - 1
        lab = remap[lab]
        cent64 = cent[keep].astype(np.float64)
        counts = counts[keep]
        order = np.argsort(lab, kind="stable").astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        inverse = np.empty(n, dtype=np.int64)
        inverse[order] = np.arange(n, dtype=np.int64)
        radii = np.zeros(cent64.shape[0], dtype=np.float64)
        for lo in range(0, n, _CHUNK_ROWS):
            rows = x[lo : lo + _CHUNK_ROWS].astype(np.float64)
            lb = lab[lo : lo + _CHUNK_ROWS]
            dist = np.linalg.norm(rows - cent64[lb], axis=1)
            np.maximum.at(radii, lb, dist)
        return cls(
            centroids=cent64,
            radii=radii * (1 + 1e-6) + 1e-12,
            order=order,
            starts=starts,
            inverse=inverse,
            margin=float(margin),
        )


def _assign(x: np.ndarray, cent: np.ndarray) -> np.ndarray:
    """Nearest centre (squared Euclidean) of every row, in chunks."""
    half_norm = 0.5 * np.einsum("ij,ij->i", cent, cent)
    out = np.empty(x.shape[0], dtype=np.int64)
    for lo in range(0, x.shape[0], _CHUNK_ROWS):
        scores = x[lo : lo + _CHUNK_ROWS] @ cent.T - half_norm
        out[lo : lo + _CHUNK_ROWS] = np.argmax(scores, axis=1)
    return out
