"""The coalition-size estimator (§5.4) and a small version of its calibration."""

from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.audit import (
    calibrate_estimator,
    coalition_sizes,
    estimate_coalition,
    simulate_window,
)


def test_links_only_distinct_accounts_within_tau() -> None:
    e = np.eye(4)
    v = np.stack([e[0], e[0], e[0], e[1], e[2]])
    accounts = ["a", "a", "b", "c", "d"]
    est = estimate_coalition(v, accounts, theta=0.8)
    assert est.size == 2 and est.accounts == ("a", "b")
    # Same probe, but b's query comes long after a's: outside tau, no link.
    assert estimate_coalition(v, accounts, theta=0.8, ts=[0, 1, 500, 2, 3], tau=10).size == 1
    # One account repeating itself is not a coalition.
    assert estimate_coalition(np.stack([e[0]] * 3), ["a"] * 3, theta=0.9).size == 1


@pytest.mark.parametrize("pattern", ["P-A", "P-B", "P-C"])
def test_patterns_are_recovered_exactly_at_theta_080(pattern: str) -> None:
    v, names = simulate_window(k_true=5, pattern=pattern, rng=3)
    assert coalition_sizes(v, names, [0.8])[0] == 5
    null_v, null_names = simulate_window(rng=4)
    assert coalition_sizes(null_v, null_names, [0.2, 0.95]) == [30, 1]


@pytest.mark.statistical
def test_small_calibration_lands_near_the_paper() -> None:
    r = calibrate_estimator(trials=3, k_values=(2, 10), rng=11)
    assert r.null_fpr[0] == 1.0 and r.null_fpr[-1] == 0.0
    assert r.theta_star is not None and 0.75 <= r.theta_star <= 0.85  # paper: 0.80
    for pattern in ("P-A", "P-B", "P-C"):
        assert r.mean_k_hat[pattern][0] == 30  # merged graph at theta = 0.20
        for stats in r.at_theta_star[pattern].values():
            assert stats["tpr"] == 1.0 and stats["exact_recovery"] == 1.0
