"""The audited provider's selection reads only the slots its noise leaves in the race,
and picks exactly what the verifier's full rule picks (collusion paper eq. 2.1)."""

from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.audit import exact_selection
from ragprivacy.dp import ChaCha20Bits, GaussianNoisyTopK


def _mechanism(sigma: float, k: int) -> GaussianNoisyTopK:
    return GaussianNoisyTopK(sigma=sigma, k=k, score_range=(-1.0, 1.0))


@pytest.mark.parametrize("sigma", [0.001, 0.05, 0.5, 5.0, 145.0, 3584.0])
@pytest.mark.parametrize("k", [1, 5, 20])
def test_same_positions_as_the_full_rule(sigma: float, k: int) -> None:
    m = _mechanism(sigma, k)
    lo, hi = m.bounds_units()  # type: ignore[misc]
    for seed in range(8):
        rng = np.random.default_rng([seed, k])
        n = int(rng.integers(k + 1, 3000))
        # integer scores in and beyond the range (clipping matters), with ties
        scores = rng.integers(lo - (hi - lo) // 4, hi + (hi - lo) // 4, size=n)
        scores[rng.integers(0, n, size=n // 3)] = scores[0]
        z = m.noise_units(n, bits=ChaCha20Bits.derived(bytes(32), f"{seed}-{k}-{sigma}"))
        asked: list[int] = []

        def score_at(
            pos: np.ndarray, scores: np.ndarray = scores, asked: list[int] = asked
        ) -> np.ndarray:
            asked.append(int(np.asarray(pos).size))
            return scores[np.asarray(pos)]

        got = exact_selection(m, z, score_at)
        np.testing.assert_array_equal(got, m.select_units(scores, z))
        assert len(asked) == 1


def test_large_sigma_reads_a_constant_handful_of_slots() -> None:
    m = _mechanism(145.0, 5)  # the audit's σ at r = 6, Δ = 2
    scores = np.zeros(100_000, dtype=np.int64)
    sizes = set()
    for seed in range(5):
        z = m.noise_units(scores.size, bits=ChaCha20Bits.derived(bytes(32), str(seed)))
        exact_selection(m, z, lambda pos: sizes.add(int(np.asarray(pos).size)) or scores[pos])
    assert sizes == {64}  # max(64, 8K): the count read does not depend on the noise


def test_small_sigma_scores_every_slot_in_one_pass() -> None:
    m = _mechanism(0.001, 5)
    scores = np.arange(5000, dtype=np.int64) % 97
    z = m.noise_units(scores.size, bits=ChaCha20Bits.derived(bytes(32), "small"))
    sizes: list[int] = []
    got = exact_selection(m, z, lambda pos: sizes.append(int(np.asarray(pos).size)) or scores[pos])
    np.testing.assert_array_equal(got, m.select_units(scores, z))
    assert sizes == [scores.size]
