"""Empirical privacy audits of every mechanism on neighbouring inputs.

Each audit runs the mechanism R times on D and on a neighbour D', reduces outputs to
discrete outcomes and computes a Clopper–Pearson lower bound on ε (simultaneous
false-alarm rate α = 1e-6, ``ragprivacy.dp.empirical_epsilon``). A correct mechanism must
not exceed its claimed ε; each audit also runs a deliberately broken variant
(select-before-noise, noise scale too small, exponent without the 1/2) and must catch it.
The default run uses R = 20,000 per side; the ``slow`` versions use R = 1,000,000.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ragprivacy.dp import (
    ChaCha20Bits,
    GaussianNoisyTopK,
    Grid,
    above_threshold,
    empirical_epsilon,
    exponential_mechanism,
    gaussian_epsilon,
    laplace_counts,
    noisy_prefix_threshold,
    top_k_indices,
)
from ragprivacy.dp.mechanisms import _prefix_stops

ALPHA = 1e-6
R_FAST = 20_000
R_SLOW = 1_000_000

pytestmark = pytest.mark.statistical

Runner = Callable[[np.ndarray, int, str], np.ndarray]


def _audit(run: Runner, d: np.ndarray, d_prime: np.ndarray, runs: int, delta: float = 0.0) -> float:
    out_d = run(d, runs, "D")
    out_dp = run(d_prime, runs, "D'")
    return empirical_epsilon(out_d, out_dp, delta=delta, alpha=ALPHA).epsilon_lower


# ---------------------------------------------------------------- Laplace counts


EPS_COUNT = 0.5


def _counts(eps_used: float) -> Runner:
    def run(x: np.ndarray, runs: int, tag: str) -> np.ndarray:
        bits = ChaCha20Bits.derived(b"audit-counts", (tag, str(eps_used), runs))
        noisy = laplace_counts(np.repeat(x, runs), eps_used, bits=bits).values
        return np.clip(noisy, -15, 25)  # post-processing

    return run


COUNT_D, COUNT_DP = np.array([3]), np.array([4])


@pytest.mark.parametrize("runs", [R_FAST, pytest.param(R_SLOW, marks=pytest.mark.slow)])
def test_laplace_counts_within_epsilon(runs: int) -> None:
    assert _audit(_counts(EPS_COUNT), COUNT_D, COUNT_DP, runs) <= EPS_COUNT


def test_laplace_counts_with_half_the_noise_is_caught() -> None:
    assert _audit(_counts(2 * EPS_COUNT), COUNT_D, COUNT_DP, R_FAST) > EPS_COUNT


# ---------------------------------------------------------------- noisy top-K

SIGMA = 1.0
TOPK_D = np.array([0.6, 0.5, 0.4, 0.0])
TOPK_DP = np.array([-0.4, 0.5, 0.4, 0.0])  # document 0's score moved by the sensitivity 1
GRID = Grid(bits=12)
DELTA_TOPK = 1e-3


def _topk_bound() -> float:
    m = GaussianNoisyTopK(sigma=SIGMA, k=2, grid=GRID)
    return gaussian_epsilon(m.event.mu, DELTA_TOPK)


def _pair_code(idx: np.ndarray, n: int) -> np.ndarray:
    return idx[:, 0] * n + idx[:, 1]


def _topk(simulation: bool) -> Runner:
    m = GaussianNoisyTopK(sigma=SIGMA, k=2, simulation=simulation, grid=GRID)

    def run(x: np.ndarray, runs: int, tag: str) -> np.ndarray:
        batch = np.tile(x, (runs, 1))
        if simulation:
            sel = m.select(batch, rng=np.random.default_rng([runs, len(tag)]))
        else:
            sel = m.select(batch, bits=ChaCha20Bits.derived(b"audit-topk", (tag, runs)))
        return _pair_code(sel.indices, x.size)

    return run


def _select_before_noise(x: np.ndarray, runs: int, tag: str) -> np.ndarray:
    """The planted bug: pick the top K on clean scores, then noise only the winners."""
    idx = np.tile(top_k_indices(x, 2), (runs, 1))
    rng = np.random.default_rng(11 if tag == "D" else 12)
    noisy = x[idx] + rng.normal(0.0, SIGMA, idx.shape)
    order = np.argsort(-noisy, axis=1)
    return _pair_code(np.take_along_axis(idx, order, axis=1), x.size)


@pytest.mark.parametrize("simulation", [False, True])
@pytest.mark.parametrize("runs", [R_FAST, pytest.param(R_SLOW, marks=pytest.mark.slow)])
def test_noisy_top_k_within_epsilon(simulation: bool, runs: int) -> None:
    loss = _audit(_topk(simulation), TOPK_D, TOPK_DP, runs, delta=DELTA_TOPK)
    assert loss <= _topk_bound()


def test_select_before_noise_is_caught() -> None:
    loss = _audit(_select_before_noise, TOPK_D, TOPK_DP, R_FAST, delta=DELTA_TOPK)
    assert loss > _topk_bound()


def test_noisy_score_channel_within_epsilon_and_small_sigma_caught() -> None:
    """The instrumented channel: document 0's noisy score itself (binned), μ = Δ/σ."""
    edges = np.linspace(-4, 4, 33)

    def run(sigma: float) -> Runner:
        m = GaussianNoisyTopK(sigma=sigma, k=4, grid=GRID)

        def inner(x: np.ndarray, runs: int, tag: str) -> np.ndarray:
            sel = m.select(
                np.tile(x, (runs, 1)), bits=ChaCha20Bits.derived(b"ch", (tag, str(sigma)))
            )
            score0 = sel.noisy_scores[sel.indices == 0]
            return np.digitize(score0, edges)

        return inner

    bound = _topk_bound()
    assert _audit(run(SIGMA), TOPK_D, TOPK_DP, R_FAST, delta=DELTA_TOPK) <= bound
    assert _audit(run(SIGMA * 0.5), TOPK_D, TOPK_DP, R_FAST, delta=DELTA_TOPK) > bound


