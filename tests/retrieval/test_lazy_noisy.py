"""The lazy noise-then-select is distributed exactly as full noise-then-select.

Two-sample χ² test of homogeneity on the ordered top-2 output (false-alarm rate
α = 1e-4 per test, fixed seeds), against the full-noise reference
(``GaussianNoisyTopK`` in simulation mode), with one global bound and with per-bucket
bounds (one round, several rounds, and the fallback). Planted bugs must be rejected:
noising only the candidates (select before noise) and a per-bucket bound that is not
certified (below some member's score).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import chi2_contingency, ks_2samp

from ragprivacy.dp import GaussianNoisyTopK
from ragprivacy.errors import ConfigError
from ragprivacy.retrieval import BucketBounds, lazy_noisy_topk
from ragprivacy.retrieval import lazy_noisy as lazy_module

N, K, C = 40, 2, 6
SCORES = np.sort(np.random.default_rng(11).uniform(0.0, 0.8, N))[::-1].copy()
SCORES[:3] = [0.95, 0.9, 0.88]
CAND = np.arange(C)  # the exact top-C (noise-independent)
BOUND = float(SCORES[C])  # certified: every non-candidate scores at most this

# Four buckets of interleaved positions (any noise-independent partition is valid).
_LAB = np.arange(N) % 4
_ORDER = np.argsort(_LAB, kind="stable")
_INV = np.empty(N, dtype=np.int64)
_INV[_ORDER] = np.arange(N)
BUCKETS = BucketBounds(
    centroids=np.zeros((4, 1)),
    radii=np.zeros(4),
    order=_ORDER,
    starts=np.concatenate([[0], np.cumsum(np.bincount(_LAB))]),
    inverse=_INV,
)
# Tight certified per-bucket bounds on the non-candidates: very different per bucket.
UB = np.array([SCORES[(np.arange(N) >= C) & np.equal(_LAB, b)].max() for b in range(4)])


def _lazy(
    draws: int,
    sigma: float,
    *,
    seed: int,
    buckets: bool = False,
    bound: np.ndarray | float | None = None,
    planted: bool = False,
    **kw: float,
) -> list[tuple[int, ...]]:
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        if planted:  # the bug: noise only the candidates (select before noise)
            noisy = SCORES[CAND] + gen.normal(0, sigma, C)
            out.append(tuple(CAND[np.argsort(-noisy)[:K]].tolist()))
            continue
        b = bound if bound is not None else (UB if buckets else BOUND)
        sel = lazy_noisy_topk(
            CAND,
            SCORES[CAND],
            N,
            K,
            sigma,
            score_of=SCORES,
            bound=b,
            buckets=BUCKETS if buckets else None,
            rng=gen,
            **kw,  # type: ignore[arg-type]
        )
        out.append(tuple(sel.indices.tolist()))
    return out


def _full(draws: int, sigma: float, *, seed: int) -> list[tuple[int, ...]]:
    mech = GaussianNoisyTopK(sigma=sigma, k=K, simulation=True, sensitivity=1.0)
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
@pytest.mark.parametrize(
    ("sigma", "buckets", "frac"), [(0.3, False, 0.1), (0.1, True, 0.1), (2.0, True, 1.0)]
)
def test_lazy_matches_full_noise(sigma: float, buckets: bool, frac: float) -> None:
    # frac = 1.0 lets the rounds run (about half the draws take 2–3 rounds at σ = 2);
    # frac = 0.1 at n = 40 sends about half the draws to the fallback.
    draws = 8000
    lazy = _lazy(draws, sigma, seed=1, buckets=buckets, max_reveal_fraction=frac)
    assert _pvalue(lazy, _full(draws, sigma, seed=2)) > 1e-4


@pytest.mark.statistical
def test_fallback_path_matches_full_noise() -> None:
    # A tiny reveal budget: the rounds give up and noise every remaining non-candidate
    # (truncated below the levels already passed); the law must still be exact.
    gen = np.random.default_rng(5)
    fell = 0
    out = []
    for _ in range(4000):
        sel = lazy_noisy_topk(
            CAND,
            SCORES[CAND],
            N,
            K,
            3.0,
            score_of=SCORES,
            bound=UB,
            buckets=BUCKETS,
            max_reveal_fraction=0.05,
            rng=gen,
        )
        fell += sel.fell_back
        out.append(tuple(sel.indices.tolist()))
    assert fell > 2000
    assert _pvalue(out, _full(4000, 3.0, seed=6)) > 1e-4


def _fallback_after_rounds(
    draws: int, *, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Lazy selections at n = 400 where the first round reveals a few documents (so the
    truncation points h are finite) and the next falls back; and the full reference."""
    n, c, sigma = 400, 6, 0.2
    scores = np.sort(np.random.default_rng(11).uniform(0.0, 0.8, n))[::-1].copy()
    scores[:3] = [0.95, 0.9, 0.88]
    gen = np.random.default_rng(seed)
    idx, top, after_rounds = [], [], 0
    for _ in range(draws):
        sel = lazy_noisy_topk(
            np.arange(c),
            scores[:c],
            n,
            K,
            sigma,
            score_of=scores,
            bound=float(scores[c]),
            max_reveal_fraction=0.02,
            rng=gen,
        )
        after_rounds += sel.fell_back and sel.rounds > 1
        idx.append(int(sel.indices[0]))
        top.append(float(sel.noisy_scores[0]))
    full = GaussianNoisyTopK(sigma=sigma, k=K, simulation=True, sensitivity=1.0).select(
        np.tile(scores, (draws, 1)), rng=seed + 1
    )
    return np.array(idx), np.array(top), full.indices[:, 0], full.noisy_scores[:, 0], after_rounds


