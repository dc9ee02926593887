"""Derived noise and integer scores of the audited retrieval (collusion paper §5.3, A2–A3).

The noise of query q is *derived*, not drawn: z_q = DGS(H(s_W ‖ rec_q); σ), the exact
discrete Gaussian of the account's mechanism reading the bits
:func:`ragprivacy.dp.derived_bits` gives for rec_q = (W, a, t(a), H(q), j, n). Whoever holds
s_W re-derives exactly the same z_q.

Scores are integers: embeddings are committed in fixed point (2^-15), their inner product
is exact in int64 (units 2^-30) and is rounded once to the noise grid (2^-grid_bits).

**The retrieval rule** is the account's one noise-then-select,
:meth:`ragprivacy.dp.GaussianNoisyTopK.select_units` of the committed policy's mechanism
(:meth:`AuditPolicy.mechanism`)::

    TopK( clip(s, ⌈lo·2^b⌉, ⌊hi·2^b⌋) + z_q )      (integers; ties to the lower position)

with (lo, hi) = ``AuditPolicy.score_range`` (committed in C_policy). The provider runs it,
the re-execution proof system runs it again, and the multi-tenant retriever serving a
query with a window seed runs it on the same derived bits. Clipping is what makes
Δ = hi − lo hold for *any* committed embedding (fixed-point rounding, or a vector that is
not unit norm, can push ⟨q, e⟩ past 1), so σ of eq. (3.4) is calibrated with that Δ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ragprivacy._typing import IntArray
from ragprivacy.audit.commitments import FIXED_BITS
from ragprivacy.dp import GaussianNoisyTopK, derived_bits

__all__ = ["derived_noise", "integer_scores", "noise_digest"]


def integer_scores(
    fixed_vectors: np.ndarray, fixed_query: np.ndarray, grid_bits: int
) -> np.ndarray:
    """Exact scores ⟨q, e_d⟩ in grid units (int64), from fixed-point embeddings.

    The products are computed with float64 BLAS, which is exact here and far faster than
    numpy's integer matmul (no BLAS): every coordinate is an integer of at most 2^17 in
    magnitude (|v_i| ≤ 4 at 2^-15), so every product and every partial sum, in whatever
    order BLAS adds them, is an integer below d·2^34 < 2^53 for d < 2^19 — represented
    exactly in float64. Larger d falls back to int64 arithmetic. ``fixed_vectors`` may be
    the int32 matrix or its
    :func:`~ragprivacy.audit.commitments.scoring_matrix` (no copy then).
    """
    q = np.asarray(fixed_query).ravel()
    if q.size < (1 << 19):
        exact = np.asarray(fixed_vectors, dtype=np.float64) @ q.astype(np.float64)
        prod = exact.astype(np.int64)
    else:
        prod = np.asarray(fixed_vectors, dtype=np.int64) @ q.astype(np.int64)
    shift = 2 * FIXED_BITS - grid_bits
    if shift <= 0:
        return prod << (-shift)
    return (prod + (1 << (shift - 1))) >> shift  # round half up, exactly


def derived_noise(
    seed: bytes, rec: Sequence[str | int], mechanism: GaussianNoisyTopK, size: int
) -> IntArray:
    """z_q in grid units: DGS(H(s_W ‖ rec_q); σ·2^b) for ``size`` slots, from the committed
    policy's ``mechanism`` (:meth:`AuditPolicy.mechanism`)."""
    return mechanism.noise_units(size, bits=derived_bits(seed, tuple(rec)))


def noise_digest(noise: np.ndarray) -> str:
    """SHA-256 hex of the int64 little-endian noise vector."""
    return hashlib.sha256(np.asarray(noise, dtype="<i8").tobytes()).hexdigest()
