"""Calibration and accounting: closed forms against dp_accounting, cross-checks between routes."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp
from hypothesis import given, settings
from hypothesis import strategies as st

from ragprivacy.dp import (
    Accountant,
    ComposedEvent,
    DiscreteLaplaceEvent,
    GaussianEvent,
    LaplaceEvent,
    PureDpEvent,
    PureDpFilter,
    SelfComposedEvent,
    account_sigma_exact,
    advanced_composition,
    calibrate_account_sigma,
    collusion_sigma,
    epsilon_for,
    exact_gaussian_epsilon,
    gaussian_epsilon,
    gaussian_mu,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    pld_epsilon,
    rdp_curve,
    rdp_epsilon,
)
from ragprivacy.dp.calibration import per_query_budget
from ragprivacy.dp.events import ApproxDpEvent, NoOpEvent, ZCdpEvent, event_from_dict
from ragprivacy.dp.gaussian_dp import gaussian_delta
from ragprivacy.errors import BudgetExhaustedError, ConfigError


@pytest.mark.parametrize("mu", [0.05, 0.3, 1.0, 2.5, 6.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-6, 1e-3])
def test_gaussian_epsilon_matches_dp_accounting(mu: float, delta: float) -> None:
    ours = gaussian_epsilon(mu, delta)
    theirs = dp_accounting.get_epsilon_gaussian(1 / mu, delta)
    assert ours == pytest.approx(theirs, rel=1e-7, abs=1e-9)
    if ours > 0:
        assert gaussian_delta(mu, ours) == pytest.approx(delta, rel=1e-6)


@pytest.mark.parametrize(("eps", "delta"), [(0.1, 1e-6), (1.0, 1e-5), (4.0, 1e-9), (10.0, 1e-3)])
def test_analytic_sigma_matches_dp_accounting(eps: float, delta: float) -> None:
    assert gaussian_sigma_analytic(eps, delta, 2.0) == pytest.approx(
        2.0 * dp_accounting.get_sigma_gaussian(eps, delta), rel=1e-7
    )
    assert 1 / gaussian_mu(eps, delta) == pytest.approx(gaussian_sigma_analytic(eps, delta))


def test_analytic_is_tighter_than_classic() -> None:
    for eps in (0.01, 0.1, 0.5, 0.9):
        assert gaussian_sigma_analytic(eps, 1e-6) < gaussian_sigma_classic(eps, 1e-6)
    with pytest.raises(ConfigError, match="epsilon < 1"):
        gaussian_sigma_classic(1.5, 1e-6)
    # the formula as papers print it for ε >= 1, on request only
    large = gaussian_sigma_classic(1.5, 1e-6, 2.0, allow_large_epsilon=True)
    assert large == 2.0 * math.sqrt(2 * math.log(1.25 / 1e-6)) / 1.5
    assert gaussian_sigma_classic(0.5, 1e-6, allow_large_epsilon=True) == gaussian_sigma_classic(
        0.5, 1e-6
    )


def test_per_query_budget_and_paper_sigma() -> None:
    b = per_query_budget(1.0, 1e-6, 10_000)
    assert b.epsilon == pytest.approx(1 / math.sqrt(2 * 10_000 * math.log(1e6)))
    assert b.delta == pytest.approx(1e-10)
    sigma = collusion_sigma(1.0, 1e-6, 10_000)
    # eq. (3.4) is the classic sigma at the per-query budget (3.1)
    assert sigma == pytest.approx(gaussian_sigma_classic(b.epsilon, b.delta))
    assert sigma == pytest.approx(3584.39, abs=0.01)


def test_exact_sigma_is_several_times_smaller_at_paper_setting() -> None:
    paper = collusion_sigma(1.0, 1e-6, 10_000)
    exact = account_sigma_exact(1.0, 1e-6, 10_000)
    assert exact == pytest.approx(422.47, abs=0.05)
    assert 8.0 < paper / exact < 9.0
    # exact sigma really gives (1, 1e-6) for 10^4 composed queries (oracle: PLD)
    ev = SelfComposedEvent(GaussianEvent(exact), 10_000)
    assert pld_epsilon(ev, 1e-6) == pytest.approx(1.0, abs=2e-3)


def test_calibration_methods_order_and_targets() -> None:
    sig = {
        m: calibrate_account_sigma(1.0, 1e-6, 1000, method=m)
        for m in ("paper", "analytic", "rdp", "exact")
    }
    assert sig["exact"] < sig["rdp"] < sig["analytic"] < sig["paper"]
    ev = SelfComposedEvent(GaussianEvent(sig["rdp"]), 1000)
    assert rdp_epsilon(ev, 1e-6) == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ConfigError, match="method"):
        calibrate_account_sigma(1.0, 1e-6, 10, method="magic")


def test_advanced_composition_formula() -> None:
    eps, delta = advanced_composition(0.1, 1e-8, 50, 1e-6)
    assert eps == pytest.approx(math.sqrt(100 * math.log(1e6)) * 0.1 + 50 * 0.1 * math.expm1(0.1))
    assert delta == pytest.approx(50 * 1e-8 + 1e-6)


@pytest.mark.parametrize(("z", "m"), [(50.0, 10_000), (5.0, 100), (1.5, 10)])
def test_routes_are_ordered_for_gaussians(z: float, m: int) -> None:
    """exact <= PLD (pessimistic, close) <= RDP; and the exact value is the PLD's."""
    ev = SelfComposedEvent(GaussianEvent(sigma=z), m)
    delta = 1e-6
    exact = exact_gaussian_epsilon(ev, delta)
    p = pld_epsilon(ev, delta)
    r = rdp_epsilon(ev, delta)
    assert exact <= p + 1e-9
    assert p == pytest.approx(exact, rel=1e-3, abs=1e-4)
    assert r >= exact
    # our RDP curve gives the same epsilon as dp_accounting's RDP accountant
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), m))
    assert r == pytest.approx(acc.get_epsilon(delta), rel=1e-9)


