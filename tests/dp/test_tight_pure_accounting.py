"""Tight accounting of pure-DP compositions at δ > 0: the exact composition of Kairouz, Oh
& Viswanath 2015, the calibration built on it, ``event_epsilon``'s pure route, and the
sparse vector with a re-drawn threshold that makes each discovery its own ε-DP step."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats
from scipy.special import comb

from ragprivacy.dp import (
    AboveThreshold,
    ChaCha20Bits,
    ComposedEvent,
    LaplaceEvent,
    PureDpEvent,
    SelfComposedEvent,
    above_threshold,
    calibrate_pure_steps,
    compose,
    empirical_epsilon,
    event_epsilon,
    max_pure_steps,
    optimal_pure_composition,
    pld_epsilon,
)
from ragprivacy.errors import BudgetExhaustedError, ConfigError

SEED = bytes(range(32))
SETTINGS = [(0.038086, 100, 1e-3), (0.5, 20, 1e-5), (2.0, 5, 1e-6), (0.01, 1000, 1e-6)]


def _kov_delta(eps0: float, k: int, i: int) -> float:
    """KOV 2015 Thm 3.3 as printed: k ε₀-DP steps are ((k − 2i)ε₀, δ_i)-DP with
    δ_i = Σ_{l<i} C(k, l)(e^{(k−l)ε₀} − e^{(k−2i+l)ε₀})/(1 + e^{ε₀})^k."""
    total = sum(
        comb(k, ell, exact=True) * (math.exp((k - ell) * eps0) - math.exp((k - 2 * i + ell) * eps0))
        for ell in range(i)
    )
    return float(total / (1 + math.exp(eps0)) ** k)


# ---------------------------------------------------------------- the exact composition


@pytest.mark.parametrize(("eps0", "k"), [(0.3, 10), (1.0, 7), (0.05, 40)])
def test_optimal_composition_matches_the_printed_theorem(eps0: float, k: int) -> None:
    # at the theorem's grid points ε = (k − 2i)ε₀ its δ_i gives back that ε exactly
    for i in range(1, k // 2):
        delta = _kov_delta(eps0, k, i)
        if not 1e-300 < delta < 1:
            continue
        assert optimal_pure_composition(eps0, k, delta) == pytest.approx((k - 2 * i) * eps0)


@pytest.mark.parametrize(("eps0", "k", "delta"), SETTINGS)
def test_optimal_composition_against_dp_accounting(eps0: float, k: int, delta: float) -> None:
    """Laplace (dp_accounting's own PLD accountant) ≤ exact ≤ pessimistic PLD of the
    worst case ≤ exact + k·(grid interval); all ≤ k·ε₀."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    exact = optimal_pure_composition(eps0, k, delta)
    pld = pld_epsilon(SelfComposedEvent(PureDpEvent(eps0), k), delta)
    assert exact * (1 - 1e-6) <= pld <= exact + k * 1e-4 + 1e-9
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.LaplaceDpEvent(1 / eps0), k)
    assert acc.get_epsilon(delta) <= exact + 1e-9  # Laplace is not the worst case
    assert exact <= k * eps0


def test_optimal_composition_edges() -> None:
    assert optimal_pure_composition(0.5, 4, 0.0) == 2.0  # δ = 0: the pure sum
    assert optimal_pure_composition(0.5, 0, 1e-3) == 0.0
    assert optimal_pure_composition(0.1, 2, 0.9) == 0.0  # δ above the total variation
    one = optimal_pure_composition(10.0, 1, 1e-6)  # one step: ε + log(1 − δ(1 + e^−ε))
    assert one == pytest.approx(10 + math.log1p(-1e-6 * (1 + math.exp(-10))), abs=1e-12)
    with pytest.raises(ConfigError, match="delta"):
        optimal_pure_composition(0.5, 4, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    eps0=st.floats(0.001, 3.0),
    k=st.integers(1, 400),
    delta=st.floats(1e-9, 0.1),
)
def test_optimal_composition_is_monotone(eps0: float, k: int, delta: float) -> None:
    e = optimal_pure_composition(eps0, k, delta)
    assert 0.0 <= e <= k * eps0 + 1e-12
    assert optimal_pure_composition(eps0, k + 1, delta) >= e - 1e-12  # more steps cost more
    assert optimal_pure_composition(eps0, k, delta / 2) >= e - 1e-12  # a smaller δ too
    assert optimal_pure_composition(eps0 * 1.1, k, delta) >= e - 1e-12


# ---------------------------------------------------------------- calibration


