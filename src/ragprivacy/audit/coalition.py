"""Phase C: the coalition-size estimator and its calibration (collusion paper §5.4).

Queries of the window are linked when they come from *distinct* accounts, their cosine
similarity is at least θ (identical query hashes have cosine 1) and their timestamps are
within τ of each other. Connected components of that graph (single linkage) are candidate
coalitions; ĉ is the largest number of distinct accounts in one component (1 when no two
accounts are linked). The audit passes the policy-cap check only if ĉ ≤ k_max; ε_audit is
computed from k_max, never from ĉ (the estimator gates compliance, it is not a soundness
condition).

Implementation: the maximum spanning tree of the cosine-similarity graph (pairs of one
account, or farther apart than τ, get similarity −3, below any threshold), by Prim's
algorithm on the dense N × N matrix — one O(N²) pass per window, after which every θ of a
calibration grid is a cut of the same tree (the components of {cos ≥ θ} are those of
the tree's edges ≥ θ). Fine for windows of a few thousand queries (3,000 × 32: ~0.1 s);
larger windows need an ANN range search and are out of scope here.

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
from scipy.sparse.csgraph import connected_components

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
_NO_EDGE = -3.0  # below any cosine


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


def _similarity(
    vectors: np.ndarray, codes: np.ndarray, ts: np.ndarray | None, tau: int | None
) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float64)
    v = (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-300)).astype(np.float32)
    w = v @ v.T
    np.putmask(w, codes[:, None] == codes[None, :], _NO_EDGE)  # only distinct accounts link
    if tau is not None and ts is not None:
        np.putmask(w, np.abs(ts[:, None] - ts[None, :]) > tau, _NO_EDGE)
    return np.asarray(w)


def _max_spanning_tree(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Prim's algorithm on a dense similarity matrix: (parent, child, weight) of the
    maximum spanning tree. Cutting it at θ gives the components of the graph
    {cos ≥ θ} (single linkage), for every θ at once."""
    n = w.shape[0]
    in_tree = np.zeros(n, dtype=bool)
    in_tree[0] = True
    key = w[0].copy()
    key[0] = -np.inf
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
    return a, b, wt


def _cut(tree: tuple[np.ndarray, np.ndarray, np.ndarray], n: int, theta: float) -> np.ndarray:
    a, b, wt = tree
    keep = wt >= theta - 1e-12
    graph = coo_matrix((np.ones(int(keep.sum())), (a[keep], b[keep])), shape=(n, n))
    return np.asarray(connected_components(graph, directed=False)[1])


def _largest(labels: np.ndarray, codes: np.ndarray) -> tuple[int, int]:
    pairs = np.unique(np.stack([labels, codes]), axis=1)
    per = np.bincount(pairs[0])
    return int(per.max()), int(per.argmax())


def coalition_sizes(
    vectors: np.ndarray,
    accounts: Sequence[str],
    thetas: Sequence[float],
    *,
    ts: Sequence[int] | None = None,
    tau: int | None = None,
) -> list[int]:
    """ĉ at every θ in ``thetas`` (one spanning tree, several cuts)."""
    v = np.asarray(vectors)
    if v.ndim != 2 or v.shape[0] != len(accounts):
        raise ConfigError(f"Give one account per query vector; got {v.shape} and {len(accounts)}.")
    if v.shape[0] < 2:
        return [1 for _ in thetas]
    _, codes = np.unique(np.asarray(accounts), return_inverse=True)
    t = None if ts is None else np.asarray(ts, dtype=np.int64)
    tree = _max_spanning_tree(_similarity(v, codes, t, tau))
    return [_largest(_cut(tree, v.shape[0], float(th)), codes)[0] for th in thetas]


def estimate_coalition(
    vectors: np.ndarray,
    accounts: Sequence[str],
    *,
    theta: float,
    ts: Sequence[int] | None = None,
    tau: int | None = None,
) -> CoalitionEstimate:
    """ĉ at θ, and the accounts of the largest linked component."""
    v = np.asarray(vectors)
    if v.shape[0] < 2:
        return CoalitionEstimate(1, tuple(accounts), float(theta), tau)
    names, codes = np.unique(np.asarray(accounts), return_inverse=True)
    t = None if ts is None else np.asarray(ts, dtype=np.int64)
    tree = _max_spanning_tree(_similarity(v, codes, t, tau))
    labels = _cut(tree, v.shape[0], float(theta))
    best_accounts: tuple[str, ...] = ()
    for lab in np.unique(labels):
        accs = tuple(sorted(set(names[codes[labels == lab]].tolist())))
        if len(accs) > len(best_accounts):
            best_accounts = accs
    return CoalitionEstimate(len(best_accounts), best_accounts, float(theta), tau)


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
