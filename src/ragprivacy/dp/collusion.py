"""Privacy of a k-account coalition (collusion paper §3 and §5.5).

Setting (collusion paper Def. 3.3): each query releases the tenant's score vector plus
N(0, σ²) noise per coordinate; L2 sensitivity Δ (1 for unit-norm embeddings) under the
add/remove/replace-one-document relation; σ calibrated per eq. (3.1) + (3.4) so that the n
queries of one account are (ε_acc, δ_acc)-DP by advanced composition. A coalition of k
accounts is one adaptive analyst with kn queries (Lemma 3.4).

What is computed, and where from:

- ``eps_k_leading`` — the leading term of Thm 3.5, eq. (3.2): √k ε_acc √(log(1/δ)/log(1/δ_acc)).
- ``eps_k_bound`` — the full advanced-composition bound (F.1) with m = kn, at slack δ;
  together with ``delta_joint`` = δ + kδ_acc it is the theorem's rigorous statement.
- ``eps_k_residual_bound`` — leading + kε_acc²/log(1/δ_acc), the explicit residual of App. F.2.
- ``eps_k_rdp`` — Thm 3.9 evaluated numerically (RDP of kn Gaussians, ``dp_accounting``
  conversion); ``eps_k_rdp_closed`` — App. B's intermediate closed form evaluated at the
  σ actually used (eq. 3.4) and δ_joint; ``eps_k_rdp_paper`` — eq. (3.6) as printed,
  leading + kε_acc²/(4 log(1/δ_acc)), which is the intermediate form after App. F.3's
  substitution σ = Δ√(2n log(1/δ_acc))/ε_acc (not eq. 3.4's larger σ).
- ``eps_k_pld`` — the PLD accountant of ``dp_accounting``.
- ``eps_k_exact`` — exact: kn Gaussians with σ compose to one with σ/√(kn).

The numerical ε's (RDP, PLD, exact) are stated at ``delta_joint`` so that every ε in a
report is for the same final failure probability; Gaussian noise has no per-query δ to
absorb, so this is the like-for-like comparison with the paper's (ε_k, δ + kδ_acc).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.dp.accounting import advanced_composition, pld_epsilon, rdp_epsilon
from ragprivacy.dp.calibration import (
    account_sigma_exact,
    check_delta,
    collusion_sigma,
    per_query_budget,
)
from ragprivacy.dp.events import GaussianEvent, SelfComposedEvent
from ragprivacy.dp.gaussian_dp import composed_gaussian_mu, gaussian_epsilon
from ragprivacy.errors import ConfigError

__all__ = [
    "COLLUSION_METHODS",
    "DEFAULT_COLLUSION_METHODS",
    "CollusionReport",
    "collusion_epsilon_bound",
    "collusion_epsilon_leading",
    "collusion_epsilon_rdp_closed",
    "collusion_report",
]

COLLUSION_METHODS = ("advanced", "rdp", "pld", "exact", "all")
# PLD is opt-in: it composes k·n losses numerically (seconds to minutes at large k·n;
# docs/dp.md, "Collusion bounds") and, for these Gaussians, only cross-checks the exact
# route.
DEFAULT_COLLUSION_METHODS: tuple[str, ...] = ("advanced", "rdp", "exact")


def _log_ratio(delta: float, delta_acc: float) -> float:
    return math.log(1 / delta) / math.log(1 / delta_acc)


def collusion_epsilon_leading(
    epsilon_acc: float, delta_acc: float, k: int, delta: float | None = None
) -> float:
    """Leading term of the k-collusion bound, collusion paper Thm 3.5, eq. (3.2).

    ε_k ≈ √k · ε_acc · √(log(1/δ)/log(1/δ_acc)), for the final failure probability
    δ + kδ_acc (δ defaults to δ_acc). n-independent.

    >>> round(collusion_epsilon_leading(1.0, 1e-6, 10), 2)
    3.16
    """
    epsilon_acc = check_positive("epsilon_acc", epsilon_acc)
    delta_acc = check_delta("delta_acc", delta_acc)
    k = check_positive_int("k", k)
    delta = delta_acc if delta is None else check_delta("delta", delta)
    return math.sqrt(k) * epsilon_acc * math.sqrt(_log_ratio(delta, delta_acc))


def collusion_epsilon_bound(
    epsilon_acc: float, delta_acc: float, k: int, n: int, delta: float | None = None
) -> tuple[float, float]:
    """The full bound of Thm 3.5: advanced composition (F.1) of kn queries at (ε_q, δ_q).

    Returns (ε_k, δ_joint) with δ_joint = δ + kδ_acc (collusion paper App. F.2).
    """
    b = per_query_budget(epsilon_acc, delta_acc, n)
    k = check_positive_int("k", k)
    delta = delta_acc if delta is None else check_delta("delta", delta)
    return advanced_composition(b.epsilon, b.delta, k * n, delta)


def collusion_epsilon_rdp_closed(
    sigma: float, k: int, n: int, delta: float, sensitivity: float = 1.0
) -> float:
    """App. B's closed RDP form: Δ√(2kn log(1/δ))/σ + knΔ²/(2σ²) (Thm 3.9 before calibration)."""
    sigma = check_positive("sigma", sigma)
    m = check_positive_int("k", k) * check_positive_int("n", n)
    delta = check_delta("delta", delta)
    d = check_positive("sensitivity", sensitivity)
    return d * math.sqrt(2 * m * math.log(1 / delta)) / sigma + m * d * d / (2 * sigma * sigma)


