"""Accountants: from a composition of privacy events to (ε, δ).

Neighbouring relation: add or remove one document (``NeighboringRelation.ADD_OR_REMOVE_ONE``
in ``dp_accounting``; REPLACE_ONE with Gaussian events has an open upstream bug).

Four routes, from loosest to tightest for Gaussian events:

- :func:`advanced_composition` — collusion paper Lemma 3.2 (Dwork, Rothblum & Vadhan 2010).
- :func:`optimal_pure_composition` — exact for k adaptive ε₀-DP mechanisms (Kairouz, Oh &
  Viswanath 2015, Thm 3.3), closed form.
- :func:`rdp_epsilon` — Rényi DP (Mironov 2017; collusion paper Thm 3.9 / App. B),
  conversion to (ε, δ) by ``dp_accounting``.
- :func:`pld_epsilon` — privacy-loss distributions, numerically by ``dp_accounting``.
- :func:`exact_gaussian_epsilon` — exact for Gaussian events (Gaussian DP).

:class:`Accountant` holds a running composition and, optionally, a budget it never lets a
charge overspend (check first, then commit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.dp.calibration import check_delta
from ragprivacy.dp.events import (
    ApproxDpEvent,
    ComposedEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    NoOpEvent,
    PrivacyEvent,
    PureDpEvent,
    SelfComposedEvent,
    ZCdpEvent,
)
from ragprivacy.dp.gaussian_dp import gaussian_epsilon
from ragprivacy.errors import BudgetExhaustedError, ConfigError

if TYPE_CHECKING:  # dp_accounting is imported lazily (it takes over a second to import)
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

__all__ = [
    "event_epsilon",
    "ACCOUNTING_METHODS",
    "DEFAULT_RDP_ORDERS",
    "Accountant",
    "advanced_composition",
    "basic_composition",
    "epsilon_for",
    "exact_gaussian_epsilon",
    "optimal_pure_composition",
    "pld_epsilon",
    "rdp_curve",
    "rdp_epsilon",
    "rdp_to_epsilon",
]

# dp_accounting's default grid of Rényi orders (checked equal in the tests).
DEFAULT_RDP_ORDERS: tuple[float, ...] = (
    tuple(1 + x / 10.0 for x in range(1, 100))
    + tuple(float(a) for a in range(11, 64))
    + (128.0, 256.0, 512.0, 1024.0)
)
ACCOUNTING_METHODS = ("basic", "rdp", "pld", "exact")

# Memory guard for the PLD route: at most this many points on the composed loss grid.
_PLD_MAX_POINTS = 2_000_000


def advanced_composition(
    epsilon: float, delta: float, count: int, delta_slack: float
) -> tuple[float, float]:
    """Advanced composition of ``count`` adaptive (ε₀, δ₀)-DP mechanisms.

    Returns (ε', count·δ₀ + δ') with ε' = √(2m log(1/δ')) ε₀ + m ε₀ (e^ε₀ − 1).
    Source: collusion paper Lemma 3.2 (Dwork, Rothblum & Vadhan 2010; Dwork & Roth Thm 3.20,
    which holds for every ε₀ > 0).

    >>> e, d = advanced_composition(0.01, 1e-9, 100, 1e-6)
    >>> round(e, 4), d
    (0.5357, 1.1e-06)
    """
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    delta = check_positive("delta", delta, allow_zero=True)
    count = check_positive_int("count", count)
    delta_slack = check_delta("delta_slack", delta_slack)
    growth = math.expm1(epsilon) if epsilon < 700 else math.inf  # e^ε₀ overflows past ~709
    eps = math.sqrt(2 * count * math.log(1 / delta_slack)) * epsilon + count * epsilon * growth
    return eps, count * delta + delta_slack


def _log_binomials(count: int) -> np.ndarray:
    """log C(count, l) for l = 0..count."""
    from scipy.special import gammaln

    ell = np.arange(count + 1, dtype=np.float64)
    return np.asarray(gammaln(count + 1.0) - gammaln(ell + 1.0) - gammaln(count - ell + 1.0))


def optimal_pure_composition(epsilon: float, count: int, delta: float) -> float:
    """The exact ε at ``delta`` of ``count`` adaptive ε₀-DP mechanisms (ε₀ = ``epsilon``).

    The composition of k ε₀-DP mechanisms is dominated by k independent binary randomized
    responses (Kairouz, Oh & Viswanath 2015, Thm 3.3; Murtagh & Vadhan 2016), whose
    privacy loss is (k − 2l)ε₀ with probability C(k, l) p^{k−l} q^l under one input,
    p = e^ε₀/(1 + e^ε₀), q = 1 − p. Its privacy profile

        δ(ε) = P[L > ε] − e^ε Q[L > ε]    (Q: the same loss under the other input)

    is piecewise of the form A − e^ε B between consecutive loss values, so the smallest ε
    with δ(ε) ≤ δ is found exactly in O(k). The result is the tightest (ε, δ) statement
    any accountant can make from the pure ε₀ alone (a :func:`pld_epsilon` of the same
    composition is this plus its pessimistic rounding). ``delta = 0`` gives k·ε₀.

    >>> round(optimal_pure_composition(0.038086, 100, 1e-3), 4)  # vs k·ε₀ = 3.8086
    0.9721
    >>> optimal_pure_composition(0.5, 4, 0.0)
    2.0
    """
    epsilon = check_positive("epsilon", epsilon, allow_zero=True)
    count = check_positive_int("count", count, allow_zero=True)
    delta = check_positive("delta", delta, allow_zero=True)
    if delta >= 1:
        raise ConfigError(f"The 'delta' parameter must be in [0, 1); got {delta!r}.")
    if count == 0 or epsilon == 0:
        return 0.0
    if delta == 0:
        return count * epsilon
    log_c = _log_binomials(count)
    ell = np.arange(count + 1, dtype=np.float64)
    log_p = -math.log1p(math.exp(-epsilon))  # log e^ε₀/(1 + e^ε₀)
    log_q = -epsilon + log_p  # log 1/(1 + e^ε₀)
    loss = (count - 2 * ell) * epsilon  # decreasing in l
    mass_p = np.cumsum(np.exp(log_c + (count - ell) * log_p + ell * log_q))  # P[l' ≤ l]
    log_mass_q = np.logaddexp.accumulate(log_c + ell * log_p + (count - ell) * log_q)
    # δ at each loss value L_j (j ≥ 1): only the terms l < j are positive there.
    at_points = mass_p[:-1] - np.exp(loss[1:] + log_mass_q[:-1])
    above = np.flatnonzero(at_points > delta)
    if above.size == 0:  # δ already met at the smallest loss: ε = 0 suffices
        return 0.0
    j = int(above[0])  # δ(L_{j+1}) > δ ≥ δ(L_j): ε lies in [L_{j+1}, L_j]
    eps = math.log(mass_p[j] - delta) - log_mass_q[j]
    return float(max(min(max(eps, loss[j + 1]), loss[j]), 0.0))


def basic_composition(event: PrivacyEvent) -> tuple[float, float]:
    """Sum of ε and δ over the leaves (pure, approximate, Laplace and discrete Laplace only).

    Source: Dwork & Roth 2014, Thm 3.16.
    """
    eps = delta = 0.0
    for leaf, count in event.flatten():
        if isinstance(leaf, NonPrivateEvent):
            eps = math.inf
        elif isinstance(leaf, PureDpEvent | LaplaceEvent | DiscreteLaplaceEvent):
            eps += count * leaf.epsilon
        elif isinstance(leaf, ApproxDpEvent):
            eps += count * leaf.epsilon
            delta += count * leaf.delta
        else:
            raise ConfigError(
                f"Basic composition needs pure or approximate DP events; got "
                f"{type(leaf).__name__}. Use method 'rdp', 'pld' or 'exact'."
            )
    return eps, min(delta, 1.0)


def _rr_rdp(epsilon: float, alpha: np.ndarray) -> np.ndarray:
    """Exact RDP of binary randomized response with parameter ε (dominates all ε-DP)."""
    log_p = -math.log1p(math.exp(-epsilon))
    log_q = -math.log1p(math.exp(epsilon))
    a = alpha * log_p + (1 - alpha) * log_q
    b = alpha * log_q + (1 - alpha) * log_p
    return np.asarray(np.logaddexp(a, b) / (alpha - 1))


def _laplace_rdp(b: float, alpha: np.ndarray) -> np.ndarray:
    """RDP of the Laplace mechanism with scale/sensitivity b (Mironov 2017, Prop. 6)."""
    t1 = np.log(alpha / (2 * alpha - 1)) + (alpha - 1) / b
    t2 = np.log((alpha - 1) / (2 * alpha - 1)) - alpha / b
    return np.asarray(np.logaddexp(t1, t2) / (alpha - 1))


def _discrete_laplace_rdp(t: float, sensitivity: int, alpha: np.ndarray) -> np.ndarray:
    """Exact RDP of discrete Laplace noise P(x) ∝ e^{−|x|/t} under an integer shift Δ.

    D_α = log(Σ_x P(x)^α P(x − Δ)^{1−α})/(α − 1), summed in closed form over x ≤ 0,
    0 < x < Δ and x ≥ Δ (with q = e^{−1/t}, c = (1 − q)/(1 + q)):
    c[q^{(1−α)Δ}/(1 − q) + q^{αΔ}/(1 − q) + q^{(1−α)Δ} Σ_{x=1}^{Δ−1} q^{(2α−1)x}].
    For Δ = 1 it equals the randomized-response curve with ε = 1/t.
    """
    lq = -1.0 / t  # log q
    log_c = math.log(-math.expm1(lq)) - math.log1p(math.exp(lq))
    log_1mq = math.log(-math.expm1(lq))
    d = float(sensitivity)
    parts = [(1 - alpha) * d * lq - log_1mq, alpha * d * lq - log_1mq]
    if sensitivity > 1:
        lr = (2 * alpha - 1) * lq  # log r, r = q^{2α−1} < 1
        geo = lr + np.log(-np.expm1((d - 1) * lr)) - np.log(-np.expm1(lr))
        parts.append((1 - alpha) * d * lq + geo)
    total = parts[0]
    for part in parts[1:]:
        total = np.logaddexp(total, part)
    return np.asarray((log_c + total) / (alpha - 1))


def rdp_curve(event: PrivacyEvent, orders: Sequence[float] = DEFAULT_RDP_ORDERS) -> np.ndarray:
    """The Rényi DP curve ρ(α) of ``event`` at ``orders`` (all > 1), composed additively.

    Per leaf: Gaussian αΔ²/(2σ²) (collusion paper App. B, R1); Laplace (Mironov 2017,
    Prop. 6); discrete Laplace: its exact curve (:class:`DiscreteLaplaceEvent`); pure ε:
    the exact curve of randomized response, which dominates every ε-DP
    mechanism, capped by ε and by αε²/2 (Bun & Steinke 2016); zCDP ρα. Approximate-DP
    events with δ > 0 have no RDP curve and are refused.
    """
    alpha = np.asarray(orders, dtype=float)
    if alpha.ndim != 1 or alpha.size == 0 or np.any(alpha <= 1) or not np.all(np.isfinite(alpha)):
        raise ConfigError(f"RDP orders must be finite numbers > 1; got {list(orders)!r}.")
    total = np.zeros_like(alpha)
    for leaf, count in event.flatten():
        if isinstance(leaf, NonPrivateEvent):  # no guarantee: no finite curve
            curve = np.full_like(alpha, math.inf)
        elif isinstance(leaf, GaussianEvent):
            curve = alpha * leaf.mu**2 / 2
        elif isinstance(leaf, DiscreteLaplaceEvent):
            curve = np.minimum(
                _discrete_laplace_rdp(leaf.scale, int(leaf.sensitivity), alpha), leaf.epsilon
            )
        elif isinstance(leaf, LaplaceEvent):
            curve = np.minimum(_laplace_rdp(leaf.scale / leaf.sensitivity, alpha), leaf.epsilon)
        elif isinstance(leaf, PureDpEvent) or (isinstance(leaf, ApproxDpEvent) and leaf.delta == 0):
            e = leaf.epsilon
            curve = np.minimum(np.minimum(_rr_rdp(e, alpha), e), alpha * e * e / 2)
        elif isinstance(leaf, ZCdpEvent):
            curve = alpha * leaf.rho
        else:
            raise ConfigError(
                f"{type(leaf).__name__} has no Rényi DP curve; use method 'basic' or advanced "
                f"composition for approximate-DP events."
            )
        total += count * curve
    return total


def rdp_to_epsilon(
    orders: Sequence[float], rdp: Sequence[float] | np.ndarray, delta: float
) -> float:
    """Convert an RDP curve to ε at ``delta`` (``dp_accounting``'s tight conversion)."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

    delta = check_delta("delta", delta)
    eps, _ = rdp_lib.compute_epsilon(list(orders), list(rdp), delta)
    return float(eps)


def rdp_epsilon(
    event: PrivacyEvent, delta: float, orders: Sequence[float] = DEFAULT_RDP_ORDERS
) -> float:
    """ε at ``delta`` by the Rényi DP route (collusion paper Thm 3.9, computed numerically).

    Gaussian and Laplace leaves agree with ``dp_accounting.rdp.RdpAccountant`` (tested).
    """
    return rdp_to_epsilon(orders, rdp_curve(event, orders), delta)


def _pld_width(event: PrivacyEvent) -> float:
    """A rough width of the composed privacy-loss support (for the memory guard)."""
    mean = var = width = 0.0
    for leaf, count in event.flatten():
        if isinstance(leaf, GaussianEvent):
            mu = leaf.mu
            mean += count * mu * mu / 2
            var += count * mu * mu
        elif isinstance(leaf, LaplaceEvent | DiscreteLaplaceEvent | PureDpEvent | ApproxDpEvent):
            e = leaf.epsilon
            width += min(2 * count * e, count * e * e / 2 + 12 * e * math.sqrt(count))
    return mean + 12 * math.sqrt(var) + width


def _to_pld(event: PrivacyEvent, interval: float) -> pld_lib.PrivacyLossDistribution:
    from dp_accounting.pld import common as pld_common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    if isinstance(event, NoOpEvent):
        return pld_lib.identity(value_discretization_interval=interval)
    if isinstance(event, GaussianEvent):
        return pld_lib.from_gaussian_mechanism(
            event.sigma,
            sensitivity=event.sensitivity,
            value_discretization_interval=interval,
        )
    if isinstance(event, DiscreteLaplaceEvent):
        return pld_lib.from_discrete_laplace_mechanism(
            1.0 / event.scale,
            sensitivity=int(event.sensitivity),
            value_discretization_interval=interval,
        )
    if isinstance(event, LaplaceEvent):
        return pld_lib.from_laplace_mechanism(
            event.scale, sensitivity=event.sensitivity, value_discretization_interval=interval
        )
    if isinstance(event, PureDpEvent | ApproxDpEvent):
        params = pld_common.DifferentialPrivacyParameters(
            event.epsilon, getattr(event, "delta", 0.0)
        )
        return pld_lib.from_privacy_parameters(params, value_discretization_interval=interval)
    if isinstance(event, SelfComposedEvent):
        if event.count == 0:
            return pld_lib.identity(value_discretization_interval=interval)
        return _to_pld(event.event, interval).self_compose(event.count)
    if isinstance(event, ComposedEvent):
        parts = [_to_pld(e, interval) for e in event.events]
        if not parts:
            return pld_lib.identity(value_discretization_interval=interval)
        out = parts[0]
        for p in parts[1:]:
            out = out.compose(p)
        return out
    raise ConfigError(f"{type(event).__name__} is not supported by the PLD accountant.")


def pld_epsilon(
    event: PrivacyEvent, delta: float, *, value_discretization_interval: float = 1e-4
) -> float:
    """ε at ``delta`` from ``dp_accounting``'s privacy-loss distributions (pessimistic).

    Every composition is carried out numerically on the loss grid (no closed-form
    shortcut), so the result is a genuine cross-check of the exact route. The grid is
    refined for Gaussians with a small per-release loss and widened automatically when
    the composed loss would need more than 2·10⁶ grid points (small noise multipliers
    composed many times exhaust memory otherwise); a wider interval keeps the estimate an
    upper bound.
    """
    delta = check_delta("delta", delta)
    interval = check_positive("value_discretization_interval", value_discretization_interval)
    # Gaussians with large σ have a tiny per-release loss; a grid 100× finer than μ keeps
    # the pessimistic rounding from piling up over many compositions (~1e-4 relative).
    mus = [leaf.mu for leaf, _ in event.flatten() if isinstance(leaf, GaussianEvent)]
    if mus:
        interval = min(interval, min(mus) / 100)
    interval = max(interval, _pld_width(event) / _PLD_MAX_POINTS)
    return float(_to_pld(event, interval).get_epsilon_for_delta(delta))


def exact_gaussian_epsilon(event: PrivacyEvent, delta: float) -> float:
    """Exact ε at ``delta`` for a composition of Gaussian events (Gaussian DP).

    Gaussians with μ_i compose exactly to μ = √(Σ μ_i²)-GDP (Dong, Roth & Su 2022), whose
    (ε, δ) curve is that of one Gaussian mechanism (Balle & Wang 2018, Thm 8).

    >>> from ragprivacy.dp.events import SelfComposedEvent, GaussianEvent
    >>> round(exact_gaussian_epsilon(SelfComposedEvent(GaussianEvent(100.0), 10_000), 1e-5), 4)
    4.3772
    """
    mu_sq = _gaussian_mu_sq(event)
    if mu_sq == 0 or math.isinf(mu_sq):
        return mu_sq
    return gaussian_epsilon(math.sqrt(mu_sq), delta)


def _gaussian_mu_sq(event: PrivacyEvent) -> float:
    """Σ count·μ² over the Gaussian leaves of ``event`` (the exact route's running total)."""
    mu_sq = 0.0
    for leaf, count in event.flatten():
        if isinstance(leaf, NonPrivateEvent):
            return math.inf
        if not isinstance(leaf, GaussianEvent):
            raise ConfigError(
                f"Exact accounting covers Gaussian events only; got {type(leaf).__name__}. "
                f"Use method 'pld' or 'rdp'."
            )
        mu_sq += count * leaf.mu**2
    return mu_sq


def epsilon_for(event: PrivacyEvent, delta: float, method: str = "rdp") -> float:
    """ε at ``delta`` for ``event`` by ``method`` (``basic``, ``rdp``, ``pld`` or ``exact``).

    An event that composes a :class:`NonPrivateEvent` has no guarantee: ε = ∞ by every
    method.
    """
    method = check_choice("method", method, ACCOUNTING_METHODS)
    if not event.guaranteed:
        return math.inf
    if method == "basic":
        eps, d = basic_composition(event)
        if d > check_delta("delta", delta):
            raise ConfigError(
                f"Basic composition gives delta={d:g}, above the requested delta={delta!r}; "
                f"ask for a larger delta."
            )
        return eps
    if method == "rdp":
        return rdp_epsilon(event, delta)
    if method == "pld":
        return pld_epsilon(event, delta)
    return exact_gaussian_epsilon(event, delta)


_PURE_LEAVES = (PureDpEvent, LaplaceEvent, DiscreteLaplaceEvent)

# A δ > 0 route for pure leaves is reported only if it lowers ε by more than this share
# of the pure sum: a δ is not worth trading for a rounding-level gain (one ε-DP step at
# δ = 1e-6 is (ε − 1e-6, 1e-6)-DP, which says no more than (ε, 0)).
_PURE_GAIN = 1e-3


@lru_cache(maxsize=512)
def _tight_pure_epsilon(leaves: frozenset[tuple[PrivacyEvent, int]], delta: float) -> float:
    """ε at ``delta`` > 0 of a composition of pure leaves by its tightest route (cached:
    answers of one system repeat the same composition)."""
    epsilons = {float(leaf.epsilon) for leaf, _ in leaves}  # type: ignore[attr-defined]
    best = math.inf
    if len(epsilons) == 1:  # one ε₀: the exact closed form (KOV)
        best = optimal_pure_composition(epsilons.pop(), sum(c for _, c in leaves), delta)
    if any(not isinstance(leaf, PureDpEvent) for leaf, _ in leaves) or math.isinf(best):
        # Laplace curves are below randomized response's; mixed ε₀'s have no closed form
        event = ComposedEvent(tuple(SelfComposedEvent(leaf, c) for leaf, c in leaves))
        best = min(best, pld_epsilon(event, delta))
    return best


def event_epsilon(event: PrivacyEvent, delta: float) -> tuple[float, float]:
    """One (ε, δ) for ``event`` by the tightest route that applies (what answers report).

    Routes, by the leaves of ``event``:

    - no guarantee: (∞, 0); nothing spent: (0, 0);
    - pure-DP leaves only (pure ε, Laplace, discrete Laplace): at ``delta = 0`` their sum
      (Dwork & Roth Thm 3.16; exact for pure DP), δ = 0. At ``delta > 0`` also the
      tight composition at ``delta``: for one ε₀ repeated k times the exact
      :func:`optimal_pure_composition` (Kairouz, Oh & Viswanath 2015), otherwise the PLD
      accountant (:func:`pld_epsilon`; Laplace leaves by their own loss distribution).
      The smaller ε is returned with its δ: (tight, ``delta``) when it is below the sum by
      more than 0.1 %, else (sum, 0). Results are cached per (leaves, δ);
    - Gaussian leaves only: exact Gaussian DP at ``delta``;
    - pure and Gaussian leaves: the smaller of Rényi DP and the pure sum plus the
      Gaussians' exact ε (sequential composition of the two parts; it wins when the pure
      ε is large);
    - anything else: Rényi DP at ``delta``.

    >>> from ragprivacy.dp.events import GaussianEvent, PureDpEvent, SelfComposedEvent, compose
    >>> event_epsilon(compose([PureDpEvent(1.0), PureDpEvent(0.5)]), 1e-6)
    (1.5, 0.0)
    >>> eps, d = event_epsilon(SelfComposedEvent(PureDpEvent(0.038086), 100), 1e-3)
    >>> round(eps, 4), d  # the pure sum would be 3.8086
    (0.9721, 0.001)
    >>> event_epsilon(SelfComposedEvent(PureDpEvent(0.038086), 100), 0.0)[1]
    0.0
    >>> round(event_epsilon(GaussianEvent(4.0), 1e-6)[0], 4)
    1.0607
    """
    if not event.guaranteed:
        return math.inf, 0.0
    counted = event.flatten()
    leaves = [leaf for leaf, _ in counted]
    if not leaves:
        return 0.0, 0.0
    pure = [leaf for leaf in leaves if isinstance(leaf, _PURE_LEAVES)]
    if len(pure) == len(leaves):
        total = basic_composition(event)[0]
        if delta == 0 or total == 0:
            return total, 0.0
        delta = check_delta("delta", delta)
        tight = _tight_pure_epsilon(frozenset(counted), delta)
        if tight < total * (1 - _PURE_GAIN):
            return tight, delta
        return total, 0.0
    gaussian = [leaf for leaf in leaves if isinstance(leaf, GaussianEvent)]
    if len(gaussian) == len(leaves):
        return exact_gaussian_epsilon(event, delta), float(delta)
    rdp = rdp_epsilon(event, delta)
    if len(pure) + len(gaussian) == len(leaves):
        split = basic_composition(
            ComposedEvent(tuple(SelfComposedEvent(e, c) for e, c in counted if e in pure))
        )[0] + exact_gaussian_epsilon(
            ComposedEvent(tuple(SelfComposedEvent(e, c) for e, c in counted if e in gaussian)),
            delta,
        )
        rdp = min(rdp, split)
    return rdp, float(delta)


class Accountant:
    """A running composition of events, with an optional (ε, δ) budget.

    :meth:`charge` checks that the composition *including* the new event stays within
    the budget and only then records it; otherwise it raises ``BudgetExhaustedError``
    having changed nothing (dp_accounting's check-then-commit discipline).

    The ``rdp`` and ``exact`` methods keep a running total (the Rényi curve, or Σμ²), so a
    charge costs the same whatever the history; ``basic`` sums the leaves and ``pld``
    recomposes the whole history numerically on every query (use it for reports, not in
    a serving loop).

    >>> acc = Accountant(method="exact", epsilon_budget=1.0, delta=1e-6)
    >>> acc.charge(GaussianEvent(sigma=10.0))
    >>> round(acc.epsilon(), 3)
    0.397
    """

    def __init__(
        self,
        *,
        method: str = "rdp",
        epsilon_budget: float | None = None,
        delta: float = 1e-6,
    ) -> None:
        self.method = check_choice("method", method, ACCOUNTING_METHODS)
        self.delta = check_delta("delta", delta)
        self.epsilon_budget = (
            None if epsilon_budget is None else check_positive("epsilon_budget", epsilon_budget)
        )
        self._events: list[PrivacyEvent] = []
        self._rdp = np.zeros(len(DEFAULT_RDP_ORDERS))
        self._mu_sq = 0.0

    @property
    def event(self) -> PrivacyEvent:
        """Everything charged so far, as one composed event."""
        return ComposedEvent(tuple(self._events))

    def _increment(self, event: PrivacyEvent) -> np.ndarray | float | None:
        """The new event's contribution to the running total (None: no running total)."""
        if self.method == "rdp":
            return rdp_curve(event)
        if self.method == "exact":
            return float(_gaussian_mu_sq(event))
        return None

    def _epsilon_with(
        self, increment: np.ndarray | float | None, extra: PrivacyEvent | None, delta: float
    ) -> float:
        if self.method == "rdp":
            total = self._rdp if increment is None else self._rdp + increment
            if not np.any(total):
                return 0.0
            if np.isinf(total).all():  # a step without guarantee was composed
                return math.inf
            return rdp_to_epsilon(DEFAULT_RDP_ORDERS, total, delta)
        if self.method == "exact":
            mu_sq = self._mu_sq + (0.0 if increment is None else float(increment))
            if mu_sq == 0 or math.isinf(mu_sq):
                return mu_sq
            return gaussian_epsilon(math.sqrt(mu_sq), check_delta("delta", delta))
        events = self._events if extra is None else [*self._events, extra]
        if not events:
            return 0.0
        return epsilon_for(ComposedEvent(tuple(events)), delta, self.method)

    def epsilon(self, delta: float | None = None) -> float:
        """ε spent so far at ``delta`` (the accountant's δ by default)."""
        if not self._events:
            return 0.0
        return self._epsilon_with(None, None, self.delta if delta is None else delta)

    def would_spend(self, event: PrivacyEvent, count: int = 1) -> float:
        """ε after charging ``event`` ``count`` times (nothing is recorded)."""
        count = check_positive_int("count", count)
        new = event if count == 1 else SelfComposedEvent(event, count)
        return self._epsilon_with(self._increment(new), new, self.delta)

    def charge(self, event: PrivacyEvent, count: int = 1) -> None:
        """Record ``event`` (``count`` times) if within budget; else raise, changing nothing."""
        count = check_positive_int("count", count)
        new = event if count == 1 else SelfComposedEvent(event, count)
        increment = self._increment(new)
        if self.epsilon_budget is not None:
            after = self._epsilon_with(increment, new, self.delta)
            if after > self.epsilon_budget * (1 + 1e-12):
                raise BudgetExhaustedError(
                    f"Charging {new.to_dict()} would bring epsilon to {after:.6g} at "
                    f"delta={self.delta:g}, above the budget {self.epsilon_budget:g}; "
                    f"nothing was charged. Lower the query's cost or raise the budget."
                )
        self._events.append(new)
        if self.method == "rdp":
            self._rdp = self._rdp + np.asarray(increment, dtype=float)
        elif self.method == "exact":
            self._mu_sq += float(increment)  # type: ignore[arg-type]
