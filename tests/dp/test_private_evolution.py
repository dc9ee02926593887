"""Private Evolution (Lin et al. 2023, Alg. 1–2): the noisy nearest-neighbour histogram's
noise and sensitivity, the run's accounting against dp_accounting, and the loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from ragprivacy.dp import (
    ChaCha20Bits,
    GaussianEvent,
    SelfComposedEvent,
    ZCdpEvent,
    dp_nn_histogram,
    epsilon_for,
    nearest_neighbor_votes,
    pe_epsilon,
    pe_event,
    pe_sigma,
    private_evolution,
)
from ragprivacy.errors import ConfigError

ALPHA = 1e-3  # false-alarm rate of each statistical assertion

SEED = b"ragprivacy.dp private evolution."


def _fixed_votes(per_bin: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Private points sitting exactly on ``bins`` orthogonal synthetic points, ``per_bin``
    each: the clean histogram is known."""
    synthetic = np.eye(bins)
    private = np.repeat(synthetic, per_bin, axis=0)
    return private, synthetic


def test_votes_follow_l2_on_normalised_rows() -> None:
    synthetic = np.array([[10.0, 0.0], [0.0, 0.1], [1.0, 1.0]])
    private = np.array([[1.0, 0.05], [0.1, 3.0], [2.0, 2.1], [5.0, 5.0]])
    # normalised: private rows point to e_0, e_1, the diagonal, the diagonal
    np.testing.assert_array_equal(nearest_neighbor_votes(private, synthetic), [1, 1, 2])
    # ties go to the lower index
    np.testing.assert_array_equal(nearest_neighbor_votes(np.ones((3, 2)), np.ones((2, 2))), [3, 0])
    with pytest.raises(ConfigError, match="same dimension"):
        nearest_neighbor_votes(np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(ConfigError, match="NaN"):
        nearest_neighbor_votes(np.full((2, 2), np.nan), np.ones((2, 2)))


@pytest.mark.statistical
def test_simulated_noise_has_the_claimed_mean_and_variance() -> None:
    """votes + N(0, σ²) per bin, σ the event's: KS against N(0, σ²), t-test on the mean
    and χ² on the variance, each at false-alarm rate ALPHA."""
    private, synthetic = _fixed_votes(per_bin=500, bins=8)
    votes = nearest_neighbor_votes(private, synthetic)
    np.testing.assert_array_equal(votes, [500] * 8)
    rng = np.random.default_rng(20231)
    noise = []
    for _ in range(1500):
        h = dp_nn_histogram(private, synthetic, sigma=3.5, simulation=True, rng=rng)
        assert h.event == GaussianEvent(sigma=3.5)
        noise.append(h.counts - votes)  # no clipping: votes ≫ σ
    z = np.concatenate(noise)
    sigma = h.event.sigma
    assert stats.kstest(z, "norm", args=(0.0, sigma)).pvalue > ALPHA
    assert stats.ttest_1samp(z, 0.0).pvalue > ALPHA

    def variance_p(s: float) -> float:  # two-sided χ² test of Var z = s²
        chi2 = (z.size - 1) * z.var(ddof=1) / s**2
        return float(2 * min(stats.chi2.cdf(chi2, z.size - 1), stats.chi2.sf(chi2, z.size - 1)))

    assert variance_p(sigma) > ALPHA
    # the tests have power: a 5 % larger or smaller σ, or a shift of σ/10, is rejected
    assert variance_p(1.05 * sigma) < ALPHA and variance_p(0.95 * sigma) < ALPHA
    assert stats.ttest_1samp(z, 0.1 * sigma).pvalue < ALPHA


@pytest.mark.statistical
def test_secure_noise_is_the_discrete_gaussian_of_the_event() -> None:
    """The secure path adds discrete Gaussian integers: χ² against the pmf
    ∝ exp(−x²/2σ²), and its event is 1/(2σ²)-zCDP (CKS Thm 4)."""
    private, synthetic = _fixed_votes(per_bin=50, bins=4)
    sigma = 2.0
    noise = []
    for i in range(500):
        h = dp_nn_histogram(
            private, synthetic, sigma=sigma, bits=ChaCha20Bits.derived(SEED, ("pe", str(i)))
        )
        assert h.event == ZCdpEvent(rho=1 / (2 * sigma**2))
        noise.append(h.counts - 50)
    z = np.concatenate(noise).astype(int)
    assert np.all(z == np.concatenate(noise))  # integers
    support = np.arange(-8, 9)
    pmf = np.exp(-(support**2) / (2 * sigma**2))
    pmf /= pmf.sum()
    obs = np.array([np.sum(z == x) for x in support])
    assert obs.sum() == z.size  # nothing beyond 4σ in 2,000 draws (P ≈ 1e-4 each)
    assert stats.chisquare(obs, pmf * obs.sum()).pvalue > ALPHA
    with pytest.raises(ConfigError, match="refuses 'rng'"):
        dp_nn_histogram(private, synthetic, sigma=1.0, rng=3)
    with pytest.raises(ConfigError, match="do not pass 'bits'"):
        dp_nn_histogram(private, synthetic, sigma=1.0, simulation=True, bits=ChaCha20Bits(SEED))


def test_threshold_zeroes_small_counts_and_shifts_the_rest() -> None:
    """max(votes + z − H, 0) with z the stream's draws (Alg. 2 and the DPSDA code)."""
    private = np.repeat(np.eye(3), [40, 3, 0], axis=0)
    synthetic = np.eye(3)
    h = dp_nn_histogram(private, synthetic, sigma=1.0, threshold=10.0, simulation=True, rng=7)
    z = np.random.default_rng(7).normal(0.0, 1.0, 3)
    np.testing.assert_allclose(h.counts, np.maximum(np.array([40, 3, 0]) + z - 10.0, 0.0))
    assert h.counts[0] > 0 and h.counts[1] == 0 and h.counts[2] == 0


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    m=st.integers(1, 12),
    dim=st.integers(2, 6),
    seed=st.integers(0, 2**31),
)
def test_one_document_moves_the_votes_by_one_in_l2(n: int, m: int, dim: int, seed: int) -> None:
    """Add/remove one private document: the clean vote vector changes by exactly one
    vote (ℓ2 and ℓ1 distance 1), whatever the data."""
    rng = np.random.default_rng(seed)
    private = rng.normal(size=(n + 1, dim))
    synthetic = rng.normal(size=(m, dim))
    with_doc = nearest_neighbor_votes(private, synthetic)
    without = nearest_neighbor_votes(private[:-1], synthetic) if n else np.zeros(m, int)
    diff = with_doc - without
    assert np.linalg.norm(diff) == 1.0 and np.abs(diff).sum() == 1


