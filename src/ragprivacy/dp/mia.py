"""Membership-inference predictions and ceilings from DP parameters (collusion paper §3.8).

Neighbouring relation: the two indices differ in the target document (add/remove/replace).

- :func:`mia_advantage_bound` — eq. (3.7), Yeom et al. 2018.
- :func:`mia_advantage_upper` — eq. (3.8), the k-collusion upper bound.
- :func:`mia_advantage_lower` — eq. (3.9), the constructed adversary's lower bound.
- :func:`predicted_auc` — eq. (3.10) at the σ of eq. (3.4); :func:`predicted_auc_closed`
  is eq. (3.11), equal to it when the score gap equals the sensitivity.
- :func:`max_auc_pure_dp`, :func:`max_auc_gdp` — the largest AUC any test can reach
  against an ε-DP or μ-GDP mechanism; a measured AUC above it is a bug.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.dp.calibration import check_delta, collusion_sigma
from ragprivacy.dp.collusion import collusion_epsilon_leading

__all__ = [
    "MiaPrediction",
    "auc_gaussian",
    "max_auc_gdp",
    "max_auc_pure_dp",
    "mia_advantage_bound",
    "mia_advantage_exact",
    "mia_advantage_lower",
    "mia_advantage_upper",
    "mia_prediction",
    "predicted_auc",
    "predicted_auc_closed",
]


def _phi(x: float) -> float:
    from scipy.special import ndtr  # on first use: it costs every process

    return float(ndtr(x))


def auc_gaussian(mu: float) -> float:
    """Mann–Whitney AUC between N(μ, 1) and N(0, 1) scores: Φ(μ/√2) (eq. 3.10).

    >>> round(auc_gaussian(1.0), 4)
    0.7602
    """
    return _phi(check_positive("mu", mu, allow_zero=True) / math.sqrt(2))


def max_auc_gdp(mu: float) -> float:
    """Largest AUC of any membership test against a μ-GDP mechanism: Φ(μ/√2)."""
    return auc_gaussian(mu)


def max_auc_pure_dp(epsilon: float) -> float:
    """Largest AUC of any membership test against an ε-DP mechanism: e^ε/(1 + e^ε).

    >>> max_auc_pure_dp(0.0)
    0.5
    """
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    return 1.0 / (1.0 + math.exp(-epsilon))


def mia_advantage_bound(epsilon: float, delta: float = 0.0) -> float:
    """Largest binary MIA advantage against an (ε, δ)-DP mechanism, eq. (3.7).

    (e^ε − 1 + 2δ)/(e^ε + 1) ≤ tanh(ε/2) + δ (Yeom et al. 2018; Kairouz et al. 2017).
    """
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    delta = check_positive("delta", delta, allow_zero=True)
    return min(1.0, (math.expm1(epsilon) + 2 * delta) / (math.exp(epsilon) + 1))


def mia_advantage_upper(
    epsilon_acc: float, delta_acc: float, k: int, delta: float | None = None
) -> float:
    """The k-collusion MIA upper bound, eq. (3.8): tanh(√k ε_acc/2) + O(kδ_acc).

    The O(kδ_acc) term is made explicit as the joint failure probability δ + kδ_acc of
    Thm 3.5 (δ defaults to δ_acc). Stated by the paper for ε_acc ≤ 1.
    """
    delta_acc = check_delta("delta_acc", delta_acc)
    k = check_positive_int("k", k)
    d = delta_acc if delta is None else check_delta("delta", delta)
    eps = collusion_epsilon_leading(epsilon_acc, delta_acc, k, d)
    return min(1.0, math.tanh(eps / 2) + d + k * delta_acc)


def _z(epsilon_acc: float, delta_acc: float, n: int, k: int) -> float:
    """√k ε_acc / (4 √(log(1/δ_acc) log(1.25/δ_q))), the argument of eq. (3.9)."""
    epsilon_acc = check_positive("epsilon_acc", epsilon_acc)
    delta_acc = check_delta("delta_acc", delta_acc)
    n = check_positive_int("n", n)
    k = check_positive_int("k", k)
    delta_q = delta_acc / n
    return (
        math.sqrt(k)
        * epsilon_acc
        / (4 * math.sqrt(math.log(1 / delta_acc) * math.log(1.25 / delta_q)))
    )


def mia_advantage_lower(
    epsilon_acc: float, delta_acc: float, n: int, k: int, delta_gap: float = 1.0
) -> float:
    """The constructed adversary's advantage lower bound, eq. (3.9), scaled by the gap.

    (1/√(2π)) · √k ε_acc / (4√(log(1/δ_acc) log(1.25/δ_q))) · Δ_gap, with δ_q = δ_acc/n
    (§A.1 scales it by the production score gap Δ_gap; Δ_gap = 1 is the paper's (3.9)).
    """
    gap = check_positive("delta_gap", delta_gap)
    return _z(epsilon_acc, delta_acc, n, k) * gap / math.sqrt(2 * math.pi)


def mia_advantage_exact(
    epsilon_acc: float, delta_acc: float, n: int, k: int, delta_gap: float = 1.0
) -> float:
    """The constructed adversary's exact advantage 2Φ(Δ_gap √(kn)/(2σ)) − 1 (§3.5), σ of (3.4)."""
    sigma = collusion_sigma(epsilon_acc, delta_acc, n)
    gap = check_positive("delta_gap", delta_gap)
    return 2 * _phi(gap * math.sqrt(k * n) / (2 * sigma)) - 1


def predicted_auc(
    epsilon_acc: float,
    delta_acc: float,
    n: int,
    k: int,
    delta_gap: float = 1.0,
    sensitivity: float = 1.0,
) -> float:
    """Predicted MIA AUC of the pooled-mean attack, eq. (3.10) with σ from eq. (3.4).

    AUC_k = Φ(Δ_gap √(kn) / (√2 σ)); with Δ_gap equal to the sensitivity this is
    eq. (3.11).

    >>> [round(predicted_auc(4.0, 1e-6, 10_000, k), 3) for k in (1, 20)]
    [0.531, 0.638]
    """
    k = check_positive_int("k", k)
    sigma = collusion_sigma(epsilon_acc, delta_acc, n, sensitivity)
    gap = check_positive("delta_gap", delta_gap)
    return _phi(gap * math.sqrt(k * n) / (math.sqrt(2) * sigma))


def predicted_auc_closed(epsilon_acc: float, delta_acc: float, n: int, k: int) -> float:
    """Eq. (3.11): Φ(√k ε_acc / (2√2 √(log(1/δ_acc) log(1.25/δ_q))))."""
    return _phi(2 * _z(epsilon_acc, delta_acc, n, k) / math.sqrt(2))


@dataclass(frozen=True, slots=True)
class MiaPrediction:
    """What the collusion paper predicts for a k-coalition's membership inference."""

    epsilon_acc: float
    delta_acc: float
    n: int
    k: int
    delta_gap: float
    sigma: float
    auc: float
    auc_closed: float
    mia_advantage_upper: float
    mia_advantage_lower: float
    mia_advantage_exact: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def mia_prediction(
    epsilon_acc: float, delta_acc: float, n: int, k: int, delta_gap: float = 1.0
) -> MiaPrediction:
    """All MIA predictions of §3.8 for one setting (AUC, upper and lower advantage)."""
    return MiaPrediction(
        epsilon_acc=epsilon_acc,
        delta_acc=delta_acc,
        n=n,
        k=k,
        delta_gap=delta_gap,
        sigma=collusion_sigma(epsilon_acc, delta_acc, n),
        auc=predicted_auc(epsilon_acc, delta_acc, n, k, delta_gap),
        auc_closed=predicted_auc_closed(epsilon_acc, delta_acc, n, k),
        mia_advantage_upper=mia_advantage_upper(epsilon_acc, delta_acc, k),
        mia_advantage_lower=mia_advantage_lower(epsilon_acc, delta_acc, n, k, delta_gap),
        mia_advantage_exact=mia_advantage_exact(epsilon_acc, delta_acc, n, k, delta_gap),
    )
