"""Functional behaviour of the mechanisms (their privacy is audited in test_dp_privacy_audit)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ragprivacy.dp import (
    AboveThreshold,
    ChaCha20Bits,
    DiscreteLaplaceEvent,
    GaussianEvent,
    GaussianNoisyTopK,
    Grid,
    LaplaceEvent,
    ScoreSensitivity,
    above_threshold,
    account_sigma_exact,
    exact_gaussian_epsilon,
    exponential_mechanism,
    hit_probability,
    laplace_counts,
    noisy_prefix_threshold,
    score_sensitivity,
    top_k_indices,
)
from ragprivacy.dp.events import SelfComposedEvent
from ragprivacy.errors import BudgetExhaustedError, ConfigError

SEED = b"ragprivacy.dp test suite seed.."  # 31 bytes (>= 16); real seeds: os.urandom(32)


def test_top_k_order_and_ties() -> None:
    v = np.array([0.1, 0.5, 0.5, 0.9, 0.5])
    np.testing.assert_array_equal(top_k_indices(v, 3), [3, 1, 2])
    np.testing.assert_array_equal(top_k_indices(v, 10), [3, 1, 2, 4, 0])
    batch = np.array([[1.0, 2.0, 3.0], [3.0, 3.0, 1.0]])
    np.testing.assert_array_equal(top_k_indices(batch, 2), [[2, 1], [0, 1]])


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.integers(-3, 3), min_size=1, max_size=9000),
    k=st.integers(1, 12),
)
def test_top_k_matches_a_stable_sort(values: list[int], k: int) -> None:
    """Both code paths (partition for large rows, full sort) equal a stable sort."""
    v = np.array(values, dtype=float)
    expected = sorted(range(v.size), key=lambda i: (-v[i], i))[:k]
    np.testing.assert_array_equal(top_k_indices(v, k), expected)


def test_noisy_top_k_secure_and_simulation() -> None:
    scores = np.linspace(0, 1, 50)
    secure = GaussianNoisyTopK(sigma=1e-3, k=5, grid=Grid(bits=16))
    sel = secure.select(scores, bits=ChaCha20Bits.derived(SEED, ("t", "q")))
    np.testing.assert_array_equal(sel.indices, [49, 48, 47, 46, 45])  # tiny noise
    assert np.all(np.diff(sel.noisy_scores) <= 0)
    again = secure.select(scores, bits=ChaCha20Bits.derived(SEED, ("t", "q")))
    np.testing.assert_array_equal(again.noisy_scores, sel.noisy_scores)  # derived noise
    # default Δ = 2 (cosine scores in [−1, 1]), clipped on the grid: no rounding unit
    assert sel.event == GaussianEvent(sigma=1e-3, sensitivity=2.0)
    assert sel.event_per_query == sel.event
    sim = GaussianNoisyTopK(sigma=10.0, k=3, simulation=True)
    a = sim.select(np.zeros((4, 20)), rng=1)
    assert a.indices.shape == (4, 3)
    assert a.event == SelfComposedEvent(GaussianEvent(10.0, sensitivity=2.0), 4)
    assert a.event_per_query == GaussianEvent(10.0, sensitivity=2.0)
    with pytest.raises(ConfigError, match="refuses 'rng'"):
        secure.select(scores, rng=1)
    with pytest.raises(ConfigError, match="do not pass 'bits'"):
        sim.select(scores, bits=ChaCha20Bits.derived(SEED, "x"))
    with pytest.raises(ConfigError):
        secure.select(np.array([]))
    with pytest.raises(ConfigError):
        secure.select(np.array([np.nan, 1.0]))
    with pytest.raises(ConfigError):
        GaussianNoisyTopK(sigma=2.0**30, k=1)  # out of range in grid units


def test_batched_selection_reports_the_cost_of_every_query() -> None:
    """Q rows in one call cost Q queries (the event of the call, not of one row)."""
    m = GaussianNoisyTopK(sigma=4.0, k=2)
    batch = m.select(np.zeros((100, 10)), bits=ChaCha20Bits.derived(SEED, "batch"))
    assert batch.event == SelfComposedEvent(m.event, 100)
    assert batch.event_per_query == m.event
    one = exact_gaussian_epsilon(m.event, 1e-6)
    assert exact_gaussian_epsilon(batch.event, 1e-6) > 5 * one
    single = m.select(np.zeros(10), bits=ChaCha20Bits.derived(SEED, "single"))
    assert single.event == m.event


def test_score_sensitivity_resolves_range_and_delta() -> None:
    unit = score_sensitivity((0, 1))
    assert unit == ScoreSensitivity((0.0, 1.0), 1.0) and unit.source == "score_range"
    assert score_sensitivity((-1.0, 1.0), 3.0).sensitivity == 3.0  # a larger Δ is allowed
    assert score_sensitivity(None, 1.0) == ScoreSensitivity(None, 1.0)
    assert score_sensitivity(None, 1.0).source == "trusted"
    assert score_sensitivity(None, default_range=(-1.0, 1.0)).sensitivity == 2.0
    with pytest.raises(ConfigError, match="got neither"):
        score_sensitivity(None)
    with pytest.raises(ConfigError, match=r"at least the width of score_range .*Narrow"):
        score_sensitivity((-1.0, 1.0), 1.0)
    with pytest.raises(ConfigError, match="low < high"):
        score_sensitivity((0.0, float("inf")))
    with pytest.raises(ConfigError, match="pair"):
        score_sensitivity((1.0, 2.0, 3.0))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="'sensitivity'"):
        score_sensitivity(None, -1.0)
    # the mechanism resolves its pair with it (cosine range by default)
    m = GaussianNoisyTopK(sigma=1.0, k=1, score_range=(0, 0.5), simulation=True)
    assert (m.score_range, m.sensitivity) == (score_sensitivity((0, 0.5)).score_range, 0.5)
    assert GaussianNoisyTopK(sigma=1.0, k=1).sensitivity == 2.0
    grid = Grid(bits=4)
    secure = GaussianNoisyTopK(sigma=1.0, k=1, score_range=(0.0, 1.0), grid=grid)
    assert secure.event.sensitivity == 1.0  # clipped to grid points inside the range
    unclipped = GaussianNoisyTopK(sigma=1.0, k=1, sensitivity=1.0, grid=grid)
    assert unclipped.event.sensitivity == grid.rounded_sensitivity(1.0) == 17 / 16


def test_score_range_sets_and_enforces_the_sensitivity() -> None:
    unit = GaussianNoisyTopK(sigma=1.0, k=1, score_range=(0.0, 1.0), simulation=True)
    assert unit.sensitivity == 1.0 and unit.event.mu == 1.0
    # scores are clipped into the range before the noise
    sel = GaussianNoisyTopK(sigma=1e-3, k=2, score_range=(0.0, 1.0), grid=Grid(bits=16)).select(
        np.array([5.0, -3.0, 0.5]), bits=ChaCha20Bits.derived(SEED, "clip")
    )
    assert sel.noisy_scores[0] == pytest.approx(1.0, abs=0.01)
    # the paper's statement Δ = 1 taken on trust: no clipping
    trusted = GaussianNoisyTopK(sigma=1.0, k=1, sensitivity=1.0, simulation=True)
    assert trusted.score_range is None and trusted.event.mu == 1.0
    with pytest.raises(ConfigError, match="at least the width of score_range"):
        GaussianNoisyTopK(sigma=1.0, k=1, sensitivity=1.0, score_range=(-1.0, 1.0))
    with pytest.raises(ConfigError, match="low < high"):
        GaussianNoisyTopK(sigma=1.0, k=1, score_range=(1.0, 0.0))
    with pytest.raises(ConfigError, match="pair"):
        GaussianNoisyTopK(sigma=1.0, k=1, score_range=(1.0,))  # type: ignore[arg-type]


def _chi2_pvalue(counts: np.ndarray, expected: np.ndarray) -> float:
    """χ² with tail bins merged until each expects ≥ 5."""
    obs_bins, exp_bins = [], []
    o = e = 0.0
    for c, x in zip(counts, expected):
        o += c
        e += x
        if e >= 5:
            obs_bins.append(o)
            exp_bins.append(e)
            o = e = 0.0
    obs_bins[-1] += o
    exp_bins[-1] += e
    obs, ex = np.array(obs_bins), np.array(exp_bins)
    return float(stats.chisquare(obs, ex * obs.sum() / ex.sum()).pvalue)


def _topk_noise_pvalue(mechanism_sigma: float, claimed_sigma: float) -> float:
    """10^6 noise draws read back from the mechanism's output, χ² against DG(claimed σ)."""
    grid = Grid(bits=4)  # σ = 0.25 is 4 grid units
    m = GaussianNoisyTopK(sigma=mechanism_sigma, k=1000, grid=grid)
    sel = m.select(
        np.zeros((1000, 1000)), bits=ChaCha20Bits.derived(SEED, ("gof-topk", repr(mechanism_sigma)))
    )
    noise = np.rint(sel.noisy_scores.ravel() / grid.resolution).astype(np.int64)
    s_units = claimed_sigma / grid.resolution
    support = np.arange(-int(14 * s_units) - 3, int(14 * s_units) + 4)
    pmf = np.exp(-(support.astype(float) ** 2) / (2 * s_units**2))
    pmf /= pmf.sum()
    counts = np.bincount(np.clip(noise - support[0], 0, support.size - 1), minlength=support.size)
    return _chi2_pvalue(counts, pmf * noise.size)


