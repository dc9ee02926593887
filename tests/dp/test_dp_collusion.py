"""The collusion paper's worked figures (§3.8), eq. (5.2) and the MIA predictions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragprivacy.dp import (
    collusion_epsilon_leading,
    collusion_report,
    max_auc_gdp,
    mia_advantage_bound,
    mia_advantage_exact,
    mia_advantage_lower,
    mia_advantage_upper,
    mia_prediction,
    predicted_auc,
    predicted_auc_closed,
)


@pytest.mark.parametrize(
    ("k", "eps_acc", "expected"),
    [(10, 1.0, 3.16), (50, 1.0, 7.07), (50, 2.0, 14.14), (100, 1.0, 10.00)],
)
def test_worked_figures_of_section_3_8(k: int, eps_acc: float, expected: float) -> None:
    assert round(collusion_epsilon_leading(eps_acc, 1e-6, k), 2) == expected
    r = collusion_report(eps_acc, 1e-6, k, 10_000, method="advanced")
    assert round(r.eps_k_leading, 2) == expected


def test_predicted_auc_rises_from_0531_to_0638() -> None:
    aucs = [predicted_auc(4.0, 1e-6, 10_000, k) for k in (1, 2, 5, 10, 20)]
    assert round(aucs[0], 3) == 0.531
    assert round(aucs[-1], 3) == 0.638
    assert aucs == sorted(aucs)
    for k in (1, 5, 20):  # (3.10) at the (3.4) sigma equals the closed form (3.11)
        assert predicted_auc(4.0, 1e-6, 10_000, k) == pytest.approx(
            predicted_auc_closed(4.0, 1e-6, 10_000, k), rel=1e-12
        )


def test_auc_prediction_matches_a_monte_carlo_of_the_construction() -> None:
    """Thm 3.6's adversary: pooled mean of kn noisy scores; the pooled mean is one Gaussian."""
    rng = np.random.default_rng(3)
    k, n, eps = 5, 10_000, 4.0
    p = mia_prediction(eps, 1e-6, n, k)
    s = p.sigma / math.sqrt(k * n)
    trials = 4000
    member = 1.0 + s * rng.standard_normal(trials)
    non = 0.0 + s * rng.standard_normal(trials)
    auc = (member[:, None] > non[None, :]).mean()
    # Mann-Whitney SE at AUC ~ 0.6 with 4000 x 4000 is < 0.0065; 5 SE -> false alarm < 1e-6
    assert abs(auc - p.auc) < 0.033


def test_report_fields_and_cross_checks() -> None:
    r = collusion_report(1.0, 1e-6, 10, 10_000, method="all")
    assert collusion_report(1.0, 1e-6, 10, 10_000).eps_k_pld is None  # PLD is opt-in
    d = r.to_dict()
    for key in (
        "eps_per_query",
        "delta_per_query",
        "sigma",
        "sigma_exact",
        "eps_k_leading",
        "eps_k_bound",
        "eps_k_rdp",
        "eps_k_pld",
        "eps_k_exact",
        "delta_joint",
    ):
        assert d[key] is not None, key
    assert r.delta_joint == pytest.approx(1e-6 + 10 * 1e-6)
    assert r.eps_k_exact <= r.eps_k_pld + 1e-9
    assert r.eps_k_pld == pytest.approx(r.eps_k_exact, rel=1e-3)
    assert r.eps_k_rdp >= r.eps_k_exact
    assert r.eps_k_rdp <= r.eps_k_rdp_closed + 1e-9
    assert r.eps_k_bound >= r.eps_k_leading
    assert r.eps_k_bound >= r.eps_k_exact
    # the residual bound of App. F.2 holds (eps_q <= 1)
    assert r.eps_k_bound <= r.eps_k_residual_bound
    # the paper's sigma adds ~8.5x the noise one account needs; the account's exact eps ~ 0.1
    assert 8.0 < r.noise_factor < 9.0
    assert r.eps_acc_exact == pytest.approx(0.1014, abs=1e-3)
    # with exactly calibrated noise the coalition's exact eps is near sqrt(k)-ish, above eps_acc
    assert 1.0 < r.eps_k_exact_at_sigma_exact < r.eps_k_leading


@pytest.mark.parametrize("k", [1, 3, 30])
def test_advanced_bound_dominates_exact_for_any_k(k: int) -> None:
    r = collusion_report(2.0, 1e-5, k, 500, method=["advanced", "exact"])
    assert r.eps_k_bound >= r.eps_k_exact
    assert r.eps_k_rdp is None and r.eps_k_pld is None


def test_mia_bounds() -> None:
    assert mia_advantage_bound(0.0) == 0.0
    assert mia_advantage_bound(1.0, 0.0) == pytest.approx(math.tanh(0.5))
    up = [mia_advantage_upper(1.0, 1e-6, k) for k in (1, 10, 100)]
    assert up == sorted(up)
    assert up[1] == pytest.approx(math.tanh(math.sqrt(10) / 2) + 11e-6, rel=1e-9)
    # the linearised lower bound (3.9) lies below the construction's exact advantage
    for k in (1, 10, 100):
        lo = mia_advantage_lower(2.0, 1e-6, 10_000, k, delta_gap=0.1)
        assert 0 < lo <= mia_advantage_exact(2.0, 1e-6, 10_000, k, delta_gap=0.1)
        assert lo < 0.025  # §3.8: below 0.025 across the grid at gap 0.1
    # AUC predictions never exceed the GDP ceiling of the exact coalition mechanism
    p = mia_prediction(4.0, 1e-6, 10_000, 20)
    assert p.auc <= max_auc_gdp(math.sqrt(20 * 10_000) / p.sigma) + 1e-12


def test_rdp_paper_form_and_classic_sigma_flag() -> None:
    """eq. 3.6 as printed (F.3 substitutes eq. 3.1's σ) beside the closed form at eq. 3.4's σ."""
    r = collusion_report(1.0, 1e-6, 10, 10_000, method="rdp")
    log_inv = math.log(1e6)
    assert r.eps_k_rdp_paper == pytest.approx(r.eps_k_leading + 10 / (4 * log_inv))
    # the closed form at the paper's (larger) σ is far below its printed eq. 3.6
    assert r.eps_k_rdp <= r.eps_k_rdp_closed < r.eps_k_rdp_paper
    assert r.classic_sigma_valid
    tiny = collusion_report(8.0, 1e-6, 2, 1, method="advanced")
    assert tiny.eps_per_query >= 1 and not tiny.classic_sigma_valid
