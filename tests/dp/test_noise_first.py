"""Noise-first selection (GaussianNoisyTopK.select_noise_first): the full path's output, bit
for bit, from the scores of the candidates the noise leaves in the race."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ragprivacy.dp import ChaCha20Bits, GaussianNoisyTopK, Grid, NoisySelection
from ragprivacy.dp.account import NOISE_FIRST_MAX_FRACTION
from ragprivacy.errors import ConfigError

SIGMAS = (0.01, 0.1, 0.5, 2.0, 10.0, 145.0, 5000.0)
KS = (1, 2, 5, 20)


class Recorder:
    """The score callbacks of one call, recording what was asked."""

    def __init__(self, scores: np.ndarray) -> None:
        self.scores = scores
        self.positions: list[tuple[int, np.ndarray]] = []
        self.full_calls = 0

    def at(self, row: int, positions: np.ndarray) -> np.ndarray:
        self.positions.append((row, np.array(positions)))
        return self.scores[positions] if self.scores.ndim == 1 else self.scores[row, positions]

    def all(self) -> np.ndarray:
        self.full_calls += 1
        return self.scores

    @property
    def scored(self) -> int:
        return sum(p.size for _, p in self.positions)


def _noise(mech: GaussianNoisyTopK, seed: int) -> dict:
    if mech.simulation:
        return {"rng": seed}
    return {"bits": ChaCha20Bits.derived(bytes(32), ("noise-first", seed))}


def _both(
    mech: GaussianNoisyTopK, scores: np.ndarray, seed: int, **kw: object
) -> tuple[NoisySelection, NoisySelection, Recorder]:
    full = mech.select(scores, **_noise(mech, seed))
    rec = Recorder(scores)
    lazy = mech.select_noise_first(
        scores.shape if scores.ndim == 2 else scores.shape[0],
        rec.at,
        score_all=rec.all,
        **_noise(mech, seed),
        **kw,  # type: ignore[arg-type]
    )
    return full, lazy, rec


def _same(a: NoisySelection, b: NoisySelection) -> bool:
    return (
        a.indices.dtype == b.indices.dtype
        and np.array_equal(a.indices, b.indices)
        and a.noisy_scores.dtype == b.noisy_scores.dtype
        and np.array_equal(a.noisy_scores, b.noisy_scores)
        and a.event == b.event
        and a.event_per_query == b.event_per_query
    )


def _scores(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: type, ties: bool
) -> np.ndarray:
    if ties:  # few distinct values, some outside the range (clipped to its ends: more ties)
        return rng.choice(np.array([-1.5, -0.25, 0.0, 0.5, 1.0, 2.0]), size=shape).astype(dtype)
    return rng.uniform(-1.3, 1.3, size=shape).astype(dtype)


@pytest.mark.parametrize("simulation", [True, False], ids=["float", "secure"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_identical_to_the_full_path_over_seeds_sigmas_ks(simulation: bool, dtype: type) -> None:
    rng = np.random.default_rng(7)
    lazy_runs = fallback_runs = 0
    for sigma in SIGMAS:
        for k in KS:
            mech = GaussianNoisyTopK(sigma=sigma, k=k, simulation=simulation)
            for seed in range(4):
                ties = seed % 2 == 1
                shape = (3, 600) if seed >= 2 else (600,)
                scores = _scores(rng, shape, dtype, ties)
                full, lazy, rec = _both(mech, scores, seed)
                assert _same(full, lazy), (sigma, k, seed)
                if rec.full_calls:
                    fallback_runs += 1
                    assert rec.positions == []
                else:
                    lazy_runs += 1
                    assert rec.scored < scores.size
    # Both branches ran: the fallback at small σ, candidates only at large σ.
    assert lazy_runs > 40 and fallback_runs > 10


@pytest.mark.parametrize("simulation", [True, False], ids=["float", "secure"])
def test_large_sigma_scores_a_handful_and_small_sigma_falls_back(simulation: bool) -> None:
    scores = np.random.default_rng(1).uniform(-1, 1, 20_000)
    big = GaussianNoisyTopK(sigma=3584.0, k=5, simulation=simulation)
    full, lazy, rec = _both(big, scores, 3)
    assert _same(full, lazy)
    assert rec.full_calls == 0 and 5 <= rec.scored <= 20  # ~K of 20,000 scored
    row, asked = rec.positions[0]
    assert row == 0 and np.all(np.diff(asked) > 0)  # sorted by position
    small = GaussianNoisyTopK(sigma=0.05, k=5, simulation=simulation)
    full, lazy, rec = _both(small, scores, 3)
    assert _same(full, lazy)
    assert rec.full_calls == 1 and rec.positions == []


@pytest.mark.parametrize("simulation", [True, False], ids=["float", "secure"])
def test_fallback_without_score_all_and_the_fraction_knob(simulation: bool) -> None:
    scores = np.random.default_rng(2).uniform(-1, 1, (2, 400))
    mech = GaussianNoisyTopK(sigma=0.3, k=3, simulation=simulation)
    full = mech.select(scores, **_noise(mech, 5))
    rec = Recorder(scores)
    got = mech.select_noise_first(scores.shape, rec.at, **_noise(mech, 5))
    assert _same(full, got)
    assert [r for r, _ in rec.positions] == [0, 1]
    assert all(p.size == 400 for _, p in rec.positions)  # every position, per row
    # max_fraction=1 never falls back: the candidates are scored whatever their number.
    rec = Recorder(scores)
    got = mech.select_noise_first(
        scores.shape, rec.at, score_all=rec.all, max_fraction=1.0, **_noise(mech, 5)
    )
    assert _same(full, got) and rec.full_calls == 0
    assert NOISE_FIRST_MAX_FRACTION == 0.0625


@pytest.mark.parametrize("bits", [0, 2])
def test_integer_ties_in_secure_mode(bits: int) -> None:
    # A coarse grid and a small σ in units make many noisy integer scores equal: the
    # order must still be the full path's (ties to the lower position).
    rng = np.random.default_rng(bits)
    ties_seen = 0
    for sigma in (1.0, 2.0, 8.0):
        for k in (1, 3, 10):
            mech = GaussianNoisyTopK(sigma=sigma, k=k, grid=Grid(bits=bits))
            for seed in range(6):
                scores = rng.choice([-1.0, -0.5, 0.0, 0.25, 1.0], size=(2, 300))
                full, lazy, _ = _both(mech, scores, seed, max_fraction=1.0)
                assert _same(full, lazy), (sigma, k, seed)
                units = np.rint(full.noisy_scores * 2.0**bits)
                ties_seen += int((np.diff(units, axis=1) == 0).sum())
    assert ties_seen > 0


def test_equal_scores_everywhere() -> None:
    for simulation in (True, False):
        mech = GaussianNoisyTopK(sigma=1e-2, k=4, simulation=simulation, grid=Grid(bits=10))
        scores = np.zeros(50)
        full, lazy, _ = _both(mech, scores, 0, max_fraction=1.0)
        assert _same(full, lazy)


def test_fewer_documents_than_k() -> None:
    for simulation in (True, False):
        mech = GaussianNoisyTopK(sigma=1.0, k=8, simulation=simulation)
        scores = np.array([0.3, -0.2, 0.9])
        full, lazy, rec = _both(mech, scores, 1, max_fraction=1.0)
        assert _same(full, lazy) and lazy.indices.shape == (3,)
        assert rec.scored == 3


def test_float32_rounded_range_ends_are_covered() -> None:
    # np.clip of float32 scores rounds the range's ends to float32 (0.1 -> 0.10000000149):
    # the bounds used for the candidates must cover the rounded end.
    mech = GaussianNoisyTopK(sigma=1e-9, k=3, simulation=True, score_range=(-0.7, 0.1))
    lo, hi = mech.noise_bounds()
    assert hi == float(np.float32(0.1)) > 0.1 and lo == -0.7
    scores = np.full(200, 5.0, dtype=np.float32)  # every score clipped to the top end
    for seed in range(20):
        full, lazy, _ = _both(mech, scores, seed, max_fraction=1.0)
        assert _same(full, lazy)


def test_float_candidates_are_exactly_the_rule_near_the_cut() -> None:
    """C = {i : fl(z_i + hi) >= T}, T the K-th largest of fl(z + lo), computed naively,
    against noise_first_positions (a cut on z alone, then the exact test), with noise
    values planted within a few ulps of the cut. Rounding makes z_i < fl(T - hi) with
    fl(z_i + hi) >= T happen (a few % of cuts): a cut on z without slack fails here."""
    rng = np.random.default_rng(8)
    below_cut = 0
    for score_range in ((-1.0, 1.0), (0.0, 1.0), (-0.7, 0.1), (-0.3, 0.7), (0.0, 1 / 3)):
        mech = GaussianNoisyTopK(sigma=1.0, k=3, simulation=True, score_range=score_range)
        lo, hi = mech.noise_bounds()
        for _ in range(40):
            z = rng.standard_normal(1000) * 10.0 ** rng.uniform(-3, 8)
            t = np.partition(z + lo, 1000 - 3)[1000 - 3]
            cut = t - hi
            z[:40] = cut + np.arange(-20, 20) * np.spacing(cut)
            t = np.partition(z + lo, 1000 - 3)[1000 - 3]
            naive = np.flatnonzero(z + hi >= t)
            np.testing.assert_array_equal(mech.noise_first_positions(z), naive)
            below_cut += int((z[naive] < t - hi).sum())
    assert below_cut > 0  # the case the slack is for occurred


@pytest.mark.parametrize("simulation", [True, False], ids=["float", "secure"])
def test_padding_to_a_constant_count_changes_nothing(simulation: bool) -> None:
    rng = np.random.default_rng(9)
    for sigma in (0.5, 30.0, 3584.0):
        mech = GaussianNoisyTopK(sigma=sigma, k=5, simulation=simulation)
        for seed in range(5):
            scores = rng.uniform(-1, 1, (2, 4000))
            full = mech.select(scores, **_noise(mech, seed))
            rec = Recorder(scores)
            got = mech.select_noise_first(
                scores.shape, rec.at, score_all=rec.all, min_scored=64, **_noise(mech, seed)
            )
            assert _same(full, got)
            sizes = [p.size for _, p in rec.positions]
            if sigma > 1:  # |C| < 64: exactly 64 scored per row, sorted, a superset of C
                assert sizes == [64, 64]
                assert all(np.all(np.diff(p) > 0) for _, p in rec.positions)
    # Padding past n scores every position (still through score_at, still exact).
    scores = rng.uniform(-1, 1, 30)
    full = mech.select(scores, **_noise(mech, 1))
    rec = Recorder(scores)
    assert _same(full, mech.select_noise_first(30, rec.at, min_scored=64, **_noise(mech, 1)))
    assert [p.size for _, p in rec.positions] == [30]
    with pytest.raises(ConfigError, match="min_scored"):
        mech.select_noise_first(30, rec.at, min_scored=-1, **_noise(mech, 1))


def test_candidates_depend_on_the_noise_only() -> None:
    rng = np.random.default_rng(3)
    for simulation in (True, False):
        mech = GaussianNoisyTopK(sigma=2.0, k=5, simulation=simulation)
        asked = []
        for scores in (rng.uniform(-1, 1, 3000), -np.ones(3000), rng.uniform(-9, 9, 3000)):
            _, _, rec = _both(mech, scores, 11)
            assert rec.full_calls == 0
            asked.append(rec.positions[0][1])
        assert all(np.array_equal(asked[0], a) for a in asked[1:])


def test_the_integer_rule_for_a_re_execution() -> None:
    rng = np.random.default_rng(4)
    for sigma in (0.001, 0.5, 145.0):
        mech = GaussianNoisyTopK(sigma=sigma, k=5)
        lo, hi = mech.bounds_units()  # type: ignore[misc]
        for seed in range(5):
            units = rng.integers(lo - 1000, hi + 1000, size=2000)
            units[::7] = units[0]  # integer ties
            z = mech.noise_units(2000, bits=ChaCha20Bits.derived(bytes(32), ("re", seed)))
            asked: list[np.ndarray] = []

            def at(p: np.ndarray, units: np.ndarray = units, asked: list = asked) -> np.ndarray:
                asked.append(p)
                return units[p]

            got = mech.select_units_noise_first(z, at, max_fraction=1.0)  # C alone
            np.testing.assert_array_equal(got, mech.select_units(units, z))
            assert len(asked) == 1 and np.array_equal(asked[0], mech.noise_first_positions(z))


def test_a_planted_bug_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """T from z + hi (instead of z + lo) keeps too few candidates: the harness must see it."""

    def wrong(self: GaussianNoisyTopK, noise: np.ndarray) -> np.ndarray:
        z = np.asarray(noise)
        _, hi = self.noise_bounds()
        n, k = z.size, self.k
        t = np.partition(z + hi, n - k)[n - k]
        return np.flatnonzero(z + hi >= t).astype(np.int64)

    def mismatches() -> int:
        rng = np.random.default_rng(5)
        bad = 0
        for simulation in (True, False):
            mech = GaussianNoisyTopK(sigma=0.5, k=5, simulation=simulation)
            for seed in range(10):
                full, lazy, _ = _both(mech, rng.uniform(-1, 1, 500), seed)
                bad += not _same(full, lazy)
        return bad

    assert mismatches() == 0
    monkeypatch.setattr(GaussianNoisyTopK, "noise_first_positions", wrong)
    assert mismatches() > 5


def test_bad_input_is_refused() -> None:
    trusted = GaussianNoisyTopK(sigma=1.0, k=2, score_range=None, sensitivity=1.0)
    ones: Callable[[int, np.ndarray], np.ndarray] = lambda _, p: np.ones(len(p))  # noqa: E731
    with pytest.raises(ConfigError, match="score_range"):
        trusted.select_noise_first(10, ones)
    mech = GaussianNoisyTopK(sigma=100.0, k=2, simulation=True)
    with pytest.raises(ConfigError, match="max_fraction"):
        mech.select_noise_first(10, ones, rng=0, max_fraction=0.0)
    with pytest.raises(ConfigError, match="shape"):
        mech.select_noise_first((2, 0), ones, rng=0)
    with pytest.raises(ConfigError, match="returned"):
        mech.select_noise_first(1000, lambda _, p: np.ones(len(p) + 1), rng=0)
    with pytest.raises(ConfigError, match="finite"):
        mech.select_noise_first(1000, lambda _, p: np.full(len(p), np.nan), rng=0)
    with pytest.raises(ConfigError, match=r"simulation|rng"):
        mech.select_noise_first(10, ones, bits=ChaCha20Bits.derived(bytes(32), "x"))
    with pytest.raises(ConfigError, match="shape"):
        GaussianNoisyTopK(sigma=0.01, k=2, simulation=True).select_noise_first(
            10, ones, score_all=lambda: np.ones(11), rng=0
        )
