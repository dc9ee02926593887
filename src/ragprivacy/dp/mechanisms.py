"""Noise-adding mechanisms on scores and counts.

- :func:`top_k_indices` — the deterministic top-K selection (ties to the lower index) every
  noisy selection ends with; the account's Gaussian noise-then-select lives in
  :mod:`ragprivacy.dp.account`.
- :func:`hit_probability` — the chance that Gaussian noise-then-select returns a given slot
  (P(slot ∈ TopK(s + N(0, σ²I))), by quadrature): the per-query hit rate of the
  collusion paper's top-K probe (§4.4, §4.5).
- :func:`laplace_counts` — Laplace noisy counts (histogram release).
- :func:`noisy_prefix_threshold` — MURAG-ADA's adaptive threshold by noisy prefix sums
  (Private-RAG Alg. 2/6, step 1).

Each has a secure path (default: integer-exact discrete noise from ChaCha20 bits, scores on
a fixed-point :class:`~ragprivacy.dp.samplers.Grid`) and a simulation path
(``simulation=True``: numpy float noise, keyword ``rng``). Secure paths refuse ``rng``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.dp.events import (
    DiscreteLaplaceEvent,
    LaplaceEvent,
)
from ragprivacy.dp.randomness import ChaCha20Bits, simulation_rng
from ragprivacy.dp.samplers import discrete_laplace
from ragprivacy.errors import ConfigError

__all__ = [
    "NoisyCounts",
    "PrefixThreshold",
    "hit_probability",
    "laplace_counts",
    "noisy_prefix_threshold",
    "top_k_indices",
]


def _check_mode(simulation: bool, rng: RngLike, bits: ChaCha20Bits | None) -> None:
    simulation_rng(rng, simulation=simulation, bits=bits)


def top_k_indices(values: np.ndarray, k: int) -> IntArray:
    """Indices of the k largest entries of each row, best first; ties go to the lower index.

    Works on 1-D (one query) or 2-D (one row per query) arrays; with fewer than k entries
    it returns all of them (Private-RAG Alg. 3 pads the documents, not the indices).
    """
    k = check_positive_int("k", k)
    arr = np.asarray(values)
    one = arr.ndim == 1
    rows = np.atleast_2d(arr)
    n = rows.shape[1]
    kk = min(k, n)
    # Sort key: value descending, then index ascending (a deterministic post-processing).
    if kk == n or (rows.shape[0] > 1 and n <= 4096):
        idx = np.broadcast_to(np.arange(n), rows.shape)
        out = np.lexsort((idx, -rows), axis=1)[:, :kk].astype(np.int64)
    else:
        out = np.empty((rows.shape[0], kk), dtype=np.int64)
        for r in range(rows.shape[0]):
            row = rows[r]
            # The kk largest sit at the end after partitioning (no negated copy of the row).
            part = np.argpartition(row, n - kk)[n - kk :]
            # Candidates: everything >= the k-th value (covers ties at the boundary).
            cand = np.flatnonzero(row >= row[part].min())
            order = np.lexsort((cand, -row[cand]))
            out[r] = cand[order[:kk]]
    return out[0] if one else out


def hit_probability(
    scores: FloatArray, target: int, sigma: float, top_k: int, *, nodes: int = 160
) -> float:
    """P(slot ``target`` is in the top-K of ``scores`` + N(0, σ²I)), by quadrature.

    Conditioned on the target's noise u, every other slot j beats it independently with
    probability Φ((s_j − s_t)/σ − u); the target is selected when fewer than K do. The
    Poisson-binomial count is tracked up to K − 1; the outer integral over u ~ N(0, 1) uses
    ``nodes`` Gauss–Hermite points (the integrand is smooth; 160 points give ~1e-12).
    """
    from scipy.special import ndtr

    s = np.asarray(scores, dtype=np.float64).ravel()
    sigma = check_positive("sigma", sigma)
    k = check_positive_int("top_k", top_k)
    if not 0 <= target < s.size:
        raise ConfigError(f"The 'target' slot must be in [0, {s.size}); got {target}.")
    if k >= s.size:
        return 1.0
    x, w = np.polynomial.hermite_e.hermegauss(nodes)  # weight exp(-u²/2)
    w = w / math.sqrt(2 * math.pi)
    others = np.delete(s, target) - s[target]
    beat = ndtr(others[None, :] / sigma - x[:, None])  # [nodes, N-1]
    dist = np.zeros((x.size, k))
    dist[:, 0] = 1.0
    for j in range(beat.shape[1]):
        p = beat[:, j : j + 1]
        shifted = np.zeros_like(dist)
        shifted[:, 1:] = dist[:, :-1]
        dist = dist * (1 - p) + shifted * p
    return float(np.clip(w @ dist.sum(axis=1), 0.0, 1.0))


@dataclass(frozen=True, slots=True)
class NoisyCounts:
    """Noisy counts (integers in secure mode, floats in simulation) and their event."""

    values: np.ndarray
    event: LaplaceEvent | DiscreteLaplaceEvent  # discrete on the secure path


def laplace_counts(
    counts: IntArray,
    epsilon: float,
    *,
    sensitivity: int = 1,
    simulation: bool = False,
    rng: RngLike = None,
    bits: ChaCha20Bits | None = None,
) -> NoisyCounts:
    """Release counts with Laplace noise of scale sensitivity/ε (Dwork & Roth, Thm 3.6).

    Neighbouring relation: add/remove one document; ``sensitivity`` is the L1 change of
    the whole count vector (1 when a document falls in one bin). Guarantee: ε-DP for the
    vector. Secure mode adds exact discrete Laplace integers (ε-DP for integer counts) and
    reports a :class:`DiscreteLaplaceEvent`, whose Rényi/PLD curves are the discrete ones
    (larger than the continuous Laplace curves at the same ε).
    """
    epsilon = check_positive("epsilon", epsilon)
    sensitivity = check_positive_int("sensitivity", sensitivity)
    _check_mode(simulation, rng, bits)
    arr = np.asarray(counts)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(f"Counts must be integers; got dtype {arr.dtype}.")
    scale = sensitivity / epsilon
    if simulation:
        values: np.ndarray = arr + make_rng(rng).laplace(0.0, scale, arr.shape)
    else:
        values = arr.astype(np.int64) + discrete_laplace(scale, arr.shape, bits=bits)
    event = (
        LaplaceEvent(scale=scale, sensitivity=sensitivity)
        if simulation
        else DiscreteLaplaceEvent(scale=scale, sensitivity=sensitivity)
    )
    return NoisyCounts(values=values, event=event)


@dataclass(frozen=True, slots=True)
class PrefixThreshold:
    """MURAG-ADA's released threshold.

    ``stop_bin`` is the first bin at which the noisy prefix sum reached k (``None`` if it
    never did); ``noisy_prefix_sums`` are the released sums up to it. Only documents in
    bins 0..``bins_released``−1 pay ``event_per_document`` (each appears in one bin).
    """

    stop_bin: int | None
    noisy_prefix_sums: tuple[float, ...]
    bins_released: int
    event_per_document: LaplaceEvent | DiscreteLaplaceEvent


def _prefix_stops(
    counts: np.ndarray,
    k: int,
    epsilon: float,
    simulation: bool,
    rng: RngLike,
    bits: ChaCha20Bits | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Noisy prefix sums and the stop bin (−1: never reached k) of each row of ``counts``."""
    released = laplace_counts(counts, epsilon, simulation=simulation, rng=rng, bits=bits).values
    sums = np.cumsum(released, axis=1)
    reached = sums >= k
    stops = np.where(reached.any(axis=1), reached.argmax(axis=1), -1)
    return sums, stops