@dataclass(frozen=True, slots=True)
class CollusionReport:
    """Every ε of a k-coalition, side by side (see the module docstring for each field).

    ``sigma`` is the per-query σ of eq. (3.4); ``sigma_exact`` the σ that makes one
    account exactly (ε_acc, δ_acc)-DP; ``noise_factor`` = sigma / sigma_exact;
    ``eps_acc_exact`` the exact per-account ε the paper's σ actually gives;
    ``eps_k_exact_at_sigma_exact`` the coalition's exact ε had σ been ``sigma_exact``.
    ``classic_sigma_valid`` is False when ε_q ≥ 1, outside the hypothesis of the classic
    Gaussian σ that eq. (3.4) uses (the per-query claim then does not follow).
    Fields a method did not compute are ``None``. ``at_delta`` names the δ each ε is
    stated at: ``delta_joint`` = δ + kδ_acc for the coalition's ε's (not ``delta``, the
    composition slack), the bound's own δ for ``eps_k_bound``, δ_acc for
    ``eps_acc_exact`` and δ_q for ``eps_per_query``.
    """

    epsilon_acc: float
    delta_acc: float
    k: int
    n: int
    delta: float
    sensitivity: float
    eps_per_query: float
    delta_per_query: float
    sigma: float
    sigma_exact: float
    noise_factor: float
    eps_acc_exact: float
    delta_joint: float
    eps_k_leading: float
    eps_k_bound: float | None = None
    eps_k_residual_bound: float | None = None
    eps_k_rdp: float | None = None
    eps_k_rdp_closed: float | None = None
    eps_k_pld: float | None = None
    eps_k_exact: float | None = None
    eps_k_exact_at_sigma_exact: float | None = None
    eps_k_rdp_paper: float | None = None
    classic_sigma_valid: bool = True
    at_delta: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def _methods(method: str | Iterable[str]) -> set[str]:
    items = [method] if isinstance(method, str) else list(method)
    out: set[str] = set()
    for m in items:
        check_choice("method", m, COLLUSION_METHODS)
        out |= {"advanced", "rdp", "pld", "exact"} if m == "all" else {m}
    return out