def test_laplace_rdp_and_pld_match_dp_accounting() -> None:
    ev = SelfComposedEvent(LaplaceEvent(scale=4.0, sensitivity=1.0), 20)
    acc = rdp.RdpAccountant()
    acc.compose(ev.to_dp_accounting())
    assert rdp_epsilon(ev, 1e-6) == pytest.approx(acc.get_epsilon(1e-6), rel=1e-6)
    pacc = pld.PLDAccountant()
    pacc.compose(ev.to_dp_accounting())
    assert pld_epsilon(ev, 1e-6) == pytest.approx(pacc.get_epsilon(1e-6), rel=1e-6)
    assert pld_epsilon(ev, 1e-6) <= 20 * 0.25 + 1e-9


def test_pure_event_rdp_never_beats_laplace_of_same_epsilon() -> None:
    """A pure ε event is the worst case of every ε-DP mechanism, Laplace included."""
    orders = [1.5, 2, 4, 8, 32]
    pure = rdp_curve(PureDpEvent(0.7), orders)
    lap = rdp_curve(LaplaceEvent(scale=1 / 0.7), orders)
    assert (pure >= lap - 1e-12).all()
    assert (pure <= 0.7 + 1e-12).all()


def test_exact_refuses_non_gaussian_and_basic_refuses_gaussian() -> None:
    with pytest.raises(ConfigError, match="Gaussian events only"):
        exact_gaussian_epsilon(PureDpEvent(1.0), 1e-6)
    with pytest.raises(ConfigError, match="Basic composition"):
        epsilon_for(GaussianEvent(1.0), 1e-6, "basic")
    assert epsilon_for(ComposedEvent((PureDpEvent(0.5), LaplaceEvent(2.0))), 1e-6, "basic") == 1.0
    with pytest.raises(ConfigError, match="delta"):
        epsilon_for(ApproxDpEvent(1.0, 1e-3), 1e-6, "basic")


def test_pld_memory_guard_keeps_small_noise_bounded() -> None:
    """z = 0.3 composed 500 times exhausts memory at the default grid; the guard widens it."""
    ev = SelfComposedEvent(GaussianEvent(0.3), 500)
    eps = pld_epsilon(ev, 1e-6)
    assert eps >= exact_gaussian_epsilon(ev, 1e-6) - 1e-6
    assert eps == pytest.approx(exact_gaussian_epsilon(ev, 1e-6), rel=0.02)


def test_events_round_trip_and_flatten() -> None:
    ev = ComposedEvent(
        (
            SelfComposedEvent(GaussianEvent(2.0, 0.5), 3),
            LaplaceEvent(1.0),
            PureDpEvent(0.1),
            ApproxDpEvent(0.2, 1e-9),
            ZCdpEvent(0.01),
            NoOpEvent(),
            GaussianEvent(2.0, 0.5),
        )
    )
    assert event_from_dict(ev.to_dict()) == ev
    flat = dict(ev.flatten())
    assert flat[GaussianEvent(2.0, 0.5)] == 4
    with pytest.raises(ConfigError):
        GaussianEvent(sigma=0.0)
    with pytest.raises(ConfigError):
        event_from_dict({"type": "nope"})
    with pytest.raises(ConfigError, match="no dp_accounting"):
        PureDpEvent(1.0).to_dp_accounting()