def test_sarus_setting_per_token_epsilon() -> None:
    """ε = 1 over T = 100 voted tokens at δ = 10⁻³: 0.039 per token (the pure split: 0.01)."""
    eps0 = calibrate_pure_steps(1.0, 1e-3, 100)
    assert eps0 == pytest.approx(0.039, rel=1e-2)
    assert eps0 > 0.0381  # what sarus-tech/dp-rag ships is within the guarantee
    assert eps0 / 0.01 == pytest.approx(3.9, rel=1e-2)
    assert calibrate_pure_steps(1.0, 0.0, 100) == 0.01
    assert optimal_pure_composition(eps0, 100, 1e-3) <= 1.0
    assert pld_epsilon(SelfComposedEvent(PureDpEvent(eps0), 100), 1e-3) == pytest.approx(
        1.0, rel=1e-2
    )


@settings(max_examples=40, deadline=None)
@given(
    epsilon=st.floats(0.05, 20.0),
    steps=st.integers(1, 300),
    delta=st.sampled_from([0.0, 1e-8, 1e-6, 1e-4, 1e-2]),
)
@example(epsilon=1.9375, steps=229, delta=0.0)  # 229 · (ε/229) rounds up by an ulp
def test_calibrated_steps_never_overshoot(epsilon: float, steps: int, delta: float) -> None:
    eps0 = calibrate_pure_steps(epsilon, delta, steps)
    assert eps0 >= epsilon / steps * (1 - 1e-12)  # never below the pure split
    assert optimal_pure_composition(eps0, steps, delta) <= epsilon  # never overshoots
    if delta > 0:  # and is tight: a little more would overshoot
        assert optimal_pure_composition(eps0 * (1 + 1e-9), steps, delta) > epsilon * (1 - 1e-9)
    # the inverse affords at least these steps, and not one more
    c = max_pure_steps(epsilon, delta, eps0)
    assert c >= steps
    assert optimal_pure_composition(eps0, c + 1, delta) > epsilon * (1 + 1e-12) or (
        delta == 0 and (c + 1) * eps0 > epsilon
    )


def test_max_pure_steps() -> None:
    assert max_pure_steps(10.0, 0.0, 2.0) == 5  # ⌊ε/ε₀⌋ (Alg. 4 line 2)
    assert max_pure_steps(1.7, 0.0, 0.5) == 3
    assert max_pure_steps(1.0, 1e-3, 0.01) > 1000  # vs 100 by the pure sum
    assert max_pure_steps(1.0, 0.0, 2.0) == 0
    assert max_pure_steps(10.0, 1e-6, 2.0) == 5  # large ε₀: nothing to gain
    with pytest.raises(ConfigError, match="delta"):
        max_pure_steps(1.0, 1.0, 0.1)


# ---------------------------------------------------------------- event_epsilon


def test_event_epsilon_takes_the_tight_route_for_pure_compositions() -> None:
    event = SelfComposedEvent(PureDpEvent(0.038086), 100)
    eps, delta = event_epsilon(event, 1e-3)
    assert delta == 1e-3
    assert eps == pytest.approx(0.976, rel=1e-2)  # was the pure sum, 3.81
    assert eps == pytest.approx(optimal_pure_composition(0.038086, 100, 1e-3), abs=1e-12)
    assert eps <= pld_epsilon(event, 1e-3)
    # δ = 0: exactly the sum, δ = 0
    assert event_epsilon(event, 0.0) == (pytest.approx(3.8086), 0.0)
    # the same leaves spelled differently give the same answer (flattened, cached)
    spelled = compose([SelfComposedEvent(PureDpEvent(0.038086), 60)] * 1)
    other = ComposedEvent((spelled, SelfComposedEvent(PureDpEvent(0.038086), 40)))
    assert event_epsilon(other, 1e-3) == (eps, 1e-3)


def test_event_epsilon_keeps_the_pure_sum_when_delta_buys_nothing() -> None:
    assert event_epsilon(PureDpEvent(10.0), 1e-6) == (10.0, 0.0)
    assert event_epsilon(compose([PureDpEvent(1.0), PureDpEvent(0.5)]), 1e-6) == (1.5, 0.0)
    assert event_epsilon(SelfComposedEvent(PureDpEvent(2.0), 5), 1e-6) == (10.0, 0.0)


def test_event_epsilon_mixed_and_laplace_leaves_use_pld() -> None:
    mixed = compose(
        [SelfComposedEvent(PureDpEvent(0.02), 100), SelfComposedEvent(PureDpEvent(0.05), 50)]
    )
    eps, delta = event_epsilon(mixed, 1e-5)
    assert delta == 1e-5 and eps == pytest.approx(pld_epsilon(mixed, 1e-5))
    assert eps < 4.5
    lap = SelfComposedEvent(LaplaceEvent(scale=20.0), 200)  # 200 steps of ε₀ = 0.05
    eps_lap, _ = event_epsilon(lap, 1e-5)
    assert eps_lap <= optimal_pure_composition(0.05, 200, 1e-5)  # Laplace's own curve


