"""Exact privacy of (composed) Gaussian mechanisms through Gaussian differential privacy.

A Gaussian mechanism with L2 sensitivity Δ and noise N(0, σ²) is μ-GDP with μ = Δ/σ, and
m adaptive repetitions compose *exactly* to μ√m-GDP (Dong, Roth & Su 2022, Cor. 3.3), i.e.
to one Gaussian mechanism with σ/√m. Its exact (ε, δ) curve is (Balle & Wang 2018, Thm 8)

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).

This is tighter than advanced composition (collusion paper Lemma 3.2) and than the RDP
route (Thm 3.9); it is the oracle the numerical accountants are tested against. The
functions below are independent of ``dp_accounting`` so that they can cross-check it.
"""

from __future__ import annotations

import math

from ragprivacy._validation import check_positive, check_positive_int, check_probability
from ragprivacy.errors import ConfigError

__all__ = [
    "composed_gaussian_mu",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
]


def _check_delta(delta: float) -> float:
    d = check_probability("delta", delta, open_interval=True)
    return d


def gaussian_delta(mu: float, epsilon: float) -> float:
    """The smallest δ such that a μ-GDP mechanism is (ε, δ)-DP.

    Neighbouring relation: any relation under which the mechanism is μ-GDP (add/remove one
    document for the retrieval mechanisms here). Source: Balle & Wang 2018, Thm 8.

    >>> round(gaussian_delta(1.0, 0.0), 6)  # 2Φ(1/2) − 1
    0.382925
    """
    from scipy.special import log_ndtr  # on first use: it costs every process

    mu = check_positive("mu", mu)
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    la = float(log_ndtr(-epsilon / mu + mu / 2))
    lb = float(log_ndtr(-epsilon / mu - mu / 2))
    # δ = e^{la} (1 − e^{ε + lb − la}), computed without cancellation.
    return max(0.0, -math.expm1(epsilon + lb - la) * math.exp(la))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The smallest ε such that a μ-GDP mechanism is (ε, δ)-DP (exact, to ~1e-12).

    >>> round(gaussian_epsilon(1.0, 1e-5), 4)
    4.3772
    """
    mu = check_positive("mu", mu)
    delta = _check_delta(delta)
    from scipy.optimize import brentq

    if gaussian_delta(mu, 0.0) <= delta:
        return 0.0
    hi = mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta)) + 1.0
    while gaussian_delta(mu, hi) > delta:  # pragma: no cover - the bound above always holds
        hi *= 2
    return float(brentq(lambda e: gaussian_delta(mu, e) - delta, 0.0, hi, xtol=1e-13, rtol=1e-14))


def gaussian_mu(epsilon: float, delta: float) -> float:
    """The largest μ such that μ-GDP implies (ε, δ)-DP (analytic Gaussian calibration).

    σ = Δ/μ is the analytic Gaussian mechanism's noise (Balle & Wang 2018, Alg. 1).

    >>> round(1 / gaussian_mu(1.0, 1e-5), 4)  # σ for Δ = 1
    3.7306
    """
    from scipy.optimize import brentq

    epsilon = check_positive("epsilon", epsilon)
    delta = _check_delta(delta)
    lo, hi = 1e-12, 1.0
    while gaussian_delta(hi, epsilon) < delta:
        hi *= 2
        if hi > 1e8:  # pragma: no cover - unreachable for delta < 1
            raise ConfigError(f"Cannot calibrate μ for epsilon={epsilon}, delta={delta}.")
    return float(
        brentq(lambda m: gaussian_delta(m, epsilon) - delta, lo, hi, xtol=1e-15, rtol=1e-14)
    )


def composed_gaussian_mu(sigma: float, count: int, sensitivity: float = 1.0) -> float:
    """μ of ``count`` adaptively composed Gaussian mechanisms: Δ√count/σ (exact).

    Source: Dong, Roth & Su 2022, Cor. 3.3; the collusion paper's pooled mean of kn noisy
    scores (§3.5) attains it.
    """
    sigma = check_positive("sigma", sigma)
    count = check_positive_int("count", count)
    sensitivity = check_positive("sensitivity", sensitivity)
    return sensitivity * math.sqrt(count) / sigma