@settings(max_examples=40, deadline=None)
@given(
    sigma=st.floats(0.5, 200.0),
    m=st.integers(1, 5000),
    extra=st.integers(1, 50),
)
def test_composition_is_monotone(sigma: float, m: int, extra: int) -> None:
    a = SelfComposedEvent(GaussianEvent(sigma), m)
    b = SelfComposedEvent(GaussianEvent(sigma), m + extra)
    assert exact_gaussian_epsilon(a, 1e-6) <= exact_gaussian_epsilon(b, 1e-6)
    assert rdp_epsilon(a, 1e-6) <= rdp_epsilon(b, 1e-6) + 1e-12


def test_accountant_checks_before_commit() -> None:
    acc = Accountant(method="exact", epsilon_budget=1.0, delta=1e-6)
    ev = GaussianEvent(sigma=10.0)
    n_ok = 0
    while True:
        try:
            acc.charge(ev)
        except BudgetExhaustedError as err:
            assert "nothing was charged" in str(err)
            break
        n_ok += 1
    spent = acc.epsilon()
    assert spent <= 1.0
    # one more would overspend; the state did not change after the refusal
    assert acc.would_spend(ev) > 1.0
    assert acc.epsilon() == spent
    # and the count agrees with the exact calibration: n Gaussians at sigma=10
    assert account_sigma_exact(1.0, 1e-6, n_ok) <= 10.0 < account_sigma_exact(1.0, 1e-6, n_ok + 1)
    assert Accountant().epsilon() == 0.0


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -1e-3, float("nan")])
def test_invalid_delta_is_refused(bad: float) -> None:
    with pytest.raises(ConfigError, match="delta"):
        gaussian_epsilon(1.0, bad)
    with pytest.raises(ConfigError, match="delta"):
        per_query_budget(1.0, bad, 10)


def test_default_orders_are_dp_accountings() -> None:
    from dp_accounting.rdp import rdp_privacy_accountant

    from ragprivacy.dp.accounting import DEFAULT_RDP_ORDERS

    assert list(DEFAULT_RDP_ORDERS) == [float(a) for a in rdp_privacy_accountant.DEFAULT_RDP_ORDERS]


def test_dp_package_imports_without_dp_accounting() -> None:
    """``import ragprivacy.dp`` stays light: dp_accounting loads only when used."""
    import subprocess
    import sys

    code = "import sys, ragprivacy.dp; print('dp_accounting' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@settings(max_examples=40, deadline=None)
@given(
    eps=st.floats(0.05, 8.0),
    log_delta=st.floats(-12, -2),
    n=st.integers(1, 100_000),
    method=st.sampled_from(["paper", "exact"]),
)
def test_calibrated_noise_never_overshoots(
    eps: float, log_delta: float, n: int, method: str
) -> None:
    """σ from either calibration gives at most (ε, δ) for n queries (exact oracle)."""
    delta = 10.0**log_delta
    try:
        sigma = calibrate_account_sigma(eps, delta, n, method=method)
    except ConfigError:  # the paper's classic σ refuses a per-query ε >= 1
        assert method == "paper"
        return
    spent = exact_gaussian_epsilon(SelfComposedEvent(GaussianEvent(sigma), n), delta)
    assert spent <= eps * (1 + 1e-9)


# ------------------------------------------------------------ discrete Laplace (secure path)


def _discrete_laplace_rdp_by_sum(t: float, sens: int, alpha: float) -> float:
    from scipy.special import logsumexp

    q = math.exp(-1 / t)
    x = np.arange(-4000, 4001)
    lp0 = math.log((1 - q) / (1 + q)) - np.abs(x) / t
    lp1 = math.log((1 - q) / (1 + q)) - np.abs(x - sens) / t
    return float(logsumexp(alpha * lp0 + (1 - alpha) * lp1) / (alpha - 1))


@pytest.mark.parametrize("t", [0.7, 3.0, 10.0])
@pytest.mark.parametrize("sens", [1, 3])
def test_discrete_laplace_rdp_is_exact(t: float, sens: int) -> None:
    orders = [1.5, 2.0, 8.0, 32.0]
    got = rdp_curve(DiscreteLaplaceEvent(scale=t, sensitivity=sens), orders)
    for a, g in zip(orders, got):
        assert g == pytest.approx(min(_discrete_laplace_rdp_by_sum(t, sens, a), sens / t), rel=1e-9)


