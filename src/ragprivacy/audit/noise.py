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

with (lo, hi) = ``AuditPolicy.score_range`` (committed in C_policy). The provider runs it, and
the re-execution proof system runs it again on the same derived bits.

**How z_q is drawn from its bits** is committed in C_policy (``AuditPolicy.noise``, the
wire format of A2; :class:`QueryNoise`): ``"full"`` draws every slot's value in order;
``"lazy"`` draws only the slots whose noise can change the output
(:mod:`ragprivacy.dp.lazy_gaussian`: the same law, another derivation) wherever
:func:`ragprivacy.dp.lazy_suits` admits it from public parameters, and every slot
otherwise. Clipping is what makes
Δ = hi − lo hold for *any* committed embedding (fixed-point rounding, or a vector that is
not unit norm, can push ⟨q, e⟩ past 1), so σ of eq. (3.4) is calibrated with that Δ.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np

from ragprivacy._typing import IntArray
from ragprivacy.audit.commitments import FIXED_BITS, NOISE_DERIVATIONS
from ragprivacy.dp import (
    GaussianNoisyTopK,
    derived_bits,
    first_noise,
    lazy_select,
    lazy_suits,
    noise_first_min_scored,
)
from ragprivacy.errors import ConfigError

__all__ = ["QueryNoise", "derived_noise", "integer_scores", "noise_digest"]


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


#: exact integer scores (grid units) of one query at the given positions of its index
ScoreAt = Callable[[IntArray], IntArray]


class QueryNoise:
    """z_q of one audited query: derived from (s_W, rec_q) by the committed derivation.

    ``derivation`` is the policy's :attr:`~ragprivacy.audit.AuditPolicy.noise`. With
    ``"lazy"`` and where :func:`~ragprivacy.dp.lazy_suits` admits the tenant's size (a
    function of n, K, σ and the score range only, so the path says nothing about the
    data or the noise), only the slots above a public threshold are drawn first
    (:func:`~ragprivacy.dp.first_noise`), and :meth:`select` goes on lazily
    (:func:`~ragprivacy.dp.lazy_select`); otherwise every slot is drawn
    (:meth:`~ragprivacy.dp.GaussianNoisyTopK.noise_units`). Either way the output of
    :meth:`select` has the law of TopK(clip(s) + z) with z i.i.d. DG(σ) in every slot.

    :attr:`digest` commits the first draw: every slot's value (full), or the threshold
    with the positions and values above it (lazy). The witness carries it, and the
    verifier re-derives it (A2) before re-running :meth:`select` on every score (A3).
    """

    def __init__(
        self,
        seed: bytes,
        rec: Sequence[str | int],
        mechanism: GaussianNoisyTopK,
        size: int,
        derivation: str = "full",
    ) -> None:
        if derivation not in NOISE_DERIVATIONS:
            raise ConfigError(
                f"Unknown noise derivation {derivation!r}; use one of "
                f"{', '.join(NOISE_DERIVATIONS)}."
            )
        self.mechanism = mechanism
        self.size = int(size)
        self._min_scored = noise_first_min_scored(mechanism.k)
        bits = derived_bits(seed, tuple(rec))
        bounds = mechanism.bounds_units()
        sigma = mechanism.grid.scale_units(mechanism.sigma)
        self.lazy = (
            derivation == "lazy"
            and bounds is not None
            and lazy_suits(
                self.size, mechanism.k, sigma, bounds[1] - bounds[0], min_scored=self._min_scored
            )
        )
        if self.lazy:
            assert bounds is not None
            self._drawn = first_noise(
                self.size,
                mechanism.k,
                sigma,
                bits,
                min_scored=self._min_scored,
                width=bounds[1] - bounds[0],
            )
            order = np.argsort(self._drawn.positions, kind="stable")
            h = hashlib.sha256(b"lazy" + self._drawn.threshold.to_bytes(8, "little"))
            h.update(np.asarray(self._drawn.positions[order], dtype="<i8").tobytes())
            h.update(np.asarray(self._drawn.values[order], dtype="<i8").tobytes())
            self.digest = h.hexdigest()
            self._dense: IntArray | None = None
        else:
            self._dense = derived_noise(seed, rec, mechanism, self.size)
            self.digest = noise_digest(self._dense)

    def dense(self) -> IntArray:
        """Every slot's noise (lazy: the undrawn slots drawn now, from the same bits: only
        a rule that needs them all — a dishonest one — asks)."""
        if self._dense is None:
            self._drawn.fill()
            self._dense = self._drawn.dense()
        return self._dense

    def select(self, score_at: ScoreAt) -> IntArray:
        """The account's TopK(clip(s) + z) (ties to the lower position), asking
        ``score_at`` only for the slots the noise leaves in the race: the lazy selection,
        or :meth:`~ragprivacy.dp.GaussianNoisyTopK.select_units_noise_first` over every
        slot's noise (every slot scored at once when the mechanism does not clip)."""
        mech = self.mechanism
        bounds = mech.bounds_units()
        if self.lazy and self._dense is None:
            assert bounds is not None
            return lazy_select(self._drawn, mech.k, bounds, score_at, min_scored=self._min_scored)
        z = self.dense()
        if bounds is None:  # no clipping: no bound to prune with
            return mech.select_units(score_at(np.arange(self.size, dtype=np.int64)), z)
        return mech.select_units_noise_first(z, score_at, min_scored=self._min_scored)
