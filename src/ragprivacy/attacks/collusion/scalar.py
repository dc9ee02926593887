"""The k-account adversaries against the scalar lower-bound mechanism M*.

Collusion paper §3.5 (Theorem 3.6): M* (:class:`ragprivacy.dp.ScalarMechanism`) releases,
per query, the noisy scalar ⟨q*, x⟩ + N(0, σ²) with σ of eq. (3.4); the member world's
answers have mean Δ (the score gap), the non-member world's 0. k colluding accounts each
send the probe n times and pool the kn answers.

Adversaries:

* :class:`PooledMeanAttack` — A* of §3.5: the mean ȳ of the kn answers, threshold at the
  midpoint Δ/2. Its AUC is Φ(Δ√(kn)/(√2σ)) (eq. 3.10, = eq. 3.11 at Δ = 1).
* :func:`bayes_llr` — the exact log-likelihood ratio of the kn answers (§A.2 (i)); for
  Gaussians of known variance it is an increasing affine function of ȳ, so its AUC equals
  A*'s (a check that the pooled mean is already optimal).
* :class:`DiversifiedSplit` — §A.2 (ii): a fraction ρ of the colluders probe the target,
  the rest probe orthogonal directions (which carry no signal in either world).

Simulation uses exact sufficient statistics: the mean of kn i.i.d. N(μ_b, σ²) answers
*is* one N(μ_b, σ²/(kn)) draw (:meth:`~ragprivacy.dp.ScalarMechanism.pooled_means`), so a
trial costs one Gaussian draw whatever k and n are (docs/audit.md, "The attack and its
sweeps"). These are simulations of the mechanism (the dp layer's
float fast path, :func:`ragprivacy.dp.gaussian_noise_float`), not a deployment
protecting data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray
from ragprivacy._validation import check_choice, check_in_range, check_positive_int
from ragprivacy.dp import ScalarMechanism, gaussian_noise_float

__all__ = [
    "DiversifiedSplit",
    "PooledMeanAttack",
    "bayes_llr",
    "bayes_llr_samples",
]


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


@dataclass(frozen=True, slots=True)
class PooledMeanAttack:
    """A* (§3.5): every account sends the probe n times; the statistic is the pooled mean
    ȳ of all kn answers and the decision "member" is ȳ ≥ Δ/2 (the midpoint)."""

    mechanism: ScalarMechanism

    @property
    def threshold(self) -> float:
        """The midpoint between the two worlds' means."""
        return self.mechanism.delta_gap / 2

    @staticmethod
    def statistic(answers: FloatArray) -> FloatArray:
        """ȳ over the last axis (one row per trial, kn answers per row)."""
        return np.asarray(answers, dtype=np.float64).mean(axis=-1)

    def simulate(self, *, member: bool, k: int, trials: int, rng: RngLike = None) -> FloatArray:
        """The statistic of ``trials`` independent attacks by k accounts (exact shortcut)."""
        k = check_positive_int("k", k)
        return self.mechanism.pooled_means(
            member=member, queries=k * self.mechanism.n, trials=trials, rng=rng
        )

    def decide(self, statistic: FloatArray) -> np.ndarray:
        """True where the attack says "member"."""
        return np.asarray(statistic) >= self.threshold


def bayes_llr(pooled_mean: FloatArray, *, mechanism: ScalarMechanism, queries: int) -> FloatArray:
    """The log-likelihood ratio log p_D/p_D' of ``queries`` answers from their mean ȳ.

    For N(Δ, σ²) vs N(0, σ²): LLR = (m Δ / σ²)(ȳ − Δ/2) with m = ``queries`` — an
    increasing affine map of ȳ, hence the same ROC as A* (§A.2 (i)).
    """
    m = check_positive_int("queries", queries)
    gap, sigma = mechanism.delta_gap, mechanism.sigma
    return m * gap / sigma**2 * (np.asarray(pooled_mean, dtype=np.float64) - gap / 2)


def bayes_llr_samples(answers: FloatArray, *, mechanism: ScalarMechanism) -> FloatArray:
    """The LLR summed answer by answer (no sufficient statistic): for cross-checks."""
    y = np.asarray(answers, dtype=np.float64)
    gap, sigma = mechanism.delta_gap, mechanism.sigma
    per = (y**2 - (y - gap) ** 2) / (2 * sigma**2)
    return per.sum(axis=-1)


@dataclass(frozen=True, slots=True, kw_only=True)
class DiversifiedSplit:
    """§A.2 (ii): ⌈ρk⌉ colluders (at least one) probe the target, the rest probe random
    directions orthogonal to x* and x'*, whose answers have mean 0 in both worlds.

    ``pool="target"``: the statistic is the mean of the target-probing accounts' answers
    (the coalition knows which of its accounts probed what); ``pool="all"`` averages
    every answer, so the orthogonal probes only add noise.
    """

    mechanism: ScalarMechanism
    rho: float
    pool: str = "target"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", check_in_range("rho", self.rho, 0.0, 1.0, low_open=True))
        check_choice("pool", self.pool, ("target", "all"))

    def target_accounts(self, k: int) -> int:
        """How many of the k accounts probe the target."""
        k = check_positive_int("k", k)
        return max(1, min(k, math.ceil(self.rho * k - 1e-9)))

    def simulate(self, *, member: bool, k: int, trials: int, rng: RngLike = None) -> FloatArray:
        """The statistic of ``trials`` attacks (exact sufficient statistics)."""
        gen = make_rng(rng)
        mech, n = self.mechanism, self.mechanism.n
        kt = self.target_accounts(k)
        target_mean = mech.pooled_means(member=member, queries=kt * n, trials=trials, rng=gen)
        if self.pool == "target" or kt == k:
            return target_mean
        others = gaussian_noise_float(mech.sigma / math.sqrt((k - kt) * n), trials, rng=gen)
        return (kt * target_mean + (k - kt) * others) / k

    def predicted_auc(self, k: int) -> float:
        """Φ(z/√2) with z the standardised mean difference of the statistic."""
        mech, n = self.mechanism, self.mechanism.n
        kt = self.target_accounts(k)
        if self.pool == "target":
            z = mech.delta_gap * math.sqrt(kt * n) / mech.sigma
        else:
            z = (kt / k) * mech.delta_gap * math.sqrt(k * n) / mech.sigma
        return _phi(z / math.sqrt(2))
