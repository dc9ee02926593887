"""The account (dp.account): one policy, one counter, one noise-then-select."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ragprivacy.dp import (
    DEFAULT_SCORE_RANGE,
    PAPER_SCORE_RANGE,
    AccountCounter,
    AccountPolicy,
    ChaCha20Bits,
    GaussianEvent,
    GaussianNoisyTopK,
    Grid,
    calibrate_account_sigma,
    derived_bits,
)
from ragprivacy.errors import BudgetExhaustedError, ConfigError

SEED = bytes(range(32))


def test_one_default_score_range_everywhere() -> None:
    assert DEFAULT_SCORE_RANGE == (-1.0, 1.0) and PAPER_SCORE_RANGE == (0.0, 1.0)
    policy = AccountPolicy(rate_limit=10, epsilon=1.0)
    assert policy.score_range == DEFAULT_SCORE_RANGE and policy.sensitivity == 2.0
    assert GaussianNoisyTopK(sigma=1.0, k=1).score_range == DEFAULT_SCORE_RANGE


def test_policy_sigma_is_the_one_calibration() -> None:
    for method in ("paper", "exact", "analytic", "rdp"):
        policy = AccountPolicy(rate_limit=100, epsilon=2.0, delta=1e-6, calibration=method)
        want = calibrate_account_sigma(2.0, 1e-6, 100, sensitivity=2.0, method=method)
        assert policy.noise_sigma == want
        # clipped scores charge Δ exactly in both modes, so both modes share σ
        assert policy.mechanism(3).sigma == want == policy.mechanism(3, simulation=True).sigma
    fixed = AccountPolicy(rate_limit=100, epsilon=2.0, sigma=0.25)
    assert fixed.noise_sigma == 0.25 == fixed.mechanism(3).sigma
    trusted = AccountPolicy(rate_limit=100, epsilon=2.0, score_range=None, sensitivity=1.0)
    grid = Grid(bits=8)
    mech = trusted.mechanism(3, grid=grid)  # unclipped secure scores: one grid unit more
    assert mech.event.sensitivity == grid.rounded_sensitivity(1.0)
    assert mech.sigma == trusted.sigma_for(grid.rounded_sensitivity(1.0)) > trusted.noise_sigma


def test_counter_is_all_or_nothing_and_releases() -> None:
    c = AccountCounter(5)
    r = c.reserve("x", 4)
    with pytest.raises(BudgetExhaustedError):
        c.reserve("x", 2)
    assert c.used("x") == 4
    c.release(r)
    assert c.used("x") == 0 and c.remaining("x") == 5
    assert c.reserve("y", 2, limit=2).count == 2  # a per-account limit
    with pytest.raises(BudgetExhaustedError):
        c.reserve("y", 1, limit=2)
    with pytest.raises(ConfigError, match="no default limit"):
        AccountCounter().reserve("z")


def test_a_release_from_a_closed_window_refunds_nothing() -> None:
    c = AccountCounter(3)
    stale = c.reserve("x", 2)
    c.open_window()
    fresh = c.reserve("x", 3)
    c.release(stale)  # a slow failure of the old window cannot refund the new one
    assert c.used("x") == 3
    c.release_tokens("x", 3, (fresh.token,))
    assert c.used("x") == 0


def test_counter_is_atomic_across_threads() -> None:
    c = AccountCounter(100)
    granted: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            try:
                c.reserve("x", 1)
            except BudgetExhaustedError:
                continue
            with lock:
                granted.append(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 100 == c.used("x")


def test_select_is_the_integer_rule_on_grid_scores() -> None:
    """The float interface and the integer rule the audit commits to select the same."""
    rng = np.random.default_rng(0)
    grid = Grid(bits=20)
    mech = GaussianNoisyTopK(sigma=0.05, k=4, grid=grid, score_range=(-0.5, 0.75))
    for i in range(20):
        scores = rng.uniform(-1.5, 1.5, 40)
        rec = ("a", "t", f"h{i}", i)
        got = mech.select(scores, bits=derived_bits(SEED, rec))
        units = grid.to_units(np.clip(scores, -0.5, 0.75))
        z = mech.noise_units(scores.size, bits=derived_bits(SEED, rec))
        np.testing.assert_array_equal(got.indices, mech.select_units(units, z))
    lo, hi = mech.bounds_units()  # type: ignore[misc]
    assert (lo, hi) == (-(2**19), 3 * 2**18)
    # clipped secure scores move by at most the range's width: Δ charged exactly
    assert mech.event == GaussianEvent(sigma=0.05, sensitivity=1.25)


def test_inward_rounded_bounds_keep_delta_for_off_grid_ranges() -> None:
    mech = GaussianNoisyTopK(sigma=1.0, k=1, grid=Grid(bits=4), score_range=(-0.3, 0.7))
    assert mech.bounds_units() == (-4, 11)  # ⌈-4.8⌉, ⌊11.2⌋: 15 units ≤ 16 = Δ·2^4
    assert mech.clip_units(np.array([-100, 0, 100])).tolist() == [-4, 0, 11]
    with pytest.raises(ConfigError, match="One noise value per score"):
        mech.select_units(np.zeros(3, dtype=np.int64), np.zeros(2, dtype=np.int64))
    with pytest.raises(ConfigError, match="secure path"):
        GaussianNoisyTopK(sigma=1.0, k=1, simulation=True).noise_units(3)


def test_derived_bits_are_bound_to_the_record() -> None:
    a = derived_bits(SEED, ("acct", "t", "h", 1)).random_bytes(32)
    assert a == derived_bits(SEED, ("acct", "t", "h", 1)).random_bytes(32)
    assert a != derived_bits(SEED, ("acct", "t", "h", 2)).random_bytes(32)
    # labelled: not the plain derivation of the same record
    assert a != ChaCha20Bits.derived(SEED, ("acct", "t", "h", 1)).random_bytes(32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("score_range", [(-1.0, 1.0), (0.0, 0.3), None])
def test_secure_select_is_the_integer_rule(
    dtype: type, score_range: tuple[float, float] | None
) -> None:
    # The in-place select must equal the audited integer rule on the same noise:
    # select_units(clip_units(to_units(clip(scores))), noise_units(...)).
    gen = np.random.default_rng(4)
    scores = gen.uniform(-1.5, 1.5, (3, 5000)).astype(dtype)
    scores[0, :7] = 0.25  # ties at the top
    mech = GaussianNoisyTopK(
        sigma=0.01, k=6, score_range=score_range, sensitivity=None if score_range else 3.0
    )
    sel = mech.select(scores, bits=ChaCha20Bits.derived(bytes(32), "q"))
    arr = np.asarray(scores, dtype=np.float64)
    if score_range is not None:
        arr = np.clip(arr, *score_range)
    units = mech.clip_units(mech.grid.to_units(arr))
    noise = mech.noise_units(arr.shape, bits=ChaCha20Bits.derived(bytes(32), "q"))
    want = mech.select_units(units, noise)
    assert np.array_equal(sel.indices, want)
    picked = mech.grid.from_units(np.take_along_axis(units + noise, want, axis=-1))
    assert np.array_equal(sel.noisy_scores, picked)
