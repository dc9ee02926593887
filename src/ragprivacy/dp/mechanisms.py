"""Noise-adding mechanisms on scores and counts.

- :class:`GaussianNoisyTopK` — noise every score, then select the top K (collusion paper
  eq. 2.1): never select first. Returns indices, and the noisy scores for instrumented
  evaluation only.
- :func:`laplace_counts` — Laplace noisy counts (histogram release).
- :func:`noisy_prefix_threshold` — MURAG-ADA's adaptive threshold by noisy prefix sums
  (Private-RAG Alg. 2/6, step 1).

Each has a secure path (default: integer-exact discrete noise from ChaCha20 bits, scores on
a fixed-point :class:`~ragprivacy.dp.samplers.Grid`) and a simulation path
(``simulation=True``: numpy float noise, keyword ``rng``). Secure paths refuse ``rng``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.dp.events import (
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    PrivacyEvent,
    SelfComposedEvent,
)
from ragprivacy.dp.randomness import ChaCha20Bits, simulation_rng
from ragprivacy.dp.samplers import Grid, discrete_gaussian, discrete_laplace
from ragprivacy.dp.sensitivity import score_sensitivity
from ragprivacy.errors import ConfigError

__all__ = [
    "GaussianNoisyTopK",
    "NoisyCounts",
    "NoisySelection",
    "PrefixThreshold",
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
            part = np.argpartition(-row, kk - 1)[:kk]
            # Candidates: everything >= the k-th value (covers ties at the boundary).
            cand = np.flatnonzero(row >= row[part].min())
            order = np.lexsort((cand, -row[cand]))
            out[r] = cand[order[:kk]]
    return out[0] if one else out


@dataclass(frozen=True, slots=True)
class NoisySelection:
    """What a noisy top-K returned: ``indices`` (best first) and the ``noisy_scores`` used.

    ``event`` is the cost of the whole call: the per-query :class:`GaussianEvent` for one
    query (1-D scores), ``SelfComposedEvent(per_query, Q)`` for a batch of Q queries (2-D
    scores). ``event_per_query`` is the cost of one row, for callers that attach a cost to
    each query's result. ``noisy_scores`` are for instrumented evaluation only (the
    collusion paper's score channel, §4.5); a deployment shows neither them nor, to an
    attacker, the indices.
    """

    indices: IntArray
    noisy_scores: FloatArray
    event: PrivacyEvent
    event_per_query: GaussianEvent | None = None

    def __post_init__(self) -> None:
        if self.event_per_query is None and isinstance(self.event, GaussianEvent):
            object.__setattr__(self, "event_per_query", self.event)


_COSINE_RANGE = (-1.0, 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class GaussianNoisyTopK:
    """Gaussian noise-then-select: TopK(Score(q, D) + N(0, σ²I)) (collusion paper eq. 2.1).

    **Neighbouring relation: replace one document in its slot.** The score vector is
    indexed by the index's slots and the output is slot positions, so the guarantee is for
    indices D, D' of the same size that differ in the document held by one slot. Under
    add/remove (the vector gains or loses a coordinate) this mechanism is *not* DP: a
    present document can be returned and an absent one never can (δ ≥ the probability of
    returning it). Add/remove is covered only if the index is padded to a public size with
    dummy documents whose score is the low end of ``score_range`` (Private-RAG Alg. 3
    pads the same way).

    **Sensitivity.** Replacing one document changes one coordinate of the score vector by
    at most the width of the interval the scores live in. Scores are clipped to the
    public ``score_range`` (a per-coordinate post-processing of each document's own
    score), so Δ = hi − lo holds for *any* input. Defaults: ``score_range=(−1, 1)``, the
    range of cosine / inner-product scores of unit vectors, hence Δ = 2. The collusion
    paper (§2.2) states Δ ≤ 1 "for unit-norm embeddings"; that holds when scores lie in a
    unit-width interval, e.g. ``score_range=(0, 1)`` (negative scores clipped to 0), and
    not for raw cosine scores in [−1, 1]. Passing ``sensitivity`` without ``score_range``
    disables clipping and takes the caller's Δ on trust (the paper's statement). The pair
    is validated by :func:`~ragprivacy.dp.sensitivity.score_sensitivity`.

    Guarantee: the release of the whole noisy score vector is a Gaussian mechanism with
    μ = Δ/σ (μ-GDP; (ε_q, δ_q)-DP at the σ of eq. 3.4 with the same Δ); the top-K indices
    are post-processing of it, so the same holds for them. Selecting first and noising
    only the winners breaks this (footnote 1 of the paper).

    Secure mode (default) places the scores on ``grid`` (resolution 2^-bits), adds exact
    discrete Gaussian noise with σ in grid units, and selects on integers; rounding raises
    the sensitivity by one grid unit, which :attr:`event` includes. Simulation mode adds
    numpy float noise.

    >>> m = GaussianNoisyTopK(sigma=0.5, k=2)
    >>> sel = m.select(np.array([0.9, 0.1, 0.8, 0.2]), bits=ChaCha20Bits.derived(bytes(32), "q1"))
    >>> sel.indices.shape, m.sensitivity
    ((2,), 2.0)
    """

    sigma: float
    k: int
    sensitivity: float | None = None
    simulation: bool = False
    grid: Grid = field(default_factory=Grid)
    score_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(self, "k", check_positive_int("k", self.k))
        resolved = score_sensitivity(
            self.score_range, self.sensitivity, default_range=_COSINE_RANGE
        )
        object.__setattr__(self, "score_range", resolved.score_range)
        object.__setattr__(self, "sensitivity", resolved.sensitivity)
        if not isinstance(self.grid, Grid):
            raise ConfigError(f"The 'grid' parameter must be a Grid; got {self.grid!r}.")
        if not self.simulation:
            self.grid.scale_units(self.sigma)  # validates the range in grid units early

    @property
    def event(self) -> GaussianEvent:
        """The privacy event of one query (one row of scores, whatever the number of documents)."""
        sens = float(self.sensitivity)  # type: ignore[arg-type]  # resolved in __post_init__
        if self.simulation:
            return GaussianEvent(sigma=self.sigma, sensitivity=sens)
        return GaussianEvent(sigma=self.sigma, sensitivity=self.grid.rounded_sensitivity(sens))

    def select(
        self,
        scores: FloatArray,
        *,
        rng: RngLike = None,
        bits: ChaCha20Bits | None = None,
    ) -> NoisySelection:
        """Clip to ``score_range``, noise every score, then take the top K.

        Args:
            scores: shape (N,) for one query, or (Q, N) for Q queries (each row gets its
                own noise; the returned event is then ``SelfComposedEvent(event, Q)``).
            rng: simulation mode only.
            bits: secure mode only: the bit source (``None`` = fresh OS entropy;
                ``ChaCha20Bits.derived(s_W, rec_q)`` for audited noise).
        """
        _check_mode(self.simulation, rng, bits)
        arr = np.asarray(scores, dtype=np.float64)
        if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
            raise ConfigError(
                f"Scores must be a non-empty 1-D or 2-D array; got shape {arr.shape}."
            )
        if not np.all(np.isfinite(arr)):
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise ConfigError(f"Scores must be finite; got {bad} NaN or infinite value(s).")
        if self.score_range is not None:
            arr = np.clip(arr, self.score_range[0], self.score_range[1])
        noisy: np.ndarray
        if self.simulation:
            noisy = arr + make_rng(rng).normal(0.0, self.sigma, arr.shape)
        else:
            units = self.grid.to_units(arr)
            noise = discrete_gaussian(self.grid.scale_units(self.sigma), arr.shape, bits=bits)
            noisy = self.grid.from_units(units + noise)
        idx = top_k_indices(noisy, self.k)
        one = self.event
        return NoisySelection(
            indices=idx,
            noisy_scores=np.take_along_axis(noisy, idx, axis=-1),
            event=one if arr.ndim == 1 else SelfComposedEvent(one, arr.shape[0]),
            event_per_query=one,
        )


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
