"""The lazy noise-then-select is distributed exactly as full noise-then-select.

Two-sample χ² test of homogeneity on the ordered top-2 output (false-alarm rate
α = 1e-4 per test, fixed seeds), against the full-noise reference
(``GaussianNoisyTopK`` in simulation mode); a planted bug (candidates only, no
exceedance draws — select-before-noise) must be rejected.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from ragprivacy.dp import GaussianNoisyTopK
from ragprivacy.retrieval import lazy_noisy_topk

N, K, C = 40, 2, 6
SCORES = np.sort(np.random.default_rng(11).uniform(0.0, 0.8, N))[::-1].copy()
SCORES[:3] = [0.95, 0.9, 0.88]
CAND = np.arange(C)  # the exact top-C (noise-independent)
BOUND = float(SCORES[C])  # certified: every non-candidate scores at most this


def _lazy(draws: int, sigma: float, *, seed: int, planted: bool = False) -> list[tuple[int, ...]]:
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        if planted:  # the bug: noise only the candidates (select before noise)
            noisy = SCORES[CAND] + gen.normal(0, sigma, C)
            out.append(tuple(CAND[np.argsort(-noisy)[:K]].tolist()))
            continue
        sel = lazy_noisy_topk(
            CAND, SCORES[CAND], N, K, sigma, score_of=SCORES, bound=BOUND, rng=gen
        )
        out.append(tuple(sel.indices.tolist()))
    return out


def _full(draws: int, sigma: float, *, seed: int) -> list[tuple[int, ...]]:
    mech = GaussianNoisyTopK(sigma=sigma, k=K, simulation=True)
    sel = mech.select(np.tile(SCORES, (draws, 1)), rng=seed)
    return [tuple(row) for row in sel.indices.tolist()]


def _pvalue(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> float:
    keys = sorted(set(a) | set(b))
    A, B = Counter(a), Counter(b)
    rows, other = [], [0, 0]
    for k in keys:
        if A[k] + B[k] >= 20:
            rows.append([A[k], B[k]])
        else:
            other[0] += A[k]
            other[1] += B[k]
    if sum(other):
        rows.append(other)
    return float(chi2_contingency(np.array(rows))[1])


@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [0.05, 0.3])
def test_lazy_matches_full_noise(sigma: float) -> None:
    draws = 20_000
    lazy = _lazy(draws, sigma, seed=1)
    full = _full(draws, sigma, seed=2)
    assert _pvalue(lazy, full) > 1e-4


@pytest.mark.statistical
def test_fallback_path_matches_full_noise() -> None:
    # σ large: many non-candidates can exceed τ, so the fallback (full noise for the
    # non-candidates, candidates' noise kept) runs; the law must still be exact.
    gen = np.random.default_rng(5)
    fell = 0
    out = []
    for _ in range(8000):
        sel = lazy_noisy_topk(
            CAND,
            SCORES[CAND],
            N,
            K,
            3.0,
            score_of=SCORES,
            bound=BOUND,
            max_exceed_fraction=0.05,
            rng=gen,
        )
        fell += sel.fell_back
        out.append(tuple(sel.indices.tolist()))
    assert fell > 4000
    assert _pvalue(out, _full(8000, 3.0, seed=6)) > 1e-4


@pytest.mark.statistical
def test_planted_bug_is_caught() -> None:
    assert _pvalue(_lazy(20_000, 0.3, seed=3, planted=True), _full(20_000, 0.3, seed=4)) < 1e-4


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [0.05, 0.3, 1.0])
def test_lazy_matches_full_noise_1e5(sigma: float) -> None:
    draws = 100_000
    assert _pvalue(_lazy(draws, sigma, seed=7), _full(draws, sigma, seed=8)) > 1e-4


def test_lazy_checks_its_inputs() -> None:
    from ragprivacy.errors import ConfigError

    with pytest.raises(ConfigError, match="at least k"):
        lazy_noisy_topk(CAND[:1], SCORES[:1], N, K, 0.1, score_of=SCORES, bound=1.0, rng=0)
    sel = lazy_noisy_topk(CAND, SCORES[CAND], N, K, 1e-4, score_of=SCORES, bound=BOUND, rng=0)
    assert sel.indices.tolist() == [0, 1] and sel.exceedances == 0