@pytest.mark.statistical
def test_noisy_top_k_noise_is_the_discrete_gaussian_of_its_sigma() -> None:
    """χ² on 10^6 draws at false-alarm rate 10^-6; σ × 0.95 in the mechanism is rejected
    (its p-value is far below 10^-100, so the planted bug is caught for any key)."""
    assert _topk_noise_pvalue(0.25, 0.25) > 1e-6
    assert _topk_noise_pvalue(0.25 * 0.95, 0.25) < 1e-6


def test_selection_cost_composes_to_the_calibrated_budget() -> None:
    """n selections at the exactly calibrated σ spend (ε_acc, δ_acc), not more."""
    n = 200
    m0 = GaussianNoisyTopK(sigma=1.0, k=2, simulation=True)
    sigma = account_sigma_exact(1.0, 1e-6, n, sensitivity=m0.sensitivity)
    m = GaussianNoisyTopK(sigma=sigma, k=2, simulation=True)
    eps = exact_gaussian_epsilon(SelfComposedEvent(m.event, n), 1e-6)
    assert eps == pytest.approx(1.0, rel=1e-6)


def test_laplace_counts_and_prefix_threshold() -> None:
    out = laplace_counts(np.array([5, 0, 3]), 50.0, bits=ChaCha20Bits.derived(SEED, "c"))
    np.testing.assert_array_equal(out.values, [5, 0, 3])  # scale 0.01: noise is 0
    assert out.event == DiscreteLaplaceEvent(scale=0.02, sensitivity=1)  # secure: discrete
    sim_counts = laplace_counts(np.array([5]), 50.0, simulation=True, rng=0)
    assert sim_counts.event == LaplaceEvent(scale=0.02)
    with pytest.raises(ConfigError, match="integers"):
        laplace_counts(np.array([0.5]), 1.0)
    res = noisy_prefix_threshold([1, 2, 5, 9], 3, 50.0, bits=ChaCha20Bits.derived(SEED, "p"))
    assert res.stop_bin == 1 and res.bins_released == 2
    assert res.noisy_prefix_sums == (1.0, 3.0)
    assert res.event_per_document == DiscreteLaplaceEvent(scale=0.02)
    never = noisy_prefix_threshold([0, 1], 50, 50.0, bits=ChaCha20Bits.derived(SEED, "p"))
    assert never.stop_bin is None and never.bins_released == 2
    sim = noisy_prefix_threshold([4, 4], 1, 1.0, simulation=True, rng=3)
    assert isinstance(sim.noisy_prefix_sums[0], float)
    assert sim.event_per_document == LaplaceEvent(scale=1.0)
    with pytest.raises(ConfigError):
        noisy_prefix_threshold([-1, 2], 1, 1.0)