def test_every_iterations_histogram_has_sensitivity_one() -> None:
    """In a PE run, each iteration's clean histogram over the population it was computed
    on changes by at most 1 in ℓ2 when one private document is removed."""
    rng = np.random.default_rng(5)
    private = rng.normal(size=(60, 4))
    populations: list[np.ndarray] = []

    def embed(xs: object) -> np.ndarray:
        arr = np.asarray(xs, dtype=float)
        populations.append(arr)
        return arr

    private_evolution(
        private,
        random_api=lambda n, g: list(g.normal(size=(n, 4))),
        variation_api=lambda xs, g: [x + 0.3 * g.normal(size=4) for x in xs],
        embed=embed,
        sigma=2.0,
        iterations=6,
        n_synthetic=15,
        simulation=True,
        rng=1,
    )
    assert len(populations) == 6
    for synthetic in populations:
        for drop in range(len(private)):
            neighbour = np.delete(private, drop, axis=0)
            diff = nearest_neighbor_votes(private, synthetic) - nearest_neighbor_votes(
                neighbour, synthetic
            )
            assert np.linalg.norm(diff) <= 1.0


@pytest.mark.parametrize(("sigma", "iterations"), [(1.2, 10), (4.0, 1), (0.8, 30)])
def test_reported_epsilon_is_dp_accountings_composition(sigma: float, iterations: int) -> None:
    """The run's event is T Gaussian mechanisms at σ; its ε equals dp_accounting's PLD
    composition of SelfComposedDpEvent(GaussianDpEvent(σ), T) (and lies below the RDP
    bound, which is looser)."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    delta = 1e-5
    event = pe_event(sigma, iterations, simulation=True)
    assert event == SelfComposedEvent(GaussianEvent(sigma), iterations)
    expected = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), iterations)
    assert event.to_dp_accounting() == expected
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(expected)
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(expected)
    reported = pe_epsilon(sigma, iterations, delta, simulation=True)
    assert reported == pytest.approx(pld.get_epsilon(delta), rel=2e-3)
    assert reported <= rdp.get_epsilon(delta)
    pld_route = pe_epsilon(sigma, iterations, delta, simulation=True, method="pld")
    assert pld_route == pytest.approx(reported, rel=2e-3)


@pytest.mark.parametrize(("epsilon", "iterations"), [(10.0, 10), (1.0, 1), (200.0, 10), (4.0, 20)])
def test_calibrated_sigma_spends_exactly_the_target(epsilon: float, iterations: int) -> None:
    delta = 1e-6
    sigma = pe_sigma(epsilon, delta, iterations)
    assert pe_epsilon(sigma, iterations, delta, simulation=True) == pytest.approx(epsilon, rel=1e-9)
    continuous = pe_event(sigma, iterations, simulation=True)
    assert epsilon_for(continuous, delta, "pld") == pytest.approx(epsilon, rel=5e-3)
    # more iterations at the same budget need proportionally more noise: σ ∝ √T
    assert pe_sigma(epsilon, delta, 4 * iterations) == pytest.approx(2 * sigma)
    # the secure path's zCDP event is accounted by RDP: sound, somewhat above ε
    secure = pe_epsilon(sigma, iterations, delta, simulation=False)
    assert epsilon <= secure <= 1.6 * epsilon
    assert pe_epsilon(sigma, iterations, delta) == secure  # the secure event is the default
    assert pe_epsilon(sigma, iterations, delta, method="rdp") == secure
    with pytest.raises(ConfigError, match="Rényi DP only"):
        pe_epsilon(sigma, iterations, delta, method="pld")  # covers the continuous Gaussian
    with pytest.raises(ConfigError):
        pe_sigma(epsilon, 1.5, iterations)


def test_pe_concentrates_on_the_private_mode() -> None:
    """With little noise the population moves onto the private data's cluster."""
    rng = np.random.default_rng(0)
    centre = np.array([1.0, 0.0, 0.0])
    private = centre + 0.05 * rng.normal(size=(300, 3))
    out = private_evolution(
        private,
        random_api=lambda n, g: list(g.normal(size=(n, 3))),
        variation_api=lambda xs, g: [x + 0.1 * g.normal(size=3) for x in xs],
        embed=lambda xs: np.asarray(xs, dtype=float),
        sigma=1.0,
        iterations=8,
        n_synthetic=50,
        threshold=2.0,
        simulation=True,
        rng=3,
    )
    final = np.asarray(out.samples)
    cos = (final @ centre) / np.linalg.norm(final, axis=1)
    assert np.median(cos) > 0.9
    assert len(out.histograms) == 8 and all(h.shape == (50,) for h in out.histograms)
    assert out.event == pe_event(1.0, 8, simulation=True)
    # the same seed gives the same run
    again = private_evolution(
        private,
        random_api=lambda n, g: list(g.normal(size=(n, 3))),
        variation_api=lambda xs, g: [x + 0.1 * g.normal(size=3) for x in xs],
        embed=lambda xs: np.asarray(xs, dtype=float),
        sigma=1.0,
        iterations=8,
        n_synthetic=50,
        threshold=2.0,
        simulation=True,
        rng=3,
    )
    np.testing.assert_array_equal(np.asarray(again.samples), final)


