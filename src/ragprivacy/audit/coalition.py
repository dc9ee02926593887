"""Phase C: the coalition-size estimator and its calibration (collusion paper §5.4).

Queries of the window are linked when they come from *distinct* accounts, their cosine
similarity is at least θ (identical query hashes have cosine 1) and their timestamps are
within τ of each other. Connected components of that graph (single linkage) are candidate
coalitions; ĉ is the largest number of distinct accounts in one component (1 when no two
accounts are linked). The audit passes the policy-cap check only if ĉ ≤ k_max; ε_audit is
computed from k_max, never from ĉ (the estimator gates compliance, it is not a soundness
condition).

Implementation: an exact range search for every linked pair, then the maximum spanning
forest of those pairs; every θ of a calibration grid (at or above the searched one) is a
cut of the same forest (the components of {cos ≥ θ} are those of the forest's edges
≥ θ). The paper clusters by "approximate-nearest-neighbor proximity"; here the search is
exact, so that provider and verifier derive the same clusters from the ledger whatever
index they use:

- Cosine is that of the float64 unit vectors; a pair is linked when cos ≥ θ − 10⁻⁹ (the
  tolerance makes identical vectors link at θ = 1 and keeps the result independent of
  the summation order of the dot product).
- Queries are sorted by timestamp and compared in blocks; a block is compared only with
  the queries within τ of it (the sliding window of §5.4), so windows of many τ cost
  O(N · queries per τ), not O(N²).
- When the range is wide (large N and d), pairs are pruned by a bound that never drops a
  linked pair: with P the top-m eigenvectors of the window's second-moment matrix and Q
  the rest, x·y = Px·Py + Qx·Qy ≤ Px·Py + ‖Qx‖‖Qy‖ (Cauchy–Schwarz), i.e. the dot
  product of the (m + 1)-dimensional unit vectors (Px, ‖Qx‖). Blocks of those are
  multiplied in float32 and kept at ≥ θ − 10⁻⁹ − δ, with δ larger than the float32
  rounding error of a (m + 1)-term dot product of unit vectors ((m + 4)·2⁻²³ + 10⁻⁶);
  every kept pair is then verified in float64. m is picked per window by a cost model on
  a sample of pairs (m = d: one float64 pass, no verification).

Candidate generation for large windows (``search``): on i.i.d. queries in 384-d no exact
bound prunes much, so the exact search above costs O(N²·d) (its time at N = 10⁵:
benchmarks/README.md, "Coalition estimator"). Two inverted-file (IVF) searches propose
pairs instead; every proposed pair is verified in float64 as above, so a proposed pair is
never wrong, but a pair that is not proposed is lost:

- ``"ivf-bound"`` (exact): spherical k-means cells with centroids μ_c and angular radii
  r_c = max over the cell's queries of ∠(y, μ_c). A pair with cos ≥ θ − TIE is at an
  angle ≤ α = arccos(θ − TIE), so by the triangle inequality on the sphere a query q needs
  to be compared only with the cells with ∠(q, μ_c) ≤ α + r_c; every such cell is
  probed (with the float32 rounding margin and 10⁻¹² on the angles), so no linked pair is
  lost. On clustered queries it prunes; on i.i.d. queries in high dimension every radius
  is near 90° and it probes every cell (no faster than ``"exact"``).
- ``"ivf"`` (approximate, opt-in): every query probes its ``nprobe`` nearest cells; a pair
  is compared when the query of the higher-numbered cell probes the other's cell. It is
  fast on i.i.d. windows, but pair recall is not guaranteed: it is measured against the
  exact search (:func:`coalition_pairs`, :func:`pair_recall`). A lost pair can only split a
  component, so ĉ can only be under-estimated — which is why ``"exact"`` stays the
  default, and why the provider and the verifier use it (they must derive the same
  clusters, and the policy-cap check must not pass a coalition it failed to link).

Both IVF searches are the paper's "approximate-nearest-neighbor proximity" (§5.4) with the
exact verification kept; the cells are computed here (numpy k-means on a sample of at
most 64 queries per cell, seeded) rather than by a FAISS index, so that each query can
probe its own set of cells (the bound) and the blocks are BLAS products, like the exact
search. A window of at most 4,096 queries always takes the exact dense path.

Calibration (§5.4): A accounts × n queries in d dimensions; the null draws i.i.d. uniform
unit-sphere queries; the alternative replaces k_true accounts with a coalition following
P-A (one identical probe), P-B (probe + ζ·N(0, I), renormalised, ζ = 0.1) or P-C (i.i.d.
draws from 5 fixed intents). θ* is the smallest grid θ with null FPR ≤ 5 %.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ragprivacy._random import RngLike, make_rng
from ragprivacy._validation import check_choice, check_positive_int
from ragprivacy.errors import ConfigError

__all__ = [
    "THETA_CALIBRATED",
    "CalibrationResult",
    "CoalitionEstimate",
    "calibrate_estimator",
    "coalition_pairs",
    "coalition_sizes",
    "estimate_coalition",
    "pair_recall",
    "simulate_window",
]

PATTERNS = ("P-A", "P-B", "P-C")
SEARCHES = ("exact", "ivf", "ivf-bound")
THETA_GRID: tuple[float, ...] = tuple(round(0.20 + 0.05 * i, 2) for i in range(16))
TIE = 1e-9  # a pair is linked when cos ≥ θ − TIE
#: θ* of the paper's calibration (§5.4, Observation 5.2: null FPR ≤ 5 % and TPR = 1 on
#: P-A/B/C at θ* = 0.80, over the whole window, no τ). A committed θ above it links fewer
#: queries than the calibration assumed — probes at cos 0.9999 are never one coalition at
#: θ = 1 — so the verifier FAILs a θ above θ* and a τ shorter than the window
#: (:mod:`ragprivacy.audit.verifier`, check ``policy_cap``). A smaller θ only links more
#: (a larger ĉ fails the provider, not the accounts) and is allowed.
THETA_CALIBRATED = 0.80
_DENSE = 4096  # up to this many queries: one dense similarity matrix and Prim's algorithm
_ROWS = 1024  # queries per block of rows
_COLS = 8192  # queries per block of columns
_SAMPLE = 1024  # sample rows for the choice of m
_PROJECTIONS = (16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 192, 224, 256)
_NO_EDGE = -3.0  # below any cosine
_VERIFY_COST = 3e4  # one float64 verification, in units of one float32 multiply-add
_KMEANS_SAMPLE = 64  # sample queries per IVF cell for k-means
_KMEANS_ITERS = 8
_ANGLE_SLACK = 1e-12  # on cosines before arccos, and on the probe test

_Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]  # i, j (i < j), float64 cosine


@dataclass(frozen=True, slots=True)
class CoalitionEstimate:
    """ĉ (``size``), the accounts of the largest component, and the settings used."""

    size: int
    accounts: tuple[str, ...]
    theta: float
    tau: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "accounts": list(self.accounts),
            "theta": self.theta,
            "tau": self.tau,
        }


@dataclass(frozen=True, slots=True)
class _Forest:
    """A maximum spanning forest of the linked pairs (cos ≥ the searched θ): edges a–b of
    weight w (cosine), over n queries."""

    n: int
    a: np.ndarray
    b: np.ndarray
    w: np.ndarray

    def labels(self, theta: float) -> np.ndarray:
        """Component of each query in the graph {cos ≥ θ} (θ ≥ the searched θ)."""
        from scipy.sparse import coo_matrix  # here: every service process imports this module
        from scipy.sparse.csgraph import connected_components

        keep = self.w >= theta - TIE
        graph = coo_matrix(
            (np.ones(int(keep.sum())), (self.a[keep], self.b[keep])), shape=(self.n, self.n)
        )
        return np.asarray(connected_components(graph, directed=False)[1])


def _unit_rows(v: np.ndarray) -> np.ndarray:
    x = np.asarray(v, dtype=np.float64)
    return np.asarray(x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300))


def _margin(k: int) -> float:
    """δ: more than the float32 rounding error of a k-term dot product of unit vectors
    (γ_k ≤ k·2⁻²⁴/(1 − k·2⁻²⁴) for the sum, 2·2⁻²⁴ for rounding the inputs)."""
    return (k + 4) * 2.0**-23 + 1e-6


def _bound_vectors(x: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """(Px, ‖Qx‖) in float32: their dot product bounds x·y from above."""
    p = x @ basis
    rest = np.sqrt(np.maximum(1.0 - np.einsum("ij,ij->i", p, p), 0.0))
    return np.ascontiguousarray(np.hstack([p, rest[:, None]]), dtype=np.float32)


def _pick_projection(x: np.ndarray, theta: float) -> np.ndarray | None:
    """The basis P (d × m) of the cheapest pruning bound, or None for one exact float64
    pass. Cost per pair: 2(m + 1) float32 operations plus _VERIFY_COST times the fraction
    of sampled pairs the bound keeps; a float64 pass costs 4d."""
    n, d = x.shape
    if n <= _ROWS or theta <= 0.0:
        return None
    sample = x[np.linspace(0, n - 1, min(n, _SAMPLE)).astype(np.int64)]
    _, vecs = np.linalg.eigh(x.T @ x)
    vecs = vecs[:, ::-1]  # eigenvectors by decreasing eigenvalue
    best_cost, best = 4.0 * d, None
    off_diagonal = ~np.eye(sample.shape[0], dtype=bool)
    for m in _PROJECTIONS:
        if m >= d:
            break
        s = _bound_vectors(sample, vecs[:, :m])
        kept = float(np.mean((s @ s.T)[off_diagonal] >= theta - TIE - _margin(m + 1)))
        cost = 2.0 * (m + 1) + _VERIFY_COST * kept
        if cost < best_cost:
            best_cost, best = cost, np.ascontiguousarray(vecs[:, :m])
    return best


def _cosines(x: np.ndarray, ii: np.ndarray, jj: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """x[i]·x[j] in float64 for each pair, gathered a chunk at a time (the gathered rows of
    10⁵ pairs in 384-d would take 600 MB)."""
    out = np.empty(ii.size)
    for k in range(0, ii.size, chunk):
        out[k : k + chunk] = np.einsum("ij,ij->i", x[ii[k : k + chunk]], x[jj[k : k + chunk]])
    return out


def _dense_forest(
    x: np.ndarray, codes: np.ndarray, ts: np.ndarray | None, tau: int | None, theta: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prim's algorithm on the dense N × N cosine matrix (pairs of one account, farther
    apart than τ or below θ − TIE get −3, "no edge"): the maximum spanning forest, in O(N²) — the
    right algorithm for a small window, whose graph at a low θ is dense."""
    n = x.shape[0]
    w = x @ x.copy().T  # a general product: numpy's x @ x.T (syrk) ran slower here
    np.putmask(w, codes[:, None] == codes[None, :], _NO_EDGE)
    if tau is not None and ts is not None:
        np.putmask(w, np.abs(ts[:, None] - ts[None, :]) > tau, _NO_EDGE)
    np.putmask(w, w < theta - TIE, _NO_EDGE)
    in_tree = np.zeros(n, dtype=bool)
    in_tree[0] = True
    key = w[0].copy()
    key[0] = -np.inf  # in the tree: never picked again
    parent = np.zeros(n, dtype=np.int64)
    a = np.empty(n - 1, dtype=np.int64)
    b = np.empty(n - 1, dtype=np.int64)
    wt = np.empty(n - 1)
    for step in range(n - 1):
        j = int(np.argmax(key))
        a[step], b[step], wt[step] = parent[j], j, key[j]
        in_tree[j] = True
        key[j] = -np.inf
        row = w[j]
        upd = (row > key) & ~in_tree
        key[upd] = row[upd]
        parent[upd] = j
    keep = wt > _NO_EDGE  # a forest: no edge where a component ends
    return a[keep], b[keep], wt[keep]


