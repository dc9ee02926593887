"""ε_audit: what the verifier may certify for a coalition of at most k_max accounts
(collusion paper eq. 5.2, §3.8's table).

The privacy arithmetic (σ calibration, advanced composition, RDP and exact Gaussian DP)
is :mod:`ragprivacy.dp`'s; this module turns an audit policy's parameters into the one
number a verdict states, so that the verifier and the ``ragprivacy dp audit-epsilon``
command share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ragprivacy._validation import check_positive, check_positive_int, check_probability
from ragprivacy.dp import (
    GaussianEvent,
    SelfComposedEvent,
    collusion_epsilon_bound,
    collusion_epsilon_leading,
    collusion_sigma,
    composed_gaussian_mu,
    gaussian_epsilon,
    rdp_epsilon,
)
from ragprivacy.errors import ConfigError

__all__ = ["AuditEpsilon", "epsilon_audit", "epsilon_audit_table"]

# The grid of collusion paper §3.8's footnote-3 table.
TABLE_KS: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100)
TABLE_EPSILONS: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)


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
    delta_acc = check_probability("delta_acc", delta_acc, open_interval=True)
    k_max = check_positive_int("k_max", k_max)
    delta_policy = check_probability("delta_policy", delta_policy, open_interval=True)
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