def test_exponential_mechanism_modes() -> None:
    assert exponential_mechanism([0, 9, 1], 100.0, bits=ChaCha20Bits.derived(SEED, "e")) == 1
    many = exponential_mechanism(np.zeros(5), 1.0, size=5000, bits=ChaCha20Bits.derived(SEED, "u"))
    assert set(np.unique(many)) == set(range(5))
    sim = exponential_mechanism([0, 9, 1], 100.0, simulation=True, rng=0)
    assert sim == 1
    with pytest.raises(ConfigError):
        exponential_mechanism([], 1.0)
    with pytest.raises(ConfigError, match="refuses 'rng'"):
        exponential_mechanism([1, 2], 1.0, rng=0)


def test_exponential_mechanism_exact_path_on_a_boundary() -> None:
    """A W whose 53-bit prefix straddles a level boundary is refined and decided exactly."""
    from fractions import Fraction

    from ragprivacy.dp._exact import LazyUniform
    from ragprivacy.dp.exponential import _boundaries, _level_exact

    x = [Fraction(0), Fraction(1, 2), Fraction(3)]
    counts = [1, 2, 5]
    b_lo, b_hi = _boundaries(x, counts, 200)
    for level in (0, 1):
        prefix = int(b_lo[level] * 2**53)  # the prefix interval contains the boundary
        w = LazyUniform(prefix, ChaCha20Bits.derived(SEED, ("boundary", level)))
        got = _level_exact(w, x, counts)
        assert w.bits > 53
        lo, hi = w.interval()
        assert got in (level, level + 1)
        if got == level:
            assert hi <= b_hi[level]
        else:
            assert lo >= b_lo[level]