def _group_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """χ² homogeneity of the top-1 position, in 16 groups of 25 positions (best first)."""
    table = np.array([np.bincount(a // 25, minlength=16), np.bincount(b // 25, minlength=16)]).T
    return float(chi2_contingency(table[table.sum(axis=1) > 0])[1])


@pytest.mark.statistical
def test_fallback_after_rounds_matches_full_noise() -> None:
    # The fallback draws every remaining document's noise with the plain sampler and
    # replaces the draws above their bucket's h (the levels already passed) by truncated
    # ones. Output law = full noise: χ² on the top-1 position, KS on its noisy score.
    idx, top, ref_idx, ref_top, after_rounds = _fallback_after_rounds(4000, seed=1)
    assert after_rounds > 1500
    assert _group_pvalue(idx, ref_idx) > 1e-4
    assert ks_2samp(top, ref_top).pvalue > 1e-4


@pytest.mark.statistical
def test_fallback_without_truncation_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # Planted bug: the fallback ignores the levels already passed (plain N(0, 1) for the
    # unrevealed documents, which are known to lie below h): far too many high scores.
    monkeypatch.setattr(lazy_module, "_redraw_above", lambda *args: None)
    _, top, _, ref_top, _ = _fallback_after_rounds(4000, seed=1)
    assert ks_2samp(top, ref_top).pvalue < 1e-8


@pytest.mark.statistical
def test_planted_bugs_are_caught() -> None:
    full = _full(8000, 0.3, seed=4)
    assert _pvalue(_lazy(8000, 0.3, seed=3, planted=True), full) < 1e-4
    # A bound that is not certified (0.15 below the true per-bucket maxima).
    assert _pvalue(_lazy(8000, 0.3, seed=3, buckets=True, bound=UB - 0.15), full) < 1e-4


def test_rounds_reveal_few_documents_at_large_sigma() -> None:
    # At large σ one threshold at the K-th noisy candidate would noise ~N·K/C documents;
    # the intermediate levels raise τ first and reveal far fewer.
    n, c = 100_000, 64
    scores = np.random.default_rng(0).uniform(0.0, 0.5, n)
    cand = np.argsort(-scores)[:c]
    sel = [
        lazy_noisy_topk(
            cand, scores[cand], n, 5, 50.0, score_of=scores, bound=0.5, rng=np.random.default_rng(s)
        )
        for s in range(20)
    ]
    assert max(s.revealed for s in sel) < 200 < n * 5 / c
    assert all(not s.fell_back for s in sel) and max(s.rounds for s in sel) > 1


def test_bucket_bounds_are_certified() -> None:
    gen = np.random.default_rng(3)
    x = gen.standard_normal((3000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    bb = BucketBounds.build(x, buckets=20, rng=1)
    assert bb.n == 3000 and bb.count == 20 and bb.sizes.sum() == 3000
    assert np.array_equal(np.sort(bb.order), np.arange(3000))
    assert np.array_equal(bb.order[bb.inverse], np.arange(3000))
    lab = bb.bucket_of(np.arange(3000))
    for q in gen.standard_normal((20, 16)):
        assert np.all(x @ q.astype(np.float32) <= bb.bounds(q)[lab])
    with pytest.raises(ConfigError, match="dimensions"):
        bb.bounds(np.ones(3))


def test_lazy_checks_its_inputs() -> None:
    with pytest.raises(ConfigError, match="at least k"):
        lazy_noisy_topk(CAND[:1], SCORES[:1], N, K, 0.1, score_of=SCORES, bound=1.0, rng=0)
    with pytest.raises(ConfigError, match="one finite bound per bucket"):
        lazy_noisy_topk(CAND, SCORES[CAND], N, K, 0.1, score_of=SCORES, bound=1.0, buckets=BUCKETS)
    sel = lazy_noisy_topk(CAND, SCORES[CAND], N, K, 1e-4, score_of=SCORES, bound=BOUND, rng=0)
    assert sel.indices.tolist() == [0, 1] and sel.revealed == 0 and sel.rounds == 1


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize(
    ("sigma", "buckets", "frac"),
    [
        (0.05, False, 0.1),
        (0.3, False, 1.0),
        (1.0, False, 0.1),
        (0.05, True, 0.1),
        (0.3, True, 1.0),
        (3.0, True, 1.0),
    ],
)
def test_lazy_matches_full_noise_1e5(sigma: float, buckets: bool, frac: float) -> None:
    draws = 100_000
    lazy = _lazy(draws, sigma, seed=7, buckets=buckets, max_reveal_fraction=frac)
    assert _pvalue(lazy, _full(draws, sigma, seed=8)) > 1e-4