# ---------------------------------------------------------------- re-drawn threshold

N_RUNS = 3000
QUERIES = 300
ALPHA = 1e-6


def _gaps(pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Queries until the first discovery and from the first to the second (censored at
    the end of the sequence), for runs with at least one discovery."""
    first, second = pos[:, 0], pos[:, 1]
    keep = first >= 0
    first, second = first[keep], second[keep]
    gap2 = np.where(second >= 0, second - first, QUERIES - first)
    return first + 1, gap2


@pytest.mark.statistical
def test_resampled_threshold_is_redrawn_after_each_discovery() -> None:
    """With one noisy threshold a high draw delays every discovery of the run, so the
    first and second waiting times are correlated; re-drawn, they are independent.
    Spearman's test at α = 10⁻⁶ accepts independence for the re-drawn threshold and
    rejects it for the single one (the test fails if the threshold is not re-drawn)."""
    values = np.zeros(QUERIES)  # every query sits at the threshold
    rng = np.random.default_rng(20240611)
    pos = above_threshold(
        values,
        0.0,
        1.0,
        max_discoveries=2,
        resample_threshold=True,
        runs=N_RUNS,
        simulation=True,
        rng=rng,
    )
    g1, g2 = _gaps(pos)
    redrawn = stats.spearmanr(g1, g2)
    assert redrawn.pvalue > ALPHA, redrawn
    pos_once = above_threshold(
        values, 0.0, 1.0, max_discoveries=2, runs=N_RUNS, simulation=True, rng=rng
    )
    once = stats.spearmanr(*_gaps(pos_once))
    assert once.pvalue < ALPHA and once.statistic > 0.2, once
    # the second waiting time has the first one's law (each segment starts afresh)
    assert stats.mannwhitneyu(g1[g2 < QUERIES // 2], g2[g2 < QUERIES // 2]).pvalue > ALPHA


@pytest.mark.statistical
def test_streaming_resampled_threshold_halts_after_c_and_redraws() -> None:
    bits = ChaCha20Bits.derived(SEED, "resampled-stream")
    gaps1, gaps2, thresholds_moved = [], [], 0
    for _ in range(600):
        sv = AboveThreshold(0, 1.0, max_discoveries=2, resample_threshold=True, bits=bits)
        seen = [sv._noisy_threshold]
        waits = [0, 0]
        for _ in range(QUERIES):
            hit = sv.test(0)
            waits[sv.discoveries - 1 if hit else sv.discoveries] += 1
            if sv.halted:
                break
            if hit:  # re-drawn for the next step
                seen.append(sv._noisy_threshold)
        if sv.halted:
            assert sv.discoveries == 2
            with pytest.raises(BudgetExhaustedError):
                sv.test(0)
            gaps1.append(waits[0])
            gaps2.append(waits[1])
            thresholds_moved += seen[1] != seen[0]
        assert len(seen) <= 2  # one draw at the start, one after the first discovery only
    assert len(gaps1) > 400
    assert thresholds_moved > 0.5 * len(gaps1)  # discrete noise: a redraw may repeat a value
    assert stats.spearmanr(gaps1, gaps2).pvalue > ALPHA


def test_resampled_events_and_bounds() -> None:
    sv = AboveThreshold(3, 0.5, max_discoveries=4, resample_threshold=True, simulation=True, rng=1)
    assert sv.event == SelfComposedEvent(PureDpEvent(0.5), 4)
    assert sv.epsilon_tight == pytest.approx(2.0)  # c·ε: no Lyu et al. bound with redraws
    plain = AboveThreshold(3, 0.5, max_discoveries=4, simulation=True, rng=1)
    assert plain.event == PureDpEvent(2.0) and plain.epsilon_tight == pytest.approx(1.25)
    # at δ > 0 the resampled run's four steps compose below their sum
    assert event_epsilon(sv.event, 1e-3)[0] < 2.0


def test_resampled_sparse_vector_within_its_epsilon() -> None:
    """An empirical audit (as tests/dp/test_dp_privacy_audit.py): the re-drawn run on
    neighbouring query vectors never shows more than c·ε."""
    d = np.array([2, 5, 3, 6, 4])
    c, eps = 2, 1.0

    def run(x: np.ndarray, tag: str) -> np.ndarray:
        bits = ChaCha20Bits.derived(SEED, ("audit-sv-resampled", tag))
        pos = above_threshold(
            x, 5, eps, max_discoveries=c, resample_threshold=True, runs=20_000, bits=bits
        )
        return (pos + 1) @ (len(x) + 1) ** np.arange(c)

    loss = empirical_epsilon(run(d, "D"), run(d + 1, "D'"), alpha=ALPHA).epsilon_lower
    assert loss <= c * eps