def test_above_threshold_streaming() -> None:
    sv = AboveThreshold(10, 100.0, max_discoveries=2, bits=ChaCha20Bits.derived(SEED, "sv"))
    assert [sv.test(v) for v in (0, 3, 50, 2, 70)] == [False, False, True, False, True]
    assert sv.halted and sv.queries == 5
    with pytest.raises(BudgetExhaustedError):
        sv.test(100)
    assert sv.event.epsilon == 200.0 and sv.epsilon_tight == 150.0
    below = AboveThreshold(5, 100.0, below=True, bits=ChaCha20Bits.derived(SEED, "sv"))
    assert [below.test(v) for v in (9, 8, 1)] == [False, False, True]
    with pytest.raises(ConfigError, match="integer"):
        AboveThreshold(2.5, 1.0)
    sim = AboveThreshold(2.5, 100.0, simulation=True, rng=0)
    assert sim.test(10.0)


def test_above_threshold_batch() -> None:
    pos = above_threshold(
        np.array([0, 50, 0, 60, 70]),
        10,
        100.0,
        max_discoveries=2,
        runs=3,
        bits=ChaCha20Bits.derived(SEED, "b"),
    )
    np.testing.assert_array_equal(pos, [[1, 3]] * 3)
    one = above_threshold(np.array([0, 0]), 10, 100.0, max_discoveries=3, bits=None)
    np.testing.assert_array_equal(one, [-1, -1, -1])


def test_hit_probability_against_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    scores = rng.uniform(-0.3, 0.3, 21)
    scores[7] = 0.5
    p = hit_probability(scores, 7, 0.4, 3)
    noisy = scores + rng.normal(0, 0.4, (200_000, scores.size))
    top = np.argsort(-noisy, axis=1)[:, :3]
    mc = (top == 7).any(axis=1).mean()
    assert p == pytest.approx(mc, abs=4 * np.sqrt(mc * (1 - mc) / 200_000))
    assert hit_probability(scores, 0, 1.0, 21) == 1.0
