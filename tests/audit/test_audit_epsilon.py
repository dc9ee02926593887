"""ε_audit of collusion paper eq. (5.2): the worked figures of §3.8 and the policy check."""

from __future__ import annotations

import math

import pytest

from ragprivacy.audit import epsilon_audit, epsilon_audit_table
from ragprivacy.errors import ConfigError


@pytest.mark.parametrize(
    ("k", "eps_acc", "expected"),
    [(10, 1.0, 3.16), (50, 1.0, 7.07), (50, 2.0, 14.14), (100, 1.0, 10.00)],
)
def test_worked_figures_of_section_3_8(k: int, eps_acc: float, expected: float) -> None:
    # the policy view of the collusion bound (delta_comp = delta_acc)
    a = epsilon_audit(eps_acc, 1e-6, k, (k + 1) * 1e-6)
    assert round(a.eps_audit_leading, 2) == expected


def test_audit_epsilon_policy_check() -> None:
    a = epsilon_audit(1.0, 1e-6, 50, 1e-4)
    assert a.delta_comp == pytest.approx(1e-4 - 50e-6)
    assert a.eps_audit_exact <= a.eps_audit_rdp <= a.eps_audit_bound
    # a larger delta_comp than delta_acc makes the leading term smaller than sqrt(k) eps
    assert a.eps_audit_leading < math.sqrt(50)
    with pytest.raises(ConfigError, match="Ill-formed audit policy"):
        epsilon_audit(1.0, 1e-6, 50, 50e-6)
    with pytest.raises(ConfigError, match="Ill-formed audit policy"):
        epsilon_audit(1.0, 1e-6, 50, 1e-5)
    with pytest.raises(ConfigError, match="delta_acc"):
        epsilon_audit(1.0, 1.0, 5, 0.5)


def test_table_grid() -> None:
    rows = epsilon_audit_table([10, 50, 100], [1.0, 2.0])
    assert len(rows) == 6
    got = {(r.k_max, r.epsilon_acc): round(r.eps_audit_leading, 2) for r in rows}
    assert got[(10, 1.0)] == 3.16
    assert got[(50, 2.0)] == 14.14
    assert got[(100, 1.0)] == 10.0
