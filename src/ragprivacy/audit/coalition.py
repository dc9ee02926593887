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

Calibration (§5.4): A accounts × n queries in d dimensions; the null draws i.i.d. uniform
unit-sphere queries; the alternative replaces k_true accounts with a coalition following
P-A (one identical probe), P-B (probe + ζ·N(0, I), renormalised, ζ = 0.1) or P-C (i.i.d.
draws from 5 fixed intents). θ* is the smallest grid θ with null FPR ≤ 5 %.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
from threadpoolctl import threadpool_limits

from ragprivacy._random import RngLike, make_rng
from ragprivacy._validation import check_choice, check_positive_int
from ragprivacy.errors import ConfigError

__all__ = [
    "CalibrationResult",
    "CoalitionEstimate",
    "calibrate_estimator",
    "coalition_sizes",
    "estimate_coalition",
    "simulate_window",
]

PATTERNS = ("P-A", "P-B", "P-C")
THETA_GRID: tuple[float, ...] = tuple(round(0.20 + 0.05 * i, 2) for i in range(16))
TIE = 1e-9  # a pair is linked when cos ≥ θ − TIE
_DENSE = 4096  # up to this many queries: one dense similarity matrix and Prim's algorithm
_ROWS = 1024  # queries per block of rows
_COLS = 8192  # queries per block of columns
_SAMPLE = 1024  # sample rows for the choice of m
_PROJECTIONS = (16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 192, 224, 256)
_NO_EDGE = -3.0  # below any cosine
_VERIFY_COST = 3e4  # one float64 verification, in units of one float32 multiply-add


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
    if a.size == 0:
        return a, b, w
    tree = minimum_spanning_tree(coo_matrix((2.0 - w, (a, b)), shape=(n, n))).tocoo()
    return tree.row.astype(np.int64), tree.col.astype(np.int64), 2.0 - tree.data


def _spanning_forest(
    vectors: np.ndarray,
    codes: np.ndarray,
    ts: np.ndarray | None,
    tau: int | None,
    theta: float,
    threads: int | None,
) -> _Forest:
    """Every pair of distinct accounts within τ with cos ≥ θ − TIE (exact range search by
    blocks, see the module docstring), reduced to a maximum spanning forest."""
    if threads is None:
        return _search(vectors, codes, ts, tau, theta)
    with threadpool_limits(limits=threads, user_api="blas"):
        return _search(vectors, codes, ts, tau, theta)


def _search(
    vectors: np.ndarray,
    codes: np.ndarray,
    ts: np.ndarray | None,
    tau: int | None,
    theta: float,
) -> _Forest:
    x = _unit_rows(vectors)
    n = x.shape[0]
    windowed = tau is not None and ts is not None
    order = np.argsort(ts, kind="stable") if windowed and ts is not None else np.arange(n)
    t = None
    c = codes
    if windowed and ts is not None:  # sorted by time (a copy only when τ applies)
        x, c, t = x[order], codes[order], ts[order]
    if n <= _DENSE:
        a, b, w = _dense_forest(x, c, t, tau, theta)
        return _Forest(n, order[a], order[b], w)
    basis = _pick_projection(x, theta)
    if basis is None:
        search, cut = x, theta - TIE
    else:
        search = _bound_vectors(x, basis)
        cut = theta - TIE - _margin(basis.shape[1] + 1)
    ea: list[np.ndarray] = []
    eb: list[np.ndarray] = []
    ew: list[np.ndarray] = []
    held = 0
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
            ea.append(ii)
            eb.append(jj)
            ew.append(w)
            held += ii.size
            if held > 4 * n + 1_000_000:  # bound the memory: keep the forest only
                a, b, w = _compress(n, np.concatenate(ea), np.concatenate(eb), np.concatenate(ew))
                ea, eb, ew, held = [a], [b], [w], a.size
    a, b, w = _compress(
        n,
        np.concatenate(ea) if ea else np.zeros(0, np.int64),
        np.concatenate(eb) if eb else np.zeros(0, np.int64),
        np.concatenate(ew) if ew else np.zeros(0),
    )
    return _Forest(n, order[a], order[b], w)


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


def coalition_sizes(
    vectors: np.ndarray,
    accounts: Sequence[str],
    thetas: Sequence[float],
    *,
    ts: Sequence[int] | None = None,
    tau: int | None = None,
    threads: int | None = 1,
) -> list[int]:
    """ĉ at every θ in ``thetas`` (one range search at the smallest θ, one spanning
    forest, one cut per θ). ``threads``: BLAS threads for the search (None: the library's
    default; 1 is the default because 2 ran slower on a shared 2-core machine)."""
    v, _, codes, t = _prepare(vectors, accounts, ts, threads)
    if v.shape[0] < 2 or not len(thetas):
        return [1 for _ in thetas]
    forest = _spanning_forest(v, codes, t, tau, float(min(thetas)), threads)
    return [_largest(forest.labels(float(th)), codes)[0] for th in thetas]


def estimate_coalition(
    vectors: np.ndarray,
    accounts: Sequence[str],
    *,
    theta: float,
    ts: Sequence[int] | None = None,
    tau: int | None = None,
    threads: int | None = 1,
) -> CoalitionEstimate:
    """ĉ at θ, and the accounts of the largest linked component (on a tie in size, the
    component holding the lowest-numbered query). ``threads`` as in
    :func:`coalition_sizes`."""
    v = np.asarray(vectors)
    if v.shape[0] < 2:
        return CoalitionEstimate(1, tuple(accounts), float(theta), tau)
    v, names, codes, t = _prepare(vectors, accounts, ts, threads)
    labels = _spanning_forest(v, codes, t, tau, float(theta), threads).labels(float(theta))
    size, label = _largest(labels, codes)
    best = tuple(sorted(set(names[np.unique(codes[labels == label])].tolist())))
    return CoalitionEstimate(size, best, float(theta), tau)


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