def test_discrete_laplace_is_counted_above_the_continuous_curve() -> None:
    """Secure Laplace noise is integer: its loss is ±1/t (randomized response), which the
    continuous LaplaceEvent under-counts by RDP and by PLD."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    disc = DiscreteLaplaceEvent(scale=10.0)
    cont = LaplaceEvent(scale=10.0)
    orders = [2.0, 8.0, 32.0]
    np.testing.assert_allclose(rdp_curve(disc, orders), rdp_curve(PureDpEvent(0.1), orders))
    assert np.all(rdp_curve(disc, orders) > rdp_curve(cont, orders))
    ev, ev_c = SelfComposedEvent(disc, 400), SelfComposedEvent(cont, 400)
    assert rdp_epsilon(ev, 1e-6) > rdp_epsilon(ev_c, 1e-6)
    reference = (
        pld_lib.from_discrete_laplace_mechanism(0.1, value_discretization_interval=1e-4)
        .self_compose(400)
        .get_epsilon_for_delta(1e-6)
    )
    assert pld_epsilon(ev, 1e-6) == pytest.approx(reference, rel=1e-3)
    assert pld_epsilon(ev, 1e-6) > pld_epsilon(ev_c, 1e-6)
    assert event_from_dict(disc.to_dict()) == disc and disc.epsilon == 0.1
    with pytest.raises(ConfigError, match="integer sensitivity"):
        DiscreteLaplaceEvent(scale=1.0, sensitivity=1.5)
    with pytest.raises(ConfigError, match="no discrete Laplace"):
        disc.to_dp_accounting()


def test_discrete_laplace_is_never_accounted_as_continuous() -> None:
    """The two Laplace events are siblings: a dispatch that tests ``LaplaceEvent`` first
    (in any order) still gives a discrete leaf the discrete curves, and every route that
    takes pure-DP leaves takes both."""
    disc = DiscreteLaplaceEvent(scale=4.0, sensitivity=3)
    cont = LaplaceEvent(scale=4.0, sensitivity=3.0)
    assert not isinstance(disc, LaplaceEvent) and not isinstance(cont, DiscreteLaplaceEvent)
    assert disc != cont and disc.epsilon == cont.epsilon == 0.75
    assert disc.scale == 4.0 and disc.sensitivity == 3 and isinstance(disc.sensitivity, int)

    orders = [1.5, 2.0, 8.0, 32.0]
    by_sum = np.array([min(_discrete_laplace_rdp_by_sum(4.0, 3, a), 0.75) for a in orders])
    np.testing.assert_allclose(rdp_curve(disc, orders), by_sum, rtol=1e-9)
    assert np.all(rdp_curve(cont, orders) < by_sum)
    both = ComposedEvent((cont, SelfComposedEvent(disc, 2)))
    np.testing.assert_allclose(
        rdp_curve(both, orders), rdp_curve(cont, orders) + 2 * by_sum, rtol=1e-9
    )

    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    reference = (
        pld_lib.from_discrete_laplace_mechanism(0.25, sensitivity=3)
        .self_compose(50)
        .get_epsilon_for_delta(1e-6)
    )
    assert pld_epsilon(SelfComposedEvent(disc, 50), 1e-6) == pytest.approx(reference, rel=1e-3)
    assert epsilon_for(both, 1e-6, "basic") == pytest.approx(3 * 0.75)
    pure_filter = PureDpFilter(budget=5.0)
    pure_filter.charge_event(["d"], both)
    assert pure_filter.spent(["d"])[0] == pytest.approx(3 * 0.75)
    with pytest.raises(ConfigError, match="no discrete Laplace"):
        both.to_dp_accounting()


@pytest.mark.parametrize("method", ["rdp", "exact"])
def test_accountant_running_total_equals_recomputation(method: str) -> None:
    """The running totals (RDP curve, Σμ²) give the same ε as composing the history."""
    acc = Accountant(method=method, delta=1e-6)
    events = [GaussianEvent(sigma=s) for s in (3.0, 5.0, 8.0)]
    if method == "rdp":
        events += [DiscreteLaplaceEvent(scale=20.0), PureDpEvent(0.05)]
    for i in range(60):
        acc.charge(events[i % len(events)], count=1 + i % 3)
    assert acc.epsilon() == pytest.approx(epsilon_for(acc.event, 1e-6, method), rel=1e-9)
    assert acc.epsilon(1e-3) == pytest.approx(epsilon_for(acc.event, 1e-3, method), rel=1e-9)
    before = acc.epsilon()
    assert acc.would_spend(GaussianEvent(2.0), 4) > before and acc.epsilon() == before