def collusion_report(
    epsilon_acc: float,
    delta_acc: float,
    k: int,
    n: int,
    *,
    delta: float | None = None,
    sensitivity: float = 1.0,
    method: str | Iterable[str] = DEFAULT_COLLUSION_METHODS,
) -> CollusionReport:
    """The privacy of a k-account coalition under the paper's calibration, by every method.

    Args:
        epsilon_acc: advertised per-account ε.
        delta_acc: advertised per-account δ in (0, 1).
        k: coalition size (accounts).
        n: queries per account in the audit window.
        delta: composition slack δ ≥ δ_acc of Thm 3.5 (default δ_acc).
        sensitivity: L2 sensitivity Δ of a query's score vector.
        method: ``advanced``, ``rdp``, ``pld``, ``exact`` or ``all`` (or several). The
            default leaves out ``pld``, which takes seconds to minutes at large k·n
            (``all`` includes it).

    >>> r = collusion_report(1.0, 1e-6, 10, 10_000, method="exact")
    >>> round(r.eps_k_leading, 2), round(r.sigma), round(r.sigma_exact)
    (3.16, 3584, 422)
    """
    epsilon_acc = check_positive("epsilon_acc", epsilon_acc)
    delta_acc = check_delta("delta_acc", delta_acc)
    k = check_positive_int("k", k)
    n = check_positive_int("n", n)
    delta = delta_acc if delta is None else check_delta("delta", delta)
    if delta < delta_acc:
        raise ConfigError(
            f"Thm 3.5 needs delta >= delta_acc; got delta={delta!r} < delta_acc={delta_acc!r}. "
            f"Raise delta."
        )
    sensitivity = check_positive("sensitivity", sensitivity)
    delta_joint = delta + k * delta_acc
    if delta_joint >= 1:
        raise ConfigError(
            f"The joint failure probability delta + k*delta_acc = {delta_joint:g} is not < 1; "
            f"lower delta, delta_acc or k."
        )
    methods = _methods(method)
    budget = per_query_budget(epsilon_acc, delta_acc, n)
    sigma = collusion_sigma(epsilon_acc, delta_acc, n, sensitivity)
    sigma_exact = account_sigma_exact(epsilon_acc, delta_acc, n, sensitivity)
    leading = collusion_epsilon_leading(epsilon_acc, delta_acc, k, delta)
    fields: dict[str, Any] = {}
    at_delta: dict[str, float] = {
        "eps_per_query": budget.delta,
        "eps_acc_exact": delta_acc,
        "eps_k_leading": delta_joint,
    }
    if "advanced" in methods:
        fields["eps_k_bound"], at_delta["eps_k_bound"] = collusion_epsilon_bound(
            epsilon_acc, delta_acc, k, n, delta
        )
        fields["eps_k_residual_bound"] = leading + k * epsilon_acc**2 / math.log(1 / delta_acc)
    event = SelfComposedEvent(GaussianEvent(sigma=sigma, sensitivity=sensitivity), k * n)
    if "rdp" in methods:
        fields["eps_k_rdp"] = rdp_epsilon(event, delta_joint)
        fields["eps_k_rdp_closed"] = collusion_epsilon_rdp_closed(
            sigma, k, n, delta_joint, sensitivity
        )
        fields["eps_k_rdp_paper"] = leading + k * epsilon_acc**2 / (4 * math.log(1 / delta_acc))
    if "pld" in methods:
        fields["eps_k_pld"] = pld_epsilon(event, delta_joint)
    if "exact" in methods:
        fields["eps_k_exact"] = gaussian_epsilon(
            composed_gaussian_mu(sigma, k * n, sensitivity), delta_joint
        )
        fields["eps_k_exact_at_sigma_exact"] = gaussian_epsilon(
            composed_gaussian_mu(sigma_exact, k * n, sensitivity), delta_joint
        )
    return CollusionReport(
        epsilon_acc=epsilon_acc,
        delta_acc=delta_acc,
        k=k,
        n=n,
        delta=delta,
        sensitivity=sensitivity,
        eps_per_query=budget.epsilon,
        delta_per_query=budget.delta,
        sigma=sigma,
        sigma_exact=sigma_exact,
        noise_factor=sigma / sigma_exact,
        eps_acc_exact=gaussian_epsilon(composed_gaussian_mu(sigma, n, sensitivity), delta_acc),
        delta_joint=delta_joint,
        eps_k_leading=leading,
        classic_sigma_valid=budget.epsilon < 1,
        at_delta={
            **at_delta,
            **{name: delta_joint for name in fields if name not in at_delta},
        },
        **fields,
    )