# ---------------------------------------------------------------- exponential mechanism

EPS_EM = 1.0
EM_D = np.array([3, 1, 0, 0])
EM_DP = np.array([2, 2, 0, 0])  # one voter changed its vote


def _em(exponent_factor: float, simulation: bool = False) -> Runner:
    def run(x: np.ndarray, runs: int, tag: str) -> np.ndarray:
        eps = EPS_EM * exponent_factor
        if simulation:
            return exponential_mechanism(x, eps, size=runs, simulation=True, rng=len(tag))
        bits = ChaCha20Bits.derived(b"audit-em", (tag, str(eps)))
        return exponential_mechanism(x, eps, size=runs, bits=bits)

    return run


@pytest.mark.parametrize("simulation", [False, True])
@pytest.mark.parametrize("runs", [R_FAST, pytest.param(R_SLOW, marks=pytest.mark.slow)])
def test_exponential_mechanism_within_epsilon(simulation: bool, runs: int) -> None:
    assert _audit(_em(1.0, simulation), EM_D, EM_DP, runs) <= EPS_EM


def test_exponential_mechanism_without_the_half_is_caught() -> None:
    """exp(ε u) instead of exp(ε u / 2): the loss reaches 2ε."""
    assert _audit(_em(2.0), EM_D, EM_DP, R_FAST) > EPS_EM


def test_exponential_mechanism_matches_its_distribution() -> None:
    from scipy import stats

    from ragprivacy.dp import exponential_mechanism_probabilities

    u = np.array([4, 0, 2, 2, 7, 0, 1])
    p = exponential_mechanism_probabilities(u, 0.8)
    draws = exponential_mechanism(u, 0.8, size=50_000, bits=ChaCha20Bits.derived(b"em-gof"))
    counts = np.bincount(draws, minlength=u.size)
    assert stats.chisquare(counts, p * counts.sum()).pvalue > ALPHA


# ---------------------------------------------------------------- sparse vector

EPS_SV = 1.0
SV_D = np.array([2, 5, 3, 6, 4])
SV_DP = SV_D + 1  # every query moves by the sensitivity


def _sv(c: int, eps_used: float, below: bool = False) -> Runner:
    def run(x: np.ndarray, runs: int, tag: str) -> np.ndarray:
        bits = ChaCha20Bits.derived(b"audit-sv", (tag, c, str(eps_used), int(below)))
        pos = above_threshold(x, 5, eps_used, max_discoveries=c, below=below, runs=runs, bits=bits)
        return (pos + 1) @ (len(x) + 1) ** np.arange(c)  # the transcript as one code

    return run


@pytest.mark.parametrize(("c", "below"), [(1, False), (2, False), (2, True)])
@pytest.mark.parametrize("runs", [R_FAST, pytest.param(R_SLOW, marks=pytest.mark.slow)])
def test_sparse_vector_within_epsilon(c: int, below: bool, runs: int) -> None:
    tight = EPS_SV * (1 + c) / 2  # Lyu et al.; Private-RAG's c·ε is looser
    assert _audit(_sv(c, EPS_SV, below), SV_D, SV_DP, runs) <= tight


def test_sparse_vector_with_too_little_noise_is_caught() -> None:
    assert _audit(_sv(1, 4 * EPS_SV), SV_D, SV_DP, R_FAST) > EPS_SV


# ---------------------------------------------------------------- noisy prefix threshold

EPS_THR = 1.0
BINS_D = np.array([2, 1, 3, 2])
BINS_DP = np.array([2, 2, 3, 2])  # one document added to bin 1


def _prefix(eps_used: float, batched: bool = True) -> Runner:
    def run(x: np.ndarray, runs: int, tag: str) -> np.ndarray:
        root = ChaCha20Bits.derived(b"audit-prefix", (tag, str(eps_used)))
        if batched:  # the function's own vectorised core, one row per run
            return _prefix_stops(np.tile(x, (runs, 1)), 4, eps_used, False, None, root)[1]
        out = np.empty(runs, dtype=np.int64)
        for i in range(runs):
            res = noisy_prefix_threshold(x, 4, eps_used, bits=root.child(str(i)))
            out[i] = -1 if res.stop_bin is None else res.stop_bin
        return out

    return run


@pytest.mark.parametrize("runs", [R_FAST, pytest.param(R_SLOW, marks=pytest.mark.slow)])
def test_prefix_threshold_within_epsilon(runs: int) -> None:
    assert _audit(_prefix(EPS_THR), BINS_D, BINS_DP, runs) <= EPS_THR


def test_prefix_threshold_single_calls_within_epsilon() -> None:
    """The public one-query function, called run by run (fewer runs: it is slower)."""
    assert _audit(_prefix(EPS_THR, batched=False), BINS_D, BINS_DP, 2_000) <= EPS_THR


def test_prefix_threshold_with_too_little_noise_is_caught() -> None:
    assert _audit(_prefix(4 * EPS_THR), BINS_D, BINS_DP, R_FAST) > EPS_THR