def noisy_prefix_threshold(
    bin_counts: Sequence[int] | IntArray,
    k: int,
    epsilon: float,
    *,
    simulation: bool = False,
    rng: RngLike = None,
    bits: ChaCha20Bits | None = None,
) -> PrefixThreshold:
    """Adaptive threshold by noisy prefix sums (Private-RAG Alg. 2/6, step 1, lines 3–11).

    Scans bins from the most relevant down: s̃ ← s̃ + |A_i| + Lap(1/ε); stops at the
    first bin with s̃ ≥ k and releases it (τ_t = a_i).

    Neighbouring relation: add/remove one document. Guarantee (individual, Private-RAG
    App. D.2): a document counted in a released bin incurs ε; one in a later bin incurs
    nothing. Secure mode uses exact discrete Laplace integers (event:
    :class:`DiscreteLaplaceEvent`).

    Args:
        bin_counts: |A_t^(i)| per bin, most relevant bin first.
        k: documents wanted.
        epsilon: ε_thr.
    """
    k = check_positive_int("k", k)
    epsilon = check_positive("epsilon", epsilon)
    _check_mode(simulation, rng, bits)
    counts = np.asarray(bin_counts)
    if counts.ndim != 1 or counts.size == 0 or not np.issubdtype(counts.dtype, np.integer):
        raise ConfigError(
            f"bin_counts must be a non-empty 1-D sequence of integers; got shape "
            f"{counts.shape}, dtype {counts.dtype}."
        )
    if (counts < 0).any():
        raise ConfigError(f"bin_counts must be non-negative; got {counts.tolist()!r}.")
    sums, stops = _prefix_stops(counts[None, :], k, epsilon, simulation, rng, bits)
    stop = None if stops[0] < 0 else int(stops[0])
    n_released = counts.size if stop is None else stop + 1
    return PrefixThreshold(
        stop_bin=stop,
        noisy_prefix_sums=tuple(float(x) for x in sums[0, :n_released]),
        bins_released=n_released,
        event_per_document=(
            LaplaceEvent(scale=1 / epsilon)
            if simulation
            else DiscreteLaplaceEvent(scale=1 / epsilon, sensitivity=1)
        ),
    )
