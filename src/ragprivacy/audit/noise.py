"""Derived noise and the attested retrieval rule (collusion paper §5.3, claims A2–A3).

The noise of query q is *derived*, not drawn: z_q = DGS(H(s_W ‖ rec_q); σ), the exact
discrete Gaussian of :func:`ragprivacy.dp.discrete_gaussian` reading ChaCha20 bits keyed
by HMAC-SHA256(s_W, rec_q) (:meth:`ragprivacy.dp.ChaCha20Bits.derived`, a ≥ 32-byte s_W), with
rec_q = (a, t(a), H(q), ts). Whoever holds s_W re-derives exactly the same z_q.

Scores are integers: embeddings are committed in fixed point (2^-15), their inner product
is exact in int64 (units 2^-30) and is rounded once to the noise grid (2^-grid_bits).

**The retrieval rule** — one function, :func:`attested_topk`, used by the provider, by the
re-execution proof system and by :func:`noisy_topk`::

    TopK( clip(s, ⌈lo·2^b⌉, ⌊hi·2^b⌋) + z_q )      (integers; ties to the lower position)

with (lo, hi) = ``AuditPolicy.score_range`` (committed in C_policy). Clipping is what makes
Δ = hi − lo hold for *any* committed embedding (fixed-point rounding, or a vector that is
not unit norm, can push ⟨q, e⟩ past 1), so σ of eq. (3.4) is calibrated with that Δ. It is
the rule of :class:`ragprivacy.dp.GaussianNoisyTopK` in secure mode with
``score_range=(lo, hi)`` (noise on *every* score of the tenant's index, then top-K) when lo
and hi lie on the grid, as the defaults do; the tests check that both select the same
positions for the same derived bits, scores outside the range included.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ragprivacy._typing import IntArray
from ragprivacy.audit.commitments import FIXED_BITS, check_score_range
from ragprivacy.dp import ChaCha20Bits, Grid, discrete_gaussian, top_k_indices
from ragprivacy.errors import ConfigError

__all__ = [
    "attested_topk",
    "derived_bits",
    "derived_noise",
    "integer_scores",
    "noise_digest",
    "noisy_topk",
    "score_bounds_units",
]

_REC_LABEL = "rec_q"


def derived_bits(seed: bytes, rec: Sequence[str | int]) -> ChaCha20Bits:
    """The bit source keyed by HMAC-SHA256(s_W, ("rec_q", *rec_q))."""
    return ChaCha20Bits.derived(seed, (_REC_LABEL, *rec))


def integer_scores(
    fixed_vectors: np.ndarray, fixed_query: np.ndarray, grid_bits: int
) -> np.ndarray:
    """Exact scores ⟨q, e_d⟩ in grid units (int64), from fixed-point embeddings."""
    prod = fixed_vectors.astype(np.int64) @ fixed_query.astype(np.int64).ravel()
    shift = 2 * FIXED_BITS - grid_bits
    if shift <= 0:
        return prod << (-shift)
    return (prod + (1 << (shift - 1))) >> shift  # round half up, exactly


def derived_noise(
    seed: bytes, rec: Sequence[str | int], sigma: float, size: int, grid_bits: int
) -> np.ndarray:
    """z_q in grid units: DGS(H(s_W ‖ rec_q); σ·2^grid_bits), ``size`` draws."""
    grid = Grid(grid_bits)
    return discrete_gaussian(grid.scale_units(sigma), size, bits=derived_bits(seed, rec))


def noise_digest(noise: np.ndarray) -> str:
    """SHA-256 hex of the int64 little-endian noise vector."""
    return hashlib.sha256(np.asarray(noise, dtype="<i8").tobytes()).hexdigest()


def score_bounds_units(score_range: tuple[float, float], grid_bits: int) -> tuple[int, int]:
    """``score_range`` in grid units, rounded inwards: (⌈lo·2^b⌉, ⌊hi·2^b⌋), exactly."""
    lo, hi = (Fraction(v) * (1 << int(grid_bits)) for v in check_score_range(score_range))
    return math.ceil(lo), math.floor(hi)


def attested_topk(
    scores_units: np.ndarray,
    noise_units: np.ndarray | None,
    *,
    top_k: int,
    score_range: tuple[float, float],
    grid_bits: int,
) -> IntArray:
    """The attested retrieval rule: TopK(clip(s) + z) on integers in grid units.

    Args:
        scores_units: exact scores of every slot of the tenant index (int64 grid units,
            :func:`integer_scores`).
        noise_units: z_q for every slot (:func:`derived_noise`); ``None`` selects on the
            clipped clean scores — the select-before-noise bug, for tests only.
        top_k, score_range, grid_bits: the committed policy's values
            (:meth:`AuditPolicy.topk_rule` passes them).
    """
    s = np.asarray(scores_units, dtype=np.int64)
    lo, hi = score_bounds_units(score_range, grid_bits)
    clipped = np.clip(s, lo, hi)
    if noise_units is None:
        return top_k_indices(clipped, top_k)
    z = np.asarray(noise_units, dtype=np.int64)
    if z.shape != s.shape:
        raise ConfigError(
            f"One noise value per score is required; got {z.shape} noise for {s.shape} scores."
        )
    return top_k_indices(clipped + z, top_k)


def noisy_topk(
    scores_units: np.ndarray,
    seed: bytes,
    rec: Sequence[str | int],
    sigma: float,
    k: int,
    grid_bits: int,
    *,
    score_range: tuple[float, float] = (-1.0, 1.0),
) -> IntArray:
    """Positions of TopK(clip(scores) + z_q), with z_q derived from (s_W, rec_q).

    The rule of :func:`attested_topk`; it selects what ``GaussianNoisyTopK(sigma=σ, k=k,
    grid=Grid(grid_bits), score_range=score_range)`` selects in secure mode on the bits
    :func:`derived_bits` gives.
    """
    s = np.asarray(scores_units, dtype=np.int64).ravel()
    z = derived_noise(seed, rec, sigma, s.size, grid_bits)
    return attested_topk(s, z, top_k=k, score_range=score_range, grid_bits=grid_bits)