def _compress(n: int, a: np.ndarray, b: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
    """The maximum spanning forest of the edges (weights 2 − w > 0 for scipy's minimum
    spanning tree, which drops zero weights)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import minimum_spanning_tree

    if a.size == 0:
        return a, b, w
    tree = minimum_spanning_tree(coo_matrix((2.0 - w, (a, b)), shape=(n, n))).tocoo()
    return tree.row.astype(np.int64), tree.col.astype(np.int64), 2.0 - tree.data


@dataclass(frozen=True, slots=True)
class _Search:
    """Which pair search, and its IVF settings (``nlist`` None: ⌈√N⌉ cells)."""

    kind: str = "exact"
    nprobe: int = 32
    nlist: int | None = None


def _spanning_forest(
    vectors: np.ndarray,
    codes: np.ndarray,
    ts: np.ndarray | None,
    tau: int | None,
    theta: float,
    threads: int | None,
    how: _Search,
) -> _Forest:
    """Every pair of distinct accounts within τ with cos ≥ θ − TIE (exact range search by
    blocks, or IVF candidates verified exactly, see the module docstring), reduced to a
    maximum spanning forest."""
    if threads is None:
        return _search(vectors, codes, ts, tau, theta, how)
    with threadpool_limits(limits=threads, user_api="blas"):
        return _search(vectors, codes, ts, tau, theta, how)


def _search(
    vectors: np.ndarray,
    codes: np.ndarray,
    ts: np.ndarray | None,
    tau: int | None,
    theta: float,
    how: _Search,
) -> _Forest:
    x, c, t, order = _sorted(vectors, codes, ts, tau)
    n = x.shape[0]
    if n <= _DENSE:
        a, b, w = _dense_forest(x, c, t, tau, theta)
        return _Forest(n, order[a], order[b], w)
    a, b, w = _forest_of(n, _pairs(x, c, t, tau, theta, how))
    return _Forest(n, order[a], order[b], w)


def _sorted(
    vectors: np.ndarray, codes: np.ndarray, ts: np.ndarray | None, tau: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """Unit rows in float64, sorted by time when τ applies (a copy only then), and the
    order that maps the sorted positions back."""
    x = _unit_rows(vectors)
    n = x.shape[0]
    if tau is not None and ts is not None:
        order = np.argsort(ts, kind="stable")
        return x[order], codes[order], ts[order], order
    return x, codes, None, np.arange(n)


def _pairs(
    x: np.ndarray,
    c: np.ndarray,
    t: np.ndarray | None,
    tau: int | None,
    theta: float,
    how: _Search,
) -> Iterator[_Pairs]:
    if how.kind == "exact":
        return _exact_pairs(x, c, t, tau, theta)
    return _ivf_pairs(x, c, t, tau, theta, how)


def _forest_of(n: int, pairs: Iterable[_Pairs]) -> tuple[np.ndarray, ...]:
    """The maximum spanning forest of a stream of linked pairs (each pair once), in
    bounded memory: the pairs held are reduced to a forest whenever they exceed 4N + 10⁶."""
    ea: list[np.ndarray] = []
    eb: list[np.ndarray] = []
    ew: list[np.ndarray] = []
    held = 0
    for ii, jj, w in pairs:
        ea.append(ii)
        eb.append(jj)
        ew.append(w)
        held += ii.size
        if held > 4 * n + 1_000_000:  # bound the memory: keep the forest only
            a, b, w = _compress(n, np.concatenate(ea), np.concatenate(eb), np.concatenate(ew))
            ea, eb, ew, held = [a], [b], [w], a.size
    return _compress(
        n,
        np.concatenate(ea) if ea else np.zeros(0, np.int64),
        np.concatenate(eb) if eb else np.zeros(0, np.int64),
        np.concatenate(ew) if ew else np.zeros(0),
    )


def _exact_pairs(
    x: np.ndarray, c: np.ndarray, t: np.ndarray | None, tau: int | None, theta: float
) -> Iterator[_Pairs]:
    """The exact range search by blocks (sliding window of τ, pruning bound, float64
    verification; module docstring)."""
    n = x.shape[0]
    basis = _pick_projection(x, theta)
    if basis is None:
        search, cut = x, theta - TIE
    else:
        search = _bound_vectors(x, basis)
        cut = theta - TIE - _margin(basis.shape[1] + 1)
    # One buffer for every block's products: a fresh 32 MB array per block costs page
    # faults.
    prod_buf = np.empty(_ROWS * _COLS, dtype=search.dtype)
    for i0 in range(0, n, _ROWS):
        i1 = min(i0 + _ROWS, n)
        stop = n
        if t is not None and tau is not None:
            stop = int(np.searchsorted(t, t[i1 - 1] + tau, side="right"))
        for j0 in range(i0, stop, _COLS):
            j1 = min(j0 + _COLS, stop)
            shape = (i1 - i0, j1 - j0)
            block = np.matmul(
                search[i0:i1], search[j0:j1].T, out=prod_buf[: shape[0] * shape[1]].reshape(shape)
            )
            rows = np.flatnonzero(block.max(axis=1) >= cut)  # one pass; most rows have none
            if rows.size == 0:
                continue
            sub_i, bj = np.nonzero(block[rows] >= cut)
            bi = rows[sub_i]
            ii, jj = bi + i0, bj + j0
            keep = c[ii] != c[jj]
            if j0 == i0:  # pairs i < j only
                keep &= jj > ii
            if t is not None and tau is not None:
                keep &= np.abs(t[ii] - t[jj]) <= tau
            ii, jj = ii[keep], jj[keep]
            if basis is None:
                w = block[bi[keep], bj[keep]]
            else:
                w = _cosines(x, ii, jj)
                linked = w >= theta - TIE
                ii, jj, w = ii[linked], jj[linked], w[linked]
            yield ii, jj, w


def _kmeans(x32: np.ndarray, nlist: int) -> np.ndarray:
    """Spherical k-means (unit centroids, cosine assignment) on a seeded sample of at most
    _KMEANS_SAMPLE queries per cell; an emptied cell restarts at a sampled query. The
    centroids are returned as float64 unit vectors."""
    from scipy.sparse import csr_matrix

    n = x32.shape[0]
    gen = np.random.default_rng(0)
    sample = x32[np.sort(gen.choice(n, size=min(n, _KMEANS_SAMPLE * nlist), replace=False))]
    cent = sample[gen.choice(sample.shape[0], size=nlist, replace=False)].copy()
    rows = np.arange(sample.shape[0])
    for _ in range(_KMEANS_ITERS):
        assign = np.argmax(sample @ cent.T, axis=1)
        onehot = csr_matrix(
            (np.ones(rows.size, dtype=np.float32), (assign, rows)), shape=(nlist, rows.size)
        )
        sums = np.asarray(onehot @ sample, dtype=np.float32)
        norms = np.linalg.norm(sums, axis=1)
        empty = norms == 0.0
        if empty.any():
            sums[empty] = sample[gen.choice(sample.shape[0], size=int(empty.sum()))]
            norms[empty] = np.linalg.norm(sums[empty], axis=1)
        cent = sums / norms[:, None]
    mu = cent.astype(np.float64)
    return np.asarray(mu / np.linalg.norm(mu, axis=1, keepdims=True))


def _probe_matrix(
    x: np.ndarray, x32: np.ndarray, theta: float, how: _Search
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cell of each query, P (nlist × N, bool): P[c, q] when q probes cell c, and the
    float32 similarities q·μ_c (N × nlist) the probes were chosen by.

    ``"ivf"``: the ``nprobe`` cells of the highest q·μ_c. ``"ivf-bound"``: every cell with
    q·μ_c ≥ cos(α + r_c) (module docstring), tested on the float32 products with their
    rounding margin subtracted, r_c and α rounded up; a query always probes its own cell.
    """
    n, d = x.shape
    nlist = min(n, how.nlist if how.nlist is not None else int(np.ceil(np.sqrt(n))))
    mu = _kmeans(x32, nlist)
    sims = x32 @ mu.astype(np.float32).T  # N × nlist; rounding error ≤ δ = _margin(d)
    cell = np.argmax(sims, axis=1)
    if how.kind == "ivf":
        k = min(how.nprobe, nlist)
        probe = np.zeros((nlist, n), dtype=bool)
        if k >= nlist:
            probe[:] = True
        for r0 in range(0, n, _COLS) if k < nlist else ():  # by rows: bounded memory
            top = np.argpartition(-sims[r0 : r0 + _COLS], k - 1, axis=1)[:, :k]
            probe[top, np.arange(r0, r0 + top.shape[0])[:, None]] = True
    else:
        own = np.einsum("ij,ij->i", x, mu[cell])  # float64 cos(q, μ of its cell)
        cos_min = np.ones(nlist)
        np.minimum.at(cos_min, cell, own)
        radius = np.arccos(np.clip(cos_min - _ANGLE_SLACK, -1.0, 1.0))
        alpha = float(np.arccos(np.clip(theta - TIE - _ANGLE_SLACK, -1.0, 1.0)))
        reach = np.minimum(alpha + radius, np.pi)
        need = np.where(reach >= np.pi, -np.inf, np.cos(reach) - _margin(d) - _ANGLE_SLACK)
        probe = np.ascontiguousarray((sims >= need[None, :]).T)
    probe[cell, np.arange(n)] = True
    return cell, probe, sims


def _ivf_pairs(
    x: np.ndarray,
    c: np.ndarray,
    t: np.ndarray | None,
    tau: int | None,
    theta: float,
    how: _Search,
) -> Iterator[_Pairs]:
    """IVF candidates, verified in float64: for each cell c, its queries against the
    queries that probe it and lie in a cell numbered c or higher (float32 products kept at
    ≥ θ − TIE − δ). A pair is thus compared once, by the query of the higher-numbered cell
    (or, within one cell, once): the angle bound holds both ways, so ``ivf-bound`` loses
    nothing, and for ``ivf`` this is the pair's one chance (measured: at equal work, one
    direction at 2·nprobe found more pairs than either direction at nprobe)."""
    d = x.shape[1]
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    cell, probe, _ = _probe_matrix(x, x32, theta, how)
    cut = theta - TIE - _margin(d)
    by_cell = np.argsort(cell, kind="stable")
    bounds = np.searchsorted(cell[by_cell], np.arange(probe.shape[0] + 1))
    for cc in range(probe.shape[0]):
        tgt = by_cell[bounds[cc] : bounds[cc + 1]]
        if tgt.size == 0:
            continue
        members = x32[tgt].T.copy()
        sources = np.flatnonzero(probe[cc])
        sources = sources[cell[sources] >= cc]
        for s0 in range(0, sources.size, _COLS):
            src = sources[s0 : s0 + _COLS]
            block = x32[src] @ members
            rows = np.flatnonzero(block.max(axis=1) >= cut)
            if rows.size == 0:
                continue
            sub_i, bj = np.nonzero(block[rows] >= cut)
            ii, jj = src[rows[sub_i]], tgt[bj]
            keep = (c[ii] != c[jj]) & ((cell[ii] != cc) | (ii < jj))
            if t is not None and tau is not None:
                keep &= np.abs(t[ii] - t[jj]) <= tau
            ii, jj = ii[keep], jj[keep]
            w = _cosines(x, ii, jj)
            linked = w >= theta - TIE
            ii, jj, w = ii[linked], jj[linked], w[linked]
            yield np.minimum(ii, jj), np.maximum(ii, jj), w


def _largest(labels: np.ndarray, codes: np.ndarray) -> tuple[int, int]:
    pairs = np.unique(np.stack([labels, codes]), axis=1)
    per = np.bincount(pairs[0])
    return int(per.max()), int(per.argmax())


def _prepare(
    vectors: np.ndarray, accounts: Sequence[str], ts: Sequence[int] | None, threads: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    if threads is not None:
        check_positive_int("threads", threads)
    v = np.asarray(vectors)
    if v.ndim != 2 or v.shape[0] != len(accounts):
        raise ConfigError(f"Give one account per query vector; got {v.shape} and {len(accounts)}.")
    if ts is not None and len(ts) != v.shape[0]:
        raise ConfigError(f"Give one timestamp per query vector; got {len(ts)} for {v.shape[0]}.")
    if not np.all(np.isfinite(v)):
        raise ConfigError("The query vectors must be finite; got NaN or infinity.")
    names, codes = np.unique(np.asarray(accounts, dtype=str), return_inverse=True)
    t = None if ts is None else np.asarray(ts, dtype=np.int64)
    return v, names, codes.astype(np.int64), t


def _how(search: str, nprobe: int, nlist: int | None) -> _Search:
    check_choice("search", search, SEARCHES)
    check_positive_int("nprobe", nprobe)
    if nlist is not None:
        check_positive_int("nlist", nlist)
    return _Search(search, nprobe, nlist)


def coalition_sizes(
    vectors: np.ndarray,
    accounts: Sequence[str],
    thetas: Sequence[float],
    *,
    ts: Sequence[int] | None = None,
    tau: int | None = None,
    threads: int | None = 1,
    search: str = "exact",
    nprobe: int = 32,
    nlist: int | None = None,
) -> list[int]:
    """ĉ at every θ in ``thetas`` (one range search at the smallest θ, one spanning
    forest, one cut per θ). ``threads``: BLAS threads for the search (None: the library's
    default; 1 is the default because 2 ran slower on a shared 2-core machine).

    ``search``: ``"exact"`` (the default), ``"ivf-bound"`` (exact, IVF cells probed by the
    angle bound) or ``"ivf"`` (approximate: ``nprobe`` nearest of ``nlist`` cells, ⌈√N⌉
    by default; recall measured, not guaranteed; ĉ can only come out lower). See the
    module docstring; windows of at most 4,096 queries always take the exact dense path.
    """
    how = _how(search, nprobe, nlist)
    v, _, codes, t = _prepare(vectors, accounts, ts, threads)
    if v.shape[0] < 2 or not len(thetas):
        return [1 for _ in thetas]
    forest = _spanning_forest(v, codes, t, tau, float(min(thetas)), threads, how)
    return [_largest(forest.labels(float(th)), codes)[0] for th in thetas]


def estimate_coalition(
    vectors: np.ndarray,
    accounts: Sequence[str],
    *,
    theta: float,
    ts: Sequence[int] | None = None,
    tau: int | None = None,
    threads: int | None = 1,
    search: str = "exact",
    nprobe: int = 32,
    nlist: int | None = None,
) -> CoalitionEstimate:
    """ĉ at θ, and the accounts of the largest linked component (on a tie in size, the
    component holding the lowest-numbered query). ``threads``, ``search``, ``nprobe``
    and ``nlist`` as in :func:`coalition_sizes`."""
    how = _how(search, nprobe, nlist)
    v = np.asarray(vectors)
    if v.shape[0] < 2:
        return CoalitionEstimate(1, tuple(accounts), float(theta), tau)
    v, names, codes, t = _prepare(vectors, accounts, ts, threads)
    labels = _spanning_forest(v, codes, t, tau, float(theta), threads, how).labels(float(theta))
    size, label = _largest(labels, codes)
    best = tuple(sorted(set(names[np.unique(codes[labels == label])].tolist())))
    return CoalitionEstimate(size, best, float(theta), tau)


def coalition_pairs(
    vectors: np.ndarray,
    accounts: Sequence[str],
    *,
    theta: float,
    ts: Sequence[int] | None = None,
    tau: int | None = None,
    threads: int | None = 1,
    search: str = "exact",
    nprobe: int = 32,
    nlist: int | None = None,
) -> np.ndarray:
    """Every linked pair a search finds at θ (distinct accounts, within τ, float64
    cos ≥ θ − TIE), as a P × 2 array of query indices i < j sorted by (i, j) — the
    blocked or IVF search itself at any N (no dense shortcut), so that the pair recall of
    ``"ivf"`` can be measured against ``"exact"`` (:func:`pair_recall`). Costs one search
    and holds every pair."""
    how = _how(search, nprobe, nlist)
    v, _, codes, ts_ = _prepare(vectors, accounts, ts, threads)
    if v.shape[0] < 2:
        return np.zeros((0, 2), dtype=np.int64)
    limits = threadpool_limits(limits=threads, user_api="blas") if threads else nullcontext()
    with limits:
        x, c, t, order = _sorted(v, codes, ts_, tau)
        found = list(_pairs(x, c, t, tau, float(theta), how))
    ii = order[np.concatenate([p[0] for p in found])] if found else np.zeros(0, np.int64)
    jj = order[np.concatenate([p[1] for p in found])] if found else np.zeros(0, np.int64)
    out = np.stack([np.minimum(ii, jj), np.maximum(ii, jj)], axis=1).astype(np.int64)
    return out[np.lexsort((out[:, 1], out[:, 0]))]


def pair_recall(found: np.ndarray, reference: np.ndarray) -> float:
    """The share of the reference pairs (rows i, j of :func:`coalition_pairs`) that
    ``found`` holds; 1.0 when the reference has none."""
    ref = np.asarray(reference, dtype=np.int64).reshape(-1, 2)
    got = np.asarray(found, dtype=np.int64).reshape(-1, 2)
    if ref.shape[0] == 0:
        return 1.0
    m = int(max(ref.max(), got.max() if got.size else 0)) + 1
    # distinct keys by a sort and a comparison: np.unique is many times slower on a
    # million pairs (its hash-based path, whatever the order of the input)
    keys = np.sort(ref[:, 0] * m + ref[:, 1])
    keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return float(np.isin(keys, got[:, 0] * m + got[:, 1]).mean())


def _unit(x: np.ndarray) -> np.ndarray:
    return np.asarray(x / np.linalg.norm(x, axis=-1, keepdims=True))


def simulate_window(
    *,
    accounts: int = 30,
    queries: int = 100,
    dim: int = 32,
    k_true: int = 0,
    pattern: str = "P-A",
    jitter: float = 0.10,
    intents: int = 5,
    rng: RngLike = None,
) -> tuple[np.ndarray, list[str]]:
    """One calibration window: query vectors and their accounts (coalition = the first
    ``k_true`` accounts)."""
    check_choice("pattern", pattern, PATTERNS)
    gen = make_rng(rng)
    v = _unit(gen.standard_normal((accounts * queries, dim)))
    if k_true:
        if not 2 <= k_true <= accounts:
            raise ConfigError(f"The 'k_true' must be in [2, {accounts}]; got {k_true}.")
        m = k_true * queries
        probe = _unit(gen.standard_normal(dim))
        if pattern == "P-A":
            v[:m] = probe
        elif pattern == "P-B":
            v[:m] = _unit(probe + jitter * gen.standard_normal((m, dim)))
        else:
            bank = _unit(gen.standard_normal((intents, dim)))
            v[:m] = bank[gen.integers(0, intents, m)]
    names = [f"acct-{i:03d}" for i in range(accounts) for _ in range(queries)]
    return v, names


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    """The §5.4 calibration: null FPR and ĉ per θ, θ*, and TPR / exact recovery at θ*."""

    thetas: list[float]
    null_fpr: list[float]
    theta_star: float | None
    fpr_at_theta_star: float | None
    mean_k_hat: dict[str, list[float]]  # pattern -> mean ĉ per θ at k_figure
    at_theta_star: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "thetas": self.thetas,
            "null_fpr": self.null_fpr,
            "theta_star": self.theta_star,
            "fpr_at_theta_star": self.fpr_at_theta_star,
            "mean_k_hat": self.mean_k_hat,
            "at_theta_star": {
                p: {str(k): v for k, v in d.items()} for p, d in self.at_theta_star.items()
            },
            "settings": self.settings,
        }


def calibrate_estimator(
    *,
    accounts: int = 30,
    queries: int = 100,
    dim: int = 32,
    thetas: Sequence[float] = THETA_GRID,
    trials: int = 200,
    k_values: Sequence[int] = (2, 5, 10, 20),
    k_figure: int = 10,
    max_fpr: float = 0.05,
    rng: RngLike = None,
) -> CalibrationResult:
    """Run the §5.4 calibration (Observation 5.2, Figure 4)."""
    trials = check_positive_int("trials", trials)
    gen = make_rng(rng)
    grid = [float(t) for t in thetas]
    null_hits = np.zeros(len(grid))
    for _ in range(trials):
        v, names = simulate_window(accounts=accounts, queries=queries, dim=dim, rng=gen)
        sizes = coalition_sizes(v, names, grid)
        null_hits += np.array(sizes) >= 2
    fpr = (null_hits / trials).tolist()
    ok = [t for t, f in zip(grid, fpr) if f <= max_fpr]
    theta_star = min(ok) if ok else None
    mean_k: dict[str, list[float]] = {}
    at_star: dict[str, dict[int, dict[str, float]]] = {}
    for pattern in PATTERNS:
        acc = np.zeros(len(grid))
        at_star[pattern] = {}
        for k in sorted(set(k_values) | {k_figure}):
            exact = detected = 0
            for _ in range(trials):
                v, names = simulate_window(
                    accounts=accounts, queries=queries, dim=dim, k_true=k, pattern=pattern, rng=gen
                )
                targets = grid if k == k_figure else []
                sizes = coalition_sizes(v, names, [*targets, theta_star or grid[-1]])
                if k == k_figure:
                    acc += np.array(sizes[:-1])
                c = sizes[-1]
                detected += c >= 2
                exact += c == k
            if k == k_figure:
                mean_k[pattern] = (acc / trials).tolist()
            if k in k_values:
                at_star[pattern][k] = {"tpr": detected / trials, "exact_recovery": exact / trials}
    return CalibrationResult(
        thetas=grid,
        null_fpr=fpr,
        theta_star=theta_star,
        fpr_at_theta_star=fpr[grid.index(theta_star)] if theta_star is not None else None,
        mean_k_hat=mean_k,
        at_theta_star=at_star,
        settings={
            "accounts": accounts,
            "queries": queries,
            "dim": dim,
            "trials": trials,
            "k_values": list(k_values),
            "k_figure": k_figure,
            "max_fpr": max_fpr,
        },
    )
