"""The scalar lower-bound mechanism M* of the collusion paper (§3.5, eq. 3.3–3.4).

Two neighbouring tenant indices differ in one document, x* (member world) or x'*
(non-member world); a probe q* separates them by the score gap Δ = ⟨q*, x*⟩ − ⟨q*, x'*⟩.
M* releases, per query, the noisy scalar ⟨q*, x⟩ + N(0, σ²) with σ of eq. (3.4), which
makes one account's n queries (ε_acc, δ_acc)-DP by advanced composition. The k-account
adversaries against it (pooled mean A*, Bayes LLR, diversified split) are in
:mod:`ragprivacy.attacks.collusion`.

Simulation uses exact sufficient statistics: the mean of kn i.i.d. N(μ_b, σ²) answers
*is* one N(μ_b, σ²/(kn)) draw (:meth:`ScalarMechanism.pooled_means`), so a trial costs one
Gaussian draw whatever k and n are. The per-query path (:meth:`ScalarMechanism.release`)
exists to cross-check that shortcut. Both use the float fast path
(:func:`~ragprivacy.dp.samplers.gaussian_noise_float`): these are simulations of the
mechanism, not a deployment protecting data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ragprivacy._random import RngLike
from ragprivacy._typing import FloatArray
from ragprivacy._validation import (
    check_in_range,
    check_positive,
    check_positive_int,
    check_probability,
)
from ragprivacy.dp.calibration import collusion_sigma
from ragprivacy.dp.mia import predicted_auc
from ragprivacy.dp.samplers import gaussian_noise_float

__all__ = ["ScalarMechanism"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalarMechanism:
    """M* of collusion paper eq. (3.3): ⟨q*, x_b⟩ + N(0, σ²) per query, σ of eq. (3.4).

    Neighbouring relation: the tenant index holds x* (member, mean Δ) or x'* (non-member,
    mean 0). Sensitivity of one answer: Δ ≤ ``sensitivity``. Guarantee: n queries of one
    account are (ε_acc, δ_acc)-DP (Lemma 3.2 with eq. 3.1).

    >>> m = ScalarMechanism(epsilon_acc=4.0, n=10_000)
    >>> round(m.predicted_auc(20), 3)
    0.638
    """

    epsilon_acc: float
    delta_acc: float = 1e-6
    n: int = 10_000
    delta_gap: float = 1.0
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon_acc", check_positive("epsilon_acc", self.epsilon_acc))
        object.__setattr__(
            self, "delta_acc", check_probability("delta_acc", self.delta_acc, open_interval=True)
        )
        object.__setattr__(self, "n", check_positive_int("n", self.n))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))
        object.__setattr__(
            self,
            "delta_gap",
            check_in_range("delta_gap", self.delta_gap, 0.0, self.sensitivity, low_open=True),
        )

    @property
    def sigma(self) -> float:
        """σ of eq. (3.4) for n queries per account."""
        return collusion_sigma(self.epsilon_acc, self.delta_acc, self.n, self.sensitivity)

    def mean(self, member: bool) -> float:
        """The noiseless answer ⟨q*, x_b⟩ − ⟨q*, x'*⟩: Δ in the member world, else 0."""
        return self.delta_gap if member else 0.0

    def release(
        self, *, member: bool, size: int | tuple[int, ...], rng: RngLike = None
    ) -> FloatArray:
        """Per-query answers of M* (simulation: the dp float fast path)."""
        return self.mean(member) + gaussian_noise_float(self.sigma, size, rng=rng)

    def pooled_means(
        self, *, member: bool, queries: int, trials: int, rng: RngLike = None
    ) -> FloatArray:
        """``trials`` draws of the mean of ``queries`` answers — exactly N(μ_b, σ²/queries),
        one Gaussian draw per trial (the sufficient statistic)."""
        queries = check_positive_int("queries", queries)
        trials = check_positive_int("trials", trials)
        return self.mean(member) + gaussian_noise_float(
            self.sigma / math.sqrt(queries), trials, rng=rng
        )

    def predicted_auc(self, k: int, *, queries_per_account: int | None = None) -> float:
        """Eq. (3.10) for k accounts pooling their answers (eq. 3.11 at Δ = 1).

        ``queries_per_account`` defaults to the calibration's n.
        """
        k = check_positive_int("k", k)
        if queries_per_account is None or queries_per_account == self.n:
            return predicted_auc(
                self.epsilon_acc, self.delta_acc, self.n, k, self.delta_gap, self.sensitivity
            )
        m = check_positive_int("queries_per_account", queries_per_account) * k
        return _phi(self.delta_gap * math.sqrt(m) / (math.sqrt(2) * self.sigma))


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))
