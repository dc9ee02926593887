"""Derived noise and the attested retrieval rule (collusion paper §5.3, claims A2–A3).

The noise of query q is *derived*, not drawn: z_q = DGS(H(s_W ‖ rec_q); σ), the exact
discrete Gaussian of :func:`ragprivacy.dp.discrete_gaussian` reading ChaCha20 bits keyed
by H(s_W ‖ rec_q) (:meth:`ragprivacy.dp.ChaCha20Bits.derived`), with
rec_q = (a, t(a), H(q), ts). Whoever holds s_W re-derives exactly the same z_q.

Scores are integers: embeddings are committed in fixed point (2^-15), their inner product
is exact in int64 (units 2^-30) and is rounded once to the noise grid (2^-grid_bits).
The retrieval is then :class:`ragprivacy.dp.GaussianNoisyTopK` in secure mode — noise on
*every* score of the tenant's index, then top-K (ties to the lower position).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ragprivacy.audit.commitments import FIXED_BITS
from ragprivacy.dp import ChaCha20Bits, GaussianNoisyTopK, Grid, discrete_gaussian

__all__ = ["derived_bits", "derived_noise", "integer_scores", "noise_digest", "noisy_topk"]

_REC_LABEL = "rec_q"


def derived_bits(seed: bytes, rec: Sequence[str | int]) -> ChaCha20Bits:
    """The bit source keyed by H(s_W ‖ rec_q)."""
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


def noisy_topk(
    scores_units: np.ndarray,
    seed: bytes,
    rec: Sequence[str | int],
    sigma: float,
    k: int,
    grid_bits: int,
) -> np.ndarray:
    """Positions of TopK(scores + z_q), with z_q derived from (s_W, rec_q)."""
    grid = Grid(grid_bits)
    mech = GaussianNoisyTopK(sigma=sigma, k=k, grid=grid)
    scores = grid.from_units(np.asarray(scores_units, dtype=np.int64))
    return mech.select(scores, bits=derived_bits(seed, rec)).indices
