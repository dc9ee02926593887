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
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
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
    "AuditEpsilon",
    "CollusionReport",
    "collusion_epsilon_bound",
    "collusion_epsilon_leading",
    "collusion_epsilon_rdp_closed",
    "collusion_report",
    "epsilon_audit",
    "epsilon_audit_table",
]

COLLUSION_METHODS = ("advanced", "rdp", "pld", "exact", "all")
# PLD is opt-in: it composes k·n losses numerically (≈1 s at k·n = 10^5, ≈5 s at 10^6,
# minutes at 10^7) and, for these Gaussians, only cross-checks the exact route.
DEFAULT_COLLUSION_METHODS: tuple[str, ...] = ("advanced", "rdp", "exact")
TABLE_KS: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100)
TABLE_EPSILONS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)


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
    Fields a method did not compute are ``None``.
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
    if "advanced" in methods:
        fields["eps_k_bound"] = collusion_epsilon_bound(epsilon_acc, delta_acc, k, n, delta)[0]
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
        **fields,
    )


@dataclass(frozen=True, slots=True)
class AuditEpsilon:
    """The verifier's ε_audit of collusion paper eq. (5.2), at final failure δ_policy.

    ``eps_audit_leading`` is (5.2)'s leading term; ``eps_audit_bound`` Thm 3.5's full
    advanced-composition bound at k_max, n, slack δ_comp; ``eps_audit_rdp`` and
    ``eps_audit_exact`` the RDP and exact ε of k_max·n Gaussians at δ_policy.
    """

    epsilon_acc: float
    delta_acc: float
    k_max: int
    n: int
    delta_policy: float
    delta_comp: float
    sigma: float
    eps_audit_leading: float
    eps_audit_bound: float
    eps_audit_rdp: float
    eps_audit_exact: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def epsilon_audit(
    epsilon_acc: float,
    delta_acc: float,
    k_max: int,
    delta_policy: float,
    *,
    n: int = 10_000,
    sensitivity: float = 1.0,
) -> AuditEpsilon:
    """ε_audit of the audit protocol's verification phase, collusion paper eq. (5.2).

    δ_comp = δ_policy − k_max·δ_acc must be > 0 (the policy's well-formedness condition
    δ_policy > k_max·δ_acc, §5.2); an ill-formed policy raises ConfigError.

    >>> a = epsilon_audit(1.0, 1e-6, 50, 5.1e-5)
    >>> round(a.eps_audit_leading, 2), round(a.delta_comp, 12)
    (7.07, 1e-06)
    """
    epsilon_acc = check_positive("epsilon_acc", epsilon_acc)
    delta_acc = check_delta("delta_acc", delta_acc)
    k_max = check_positive_int("k_max", k_max)
    delta_policy = check_delta("delta_policy", delta_policy)
    n = check_positive_int("n", n)
    delta_comp = delta_policy - k_max * delta_acc
    # Guard against float round-off making a policy at the boundary look well formed.
    if delta_comp <= 1e-12 * delta_policy:
        raise ConfigError(
            f"Ill-formed audit policy: delta_policy must exceed k_max*delta_acc "
            f"(= {k_max}*{delta_acc:g} = {k_max * delta_acc:g}); got "
            f"delta_policy={delta_policy!r}. Raise delta_policy or lower k_max."
        )
    sigma = collusion_sigma(epsilon_acc, delta_acc, n, sensitivity)
    event = SelfComposedEvent(GaussianEvent(sigma=sigma, sensitivity=sensitivity), k_max * n)
    return AuditEpsilon(
        epsilon_acc=epsilon_acc,
        delta_acc=delta_acc,
        k_max=k_max,
        n=n,
        delta_policy=delta_policy,
        delta_comp=delta_comp,
        sigma=sigma,
        eps_audit_leading=collusion_epsilon_leading(epsilon_acc, delta_acc, k_max, delta_comp),
        eps_audit_bound=collusion_epsilon_bound(epsilon_acc, delta_acc, k_max, n, delta_comp)[0],
        eps_audit_rdp=rdp_epsilon(event, delta_policy),
        eps_audit_exact=gaussian_epsilon(
            composed_gaussian_mu(sigma, k_max * n, sensitivity), delta_policy
        ),
    )


def epsilon_audit_table(
    ks: Sequence[int] = TABLE_KS,
    epsilons: Sequence[float] = TABLE_EPSILONS,
    *,
    delta_acc: float = 1e-6,
    n: int = 10_000,
    delta_policy: float | None = None,
) -> list[AuditEpsilon]:
    """The ε_audit grid (k × ε_acc) of collusion paper §3.8 (its footnote-3 table).

    With ``delta_policy`` None each cell uses δ_comp = δ_acc (δ_policy = (k+1)δ_acc), the
    setting of the paper's worked figures (3.16 at k = 10, ε_acc = 1, ...).
    """
    rows: list[AuditEpsilon] = []
    for k in ks:
        for eps in epsilons:
            dp = (k + 1) * delta_acc if delta_policy is None else delta_policy
            rows.append(epsilon_audit(eps, delta_acc, k, dp, n=n))
    return rows