def test_all_bins_below_threshold_resample_uniformly() -> None:
    out = private_evolution(
        np.eye(2),
        random_api=lambda n, g: list(range(n)),
        variation_api=lambda xs, g: list(xs),
        embed=lambda xs: np.tile([1.0, 0.0], (len(xs), 1)),
        sigma=0.1,
        iterations=2,
        n_synthetic=6,
        threshold=1e6,
        simulation=True,
        rng=0,
    )
    assert all(float(h.sum()) == 0.0 for h in out.histograms)
    assert set(out.samples) <= set(range(6))


def test_secure_run_and_bad_apis() -> None:
    common = {
        "random_api": lambda n, g: list(range(n)),
        "embed": lambda xs: np.eye(4)[list(xs)],
        "sigma": 1.0,
        "iterations": 2,
        "n_synthetic": 4,
    }
    out = private_evolution(np.eye(4), variation_api=lambda xs, g: list(xs), **common)
    assert out.event == pe_event(1.0, 2, simulation=False)
    assert math.isfinite(pe_epsilon(1.0, 2, 1e-6, simulation=False))
    with pytest.raises(ConfigError, match="refuses 'rng'"):
        private_evolution(np.eye(4), variation_api=lambda xs, g: list(xs), rng=1, **common)
    with pytest.raises(ConfigError, match="variation_api' returned 3 samples; 4"):
        private_evolution(
            np.eye(4), variation_api=lambda xs, g: list(xs)[:3], simulation=True, **common
        )
