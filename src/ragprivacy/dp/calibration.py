"""Noise calibration: from a privacy target to σ (Gaussian) or a scale (Laplace).

Neighbouring relation throughout: add or remove one document; ``sensitivity`` is the L2
(Gaussian) or L1 (Laplace) sensitivity of the released value under it.

- :func:`per_query_budget` — collusion paper eq. (3.1).
- :func:`collusion_sigma` — collusion paper eq. (3.4) (classic Gaussian σ at (ε_q, δ_q)).
- :func:`gaussian_sigma_classic` — Dwork & Roth 2014, Thm A.1.
- :func:`gaussian_sigma_analytic` — Balle & Wang 2018 (exact for one release).
- :func:`account_sigma_exact` — exact calibration of n composed queries (Gaussian DP).
- :func:`calibrate_account_sigma` — one entry point over the methods above and RDP.
- :func:`calibrate_pure_steps` / :func:`max_pure_steps` — the per-step ε₀ (or the number of
  steps) of k adaptive pure-DP steps under a total (ε, δ), by the exact composition of
  Kairouz, Oh & Viswanath 2015 (pure sum when δ = 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ragprivacy._validation import (
    check_choice,
    check_positive,
    check_positive_int,
    check_probability,
)
from ragprivacy.dp.gaussian_dp import gaussian_mu
from ragprivacy.errors import ConfigError

__all__ = [
    "CALIBRATION_METHODS",
    "PerQueryBudget",
    "account_sigma_exact",
    "calibrate_account_sigma",
    "collusion_sigma",
    "gaussian_sigma_analytic",
    "gaussian_sigma_classic",
    "calibrate_pure_steps",
    "laplace_scale",
    "max_pure_steps",
    "per_query_budget",
]

CALIBRATION_METHODS = ("paper", "analytic", "rdp", "exact")


def check_delta(name: str, value: float) -> float:
    """A δ in the open interval (0, 1)."""
    return check_probability(name, value, open_interval=True)


@dataclass(frozen=True, slots=True)
class PerQueryBudget:
    """The (ε_q, δ_q) each of n queries gets so that n compose to (ε_acc, δ_acc)."""

    epsilon: float
    delta: float


def per_query_budget(epsilon_acc: float, delta_acc: float, n: int) -> PerQueryBudget:
    """Per-query budget of the collusion paper, eq. (3.1).

    ε_q = ε_acc / √(2n log(1/δ_acc)),  δ_q = δ_acc / n, so that advanced composition
    (Lemma 3.2) of n queries gives (ε_acc, δ_acc) to leading order (the paper's footnote 2:
    (ε_acc, 2δ_acc) in the strictest reading).

    >>> b = per_query_budget(1.0, 1e-6, 10_000)
    >>> round(b.epsilon, 6), round(b.delta, 20)
    (0.001902, 1e-10)
    """
    epsilon_acc = check_positive("epsilon_acc", epsilon_acc)
    delta_acc = check_delta("delta_acc", delta_acc)
    n = check_positive_int("n", n)
    eps_q = epsilon_acc / math.sqrt(2 * n * math.log(1 / delta_acc))
    return PerQueryBudget(epsilon=eps_q, delta=delta_acc / n)


def gaussian_sigma_classic(
    epsilon: float,
    delta: float,
    sensitivity: float = 1.0,
    *,
    allow_large_epsilon: bool = False,
) -> float:
    """σ = Δ √(2 log(1.25/δ)) / ε, the classic Gaussian mechanism (Dwork & Roth, Thm A.1).

    Guarantee: (ε, δ)-DP for one release when ε < 1 (the theorem's hypothesis; larger ε
    is refused — use :func:`gaussian_sigma_analytic`). ``allow_large_epsilon=True``
    returns the formula for any ε, as papers that print it for ε ≥ 1 use it (e.g. the
    RP paper's DP-RP-G); the (ε, δ) claim then does not follow from the theorem.
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_delta("delta", delta)
    sensitivity = check_positive("sensitivity", sensitivity)
    if epsilon >= 1 and not allow_large_epsilon:
        raise ConfigError(
            f"The classic Gaussian calibration needs epsilon < 1; got {epsilon!r}. "
            f"Use gaussian_sigma_analytic for larger epsilon."
        )
    return sensitivity * math.sqrt(2 * math.log(1.25 / delta)) / epsilon


def gaussian_sigma_analytic(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest σ making one Gaussian release (ε, δ)-DP (Balle & Wang 2018, Alg. 1).

    Exact (to ~1e-12 relative); valid for every ε > 0. Equals
    ``dp_accounting.get_sigma_gaussian(ε, δ)·Δ`` (tested).

    >>> round(gaussian_sigma_analytic(1.0, 1e-5), 4)
    3.7306
    """
    sensitivity = check_positive("sensitivity", sensitivity)
    return sensitivity / gaussian_mu(epsilon, delta)


def collusion_sigma(
    epsilon_acc: float, delta_acc: float, n: int, sensitivity: float = 1.0
) -> float:
    """The per-query σ of the collusion paper, eq. (3.4).

    σ = Δ √(2n log(1/δ_acc) · 2 log(1.25/δ_q)) / ε_acc with δ_q = δ_acc/n: the classic
    Gaussian σ at the per-query budget of eq. (3.1). Guarantee claimed by the paper:
    n queries of one account are (ε_acc, δ_acc)-DP by advanced composition. The exact
    accounting of :func:`account_sigma_exact` needs several times less noise. The
    classic σ assumes ε_q < 1 (Dwork & Roth Thm A.1); the paper's formula is returned as
    printed even when ε_q ≥ 1 (tiny n, large ε_acc), where its per-query claim does not
    follow — :class:`~ragprivacy.dp.collusion.CollusionReport` flags it
    (``classic_sigma_valid``). ``sensitivity`` defaults to the paper's Δ = 1, which holds
    for scores confined to a unit-width interval (see docs/dp.md on [C] §2.2).

    >>> round(collusion_sigma(1.0, 1e-6, 10_000), 1)
    3584.4
    """
    b = per_query_budget(epsilon_acc, delta_acc, n)
    sensitivity = check_positive("sensitivity", sensitivity)
    return (
        sensitivity
        * math.sqrt(2 * n * math.log(1 / delta_acc) * 2 * math.log(1.25 / b.delta))
        / epsilon_acc
    )


def account_sigma_exact(
    epsilon_acc: float, delta_acc: float, n: int, sensitivity: float = 1.0
) -> float:
    """The smallest σ for which n adaptive Gaussian queries are exactly (ε_acc, δ_acc)-DP.

    n Gaussians with σ compose to one with σ/√n (μ-GDP, μ = Δ√n/σ), so
    σ = Δ √n / μ*(ε_acc, δ_acc) with μ* from the exact GDP curve (Balle & Wang 2018, Thm 8;
    Dong, Roth & Su 2022, Cor. 3.3).

    >>> round(account_sigma_exact(1.0, 1e-6, 10_000), 1)
    422.5
    """
    n = check_positive_int("n", n)
    sensitivity = check_positive("sensitivity", sensitivity)
    return (
        sensitivity * math.sqrt(n) / gaussian_mu(epsilon_acc, check_delta("delta_acc", delta_acc))
    )


def _account_sigma_rdp(epsilon_acc: float, delta_acc: float, n: int, sensitivity: float) -> float:
    import dp_accounting
    from dp_accounting import rdp

    exact = account_sigma_exact(epsilon_acc, delta_acc, n, sensitivity) / sensitivity
    bracket = dp_accounting.ExplicitBracketInterval(exact * 0.5, exact * 2.0)

    def make_event(z: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), n)

    z = dp_accounting.calibrate_dp_mechanism(
        rdp.RdpAccountant, make_event, epsilon_acc, delta_acc, bracket, tol=exact * 1e-7
    )
    return float(z) * sensitivity


def calibrate_account_sigma(
    epsilon_acc: float,
    delta_acc: float,
    n: int,
    *,
    sensitivity: float = 1.0,
    method: str = "paper",
) -> float:
    """σ so that n Gaussian queries of one account are (ε_acc, δ_acc)-DP.

    Args:
        epsilon_acc: per-account ε.
        delta_acc: per-account δ in (0, 1).
        n: queries per account in the audit window.
        sensitivity: L2 sensitivity of one query's score vector (1 for unit-norm
            embeddings, collusion paper §2.2).
        method: ``"paper"`` (eq. 3.1 + 3.4, advanced composition), ``"analytic"`` (eq. 3.1
            with the Balle–Wang σ at (ε_q, δ_q), still advanced composition), ``"rdp"``
            (``dp_accounting`` RDP accountant) or ``"exact"`` (Gaussian DP, tight).

    Returns:
        σ, in the units of the scores.
    """
    method = check_choice("method", method, CALIBRATION_METHODS)
    if method == "paper":
        return collusion_sigma(epsilon_acc, delta_acc, n, sensitivity)
    if method == "analytic":
        b = per_query_budget(epsilon_acc, delta_acc, n)
        return gaussian_sigma_analytic(b.epsilon, b.delta, sensitivity)
    if method == "exact":
        return account_sigma_exact(epsilon_acc, delta_acc, n, sensitivity)
    return _account_sigma_rdp(
        check_positive("epsilon_acc", epsilon_acc),
        check_delta("delta_acc", delta_acc),
        check_positive_int("n", n),
        check_positive("sensitivity", sensitivity),
    )


def laplace_scale(epsilon: float, sensitivity: float = 1.0) -> float:
    """b = Δ₁/ε: Laplace(b) noise on a value of L1 sensitivity Δ₁ is ε-DP (Dwork & Roth 3.6).

    >>> laplace_scale(0.5)
    2.0
    """
    return check_positive("sensitivity", sensitivity) / check_positive("epsilon", epsilon)


def _check_target(epsilon: float, delta: float) -> tuple[float, float]:
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    if delta >= 1:
        raise ConfigError(f"The 'delta' parameter must be in [0, 1); got {delta!r}.")
    return epsilon, delta


def calibrate_pure_steps(epsilon: float, delta: float, steps: int) -> float:
    """The largest ε₀ such that ``steps`` adaptive ε₀-DP mechanisms are (ε, δ)-DP together.

    ``delta = 0``: ε/steps (basic composition, exact for pure DP), rounded down to the float
    whose product with ``steps`` (what :func:`~ragprivacy.dp.optimal_pure_composition`
    gives at δ = 0) does not exceed ε. ``delta > 0``: the ε₀
    whose exact composition (:func:`~ragprivacy.dp.accounting.optimal_pure_composition`,
    Kairouz, Oh & Viswanath 2015, Thm 3.3) at δ equals ε, found by bisection to ~1e-12
    relative and rounded down, so composing the result ``steps`` times never exceeds ε at
    δ; never below ε/steps. Each step must be a separate ε₀-DP mechanism of an adaptive
    composition (a sparse-vector run with one noisy threshold for several discoveries is
    not: see :class:`~ragprivacy.dp.AboveThreshold` ``resample_threshold``).

    At the setting of the dp-rag of sarus-tech (ε = 1 over T = 100 voted tokens,
    δ = 10⁻³) each token gets 0.0390, 3.9× the pure ε/T = 0.01:

    >>> round(calibrate_pure_steps(1.0, 1e-3, 100), 4)
    0.039
    >>> calibrate_pure_steps(1.0, 0.0, 100)
    0.01
    """
    from ragprivacy.dp.accounting import optimal_pure_composition

    epsilon, delta = _check_target(epsilon, delta)
    steps = check_positive_int("steps", steps)
    lo = epsilon / steps
    while steps * lo > epsilon:  # ε/steps can round up by an ulp: never overshoot
        lo = math.nextafter(lo, 0.0)
    if delta == 0:
        return lo
    hi = 2 * lo
    while optimal_pure_composition(hi, steps, delta) <= epsilon:
        lo, hi = hi, 2 * hi
        if hi > 1e6 * epsilon:  # δ so large that almost any ε₀ fits: refuse
            raise ConfigError(
                f"delta={delta!r} is too large to calibrate {steps} steps to "
                f"epsilon={epsilon!r}; use a delta well below 1/steps."
            )
    while hi - lo > 1e-12 * lo:
        mid = (lo + hi) / 2
        if optimal_pure_composition(mid, steps, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


def max_pure_steps(epsilon: float, delta: float, step_epsilon: float) -> int:
    """The most adaptive ``step_epsilon``-DP mechanisms that are (ε, δ)-DP together.

    ``delta = 0``: ⌊ε/ε₀⌋ (with a 1e-12 tolerance for ε/ε₀ that is an integer up to
    rounding). ``delta > 0``: the largest k whose exact composition at δ
    (:func:`~ragprivacy.dp.accounting.optimal_pure_composition`) is at most ε; never below
    ⌊ε/ε₀⌋. The inverse of :func:`calibrate_pure_steps`; 0 when not even one step fits.

    >>> max_pure_steps(1.0, 0.0, 0.01), max_pure_steps(1.0, 1e-3, 0.039)
    (100, 100)
    """
    from ragprivacy.dp.accounting import optimal_pure_composition

    epsilon, delta = _check_target(epsilon, delta)
    step = check_positive("step_epsilon", step_epsilon)
    basic = int(math.floor(epsilon / step + 1e-12))
    if delta == 0:
        return basic

    def fits(k: int) -> bool:
        return optimal_pure_composition(step, k, delta) <= epsilon * (1 + 1e-12)

    lo = max(basic, 1 if fits(1) else 0)
    if lo == 0:
        return 0
    hi = 2 * lo
    while fits(hi):
        lo, hi = hi, 2 * hi
        if hi > 1e8:
            raise ConfigError(
                f"delta={delta!r} admits more than 10^8 steps of {step!r} within "
                f"epsilon={epsilon!r}; use a smaller delta."
            )
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
