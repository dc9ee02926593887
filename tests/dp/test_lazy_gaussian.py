"""The lazy exact discrete Gaussian (ragprivacy.dp.lazy_gaussian): its brackets hold the
true tail masses, the slots it draws have the law of the largest of n i.i.d. draws, and
noise-first selection on it has the law of the full mechanism's — on layouts with ties
and clipped scores, K from 1 to the candidates' floor — while a planted bug is caught."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from ragprivacy.dp import ChaCha20Bits, discrete_gaussian
from ragprivacy.dp import lazy_gaussian as lg
from ragprivacy.dp.mechanisms import top_k_indices

SIGMA = Fraction(6)
N = 40
RUNS = 1500


def _pmf(sigma: float, lo: int, hi: int) -> np.ndarray:
    z = np.arange(lo, hi + 1)
    w = np.exp(-(z.astype(float) ** 2) / (2 * sigma**2))
    full = sum(
        math.exp(-(k * k) / (2 * sigma**2)) for k in range(-20 * int(sigma), 20 * int(sigma))
    )
    return w / full


def test_the_brackets_hold_the_tail_masses() -> None:
    mass = lg.TailMass(SIGMA)
    s_lo, s_hi = mass.normaliser()
    direct = math.fsum(math.exp(-(k * k) / 72) for k in range(-200, 201))
    assert s_lo <= Fraction(direct) * (1 + Fraction(1, 10**14)) and s_hi >= Fraction(direct) * (
        1 - Fraction(1, 10**14)
    )
    assert (s_hi - s_lo) / s_lo < Fraction(1, 10**35)
    for t in (1, 5, 13, 40):
        g_lo, g_hi = mass.tail(t)
        direct = math.fsum(math.exp(-(k * k) / 72) for k in range(t, 400))
        assert float(g_lo) <= direct * (1 + 1e-13) and float(g_hi) >= direct * (1 - 1e-13)
        assert (g_hi - g_lo) / g_lo < Fraction(1, 10**35)
    p_lo, p_hi = mass.band(5, 13)  # P(5 ≤ Z < 13 | Z < 13)
    exact = _pmf(6.0, 5, 12).sum() / (1 - _pmf(6.0, 13, 400).sum())
    assert float(p_lo) <= exact * (1 + 1e-12) and float(p_hi) >= exact * (1 - 1e-12)


def test_the_slots_above_the_threshold_have_the_law_of_the_largest_draws() -> None:
    """Counts above T are Binomial(n, p_T); their values follow Z | Z ≥ T; and lowering
    the threshold adds the band with its own law (χ² goodness of fit, p > 10⁻⁴)."""
    t, low = 9, 4
    counts, values, band = [], Counter(), Counter()
    for r in range(RUNS):
        drawn = lg.top_noise(N, SIGMA, t, ChaCha20Bits.derived(bytes(32), ("top", r)))
        counts.append(drawn.positions.size)
        values.update(drawn.values.tolist())
        assert len(set(drawn.positions.tolist())) == drawn.positions.size
        before = drawn.positions.size
        drawn.lower(low)
        band.update(drawn.values[before:].tolist())
        assert (drawn.values[before:] < t).all() and (drawn.values[before:] >= low).all()
    p_t = float(_pmf(6.0, t, 400).sum())
    k = np.arange(0, 8)
    expected = stats.binom.pmf(k, N, p_t) * RUNS
    expected = np.append(expected, RUNS - expected.sum())
    observed = np.bincount(np.minimum(counts, 8), minlength=9)
    assert stats.chisquare(observed, expected).pvalue > 1e-4, (observed, expected)
    tail = _pmf(6.0, t, 24)
    obs = np.array([values.get(v, 0) for v in range(t, 25)])
    obs[-1] += sum(c for v, c in values.items() if v > 24)
    exp = tail / tail.sum() * obs.sum()
    assert stats.chisquare(obs, exp).pvalue > 1e-4
    b = _pmf(6.0, low, t - 1)
    obs_b = np.array([band.get(v, 0) for v in range(low, t)])
    assert stats.chisquare(obs_b, b / b.sum() * obs_b.sum()).pvalue > 1e-4


LAYOUTS = {
    # many ties at the top, scores clipped at both ends of the range [0, 4]
    "ties-and-clipping": np.array([4] * 6 + [7] * 3 + [-5] * 8 + [2] * 23),
    "one-leader": np.array([4] + [0] * 39),
}


def _full(scores: np.ndarray, k: int, bounds: tuple[int, int], seed: int) -> tuple[int, ...]:
    z = discrete_gaussian(SIGMA, N, bits=ChaCha20Bits.derived(bytes(32), ("full", seed)))
    return tuple(top_k_indices(np.clip(scores, *bounds) + z, k).tolist())


def _lazy(scores: np.ndarray, k: int, bounds: tuple[int, int], seed: int) -> tuple[int, ...]:
    pos, _ = lg.lazy_noise_first(
        N,
        k,
        SIGMA,
        bounds,
        lambda p: scores[p],
        ChaCha20Bits.derived(bytes(32), ("lazy", seed)),
        min_scored=4,
    )
    return tuple(pos.tolist())


def _homogeneous(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> float:
    """p-value of a χ² test that two samples of outcomes share one law (rare outcomes
    pooled so every expected count is at least 5)."""
    ca, cb = Counter(a), Counter(b)
    keys = sorted(set(ca) | set(cb), key=lambda o: -(ca[o] + cb[o]))
    rows: list[list[int]] = []
    rest = [0, 0]
    for o in keys:
        if ca[o] + cb[o] >= 20:
            rows.append([ca[o], cb[o]])
        else:
            rest = [rest[0] + ca[o], rest[1] + cb[o]]
    if sum(rest):
        rows.append(rest)
    return float(stats.chi2_contingency(np.array(rows)).pvalue)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("k", [1, 3])
def test_lazy_selection_has_the_law_of_the_full_mechanism(layout: str, k: int) -> None:
    scores, bounds = LAYOUTS[layout], (0, 4)
    lazy = [_lazy(scores, k, bounds, r) for r in range(RUNS)]
    full = [_full(scores, k, bounds, r) for r in range(RUNS)]
    assert all(len(set(o)) == k for o in lazy)
    # the leading slot (the top-1 law) and the whole ordered selection
    assert _homogeneous([o[:1] for o in lazy], [o[:1] for o in full]) > 1e-4
    assert _homogeneous(lazy, full) > 1e-4


def test_the_same_bits_give_the_same_selection_and_the_fallback_draws_every_slot() -> None:
    scores = LAYOUTS["ties-and-clipping"]
    bits = ("lazy", 7)
    a = lg.lazy_noise_first(
        N, 3, SIGMA, (0, 4), lambda p: scores[p], ChaCha20Bits.derived(bytes(32), bits),
        min_scored=4,
    )  # fmt: skip
    b = lg.lazy_noise_first(
        N, 3, SIGMA, (0, 4), lambda p: scores[p], ChaCha20Bits.derived(bytes(32), bits),
        min_scored=4,
    )  # fmt: skip
    assert a[0].tolist() == b[0].tolist() and a[1].values.tolist() == b[1].values.tolist()
    # a range as wide as the noise: no threshold certifies, every slot is drawn
    wide = lg.lazy_noise_first(
        N, 3, SIGMA, (0, 400), lambda p: scores[p], ChaCha20Bits.derived(bytes(32), bits),
        min_scored=4,
    )  # fmt: skip
    assert wide[1].complete and wide[1].positions.size == N


def test_a_planted_bug_in_the_tail_values_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same goodness-of-fit test fails when the tail values skip the envelope's
    acceptance step (they come out geometric, too heavy): the tests have power."""

    def envelope_only(mass, low, high, m, bits, extra):  # type: ignore[no-untyped-def]
        g = lg._geometric(lg._prefix_only(bits, m), mass.s2 / low, extra, True)
        return low + g

    monkeypatch.setattr(lg, "_band_values", envelope_only)
    t = 9
    values: Counter[int] = Counter()
    for r in range(RUNS):
        drawn = lg.top_noise(N, SIGMA, t, ChaCha20Bits.derived(bytes(32), ("top", r)))
        values.update(drawn.values.tolist())
    tail = _pmf(6.0, t, 24)
    obs = np.array([values.get(v, 0) for v in range(t, 25)])
    obs[-1] += sum(c for v, c in values.items() if v > 24)
    assert stats.chisquare(obs, tail / tail.sum() * obs.sum()).pvalue < 1e-4


@pytest.mark.parametrize(("sigma", "t"), [(6, 5), (50, 20), (3584, 1000), (3584, 15174)])
def test_the_euler_maclaurin_tail_agrees_with_the_term_by_term_sum(sigma: int, t: int) -> None:
    """Two independent brackets of the same tail overlap, each narrow: the certified
    Euler–Maclaurin form that wide Gaussians use, and the direct sum."""
    summed = lg.TailMass(Fraction(sigma))._tail(t, 40)
    em = lg._euler_maclaurin_tail(Fraction(sigma), t, 40)
    assert em[0] <= summed[1] and summed[0] <= em[1]
    assert (em[1] - em[0]) / em[0] < Fraction(1, 10**40)


def test_a_wide_gaussian_draws_its_top_slots_quickly() -> None:
    """At an audit calibration's σ (about 7·10^7 grid units) the brackets come from
    Euler–Maclaurin; n = 10^6 slots, the drawn ones all above the threshold."""
    sigma = Fraction(2413856893571831, 33554432)
    t = lg.first_threshold(10**6, sigma, 128)
    drawn = lg.top_noise(10**6, sigma, t, ChaCha20Bits.derived(bytes(32), "wide"))
    assert 0 < drawn.positions.size < 1000 and (drawn.values >= t).all()
    lo, hi = lg.tail_mass(sigma).band(t, None)
    assert (hi - lo) / lo < Fraction(1, 10**30)


def test_the_lazy_path_is_chosen_from_public_parameters_and_then_certifies_at_once() -> None:
    """``lazy_suits`` takes the audit calibration (σ ≫ range) and refuses small σ or few
    slots; where it takes it, the first draw certifies (no lowering: the threshold stays)."""
    sigma = Fraction(2413856893571831, 33554432)  # the default policy's σ, grid units
    width = 2 * 2**20
    assert lg.lazy_suits(10**6, 5, sigma, width, min_scored=64)
    assert lg.lazy_suits(10**5, 64, sigma, width, min_scored=512)
    assert not lg.lazy_suits(10**6, 5, Fraction(width // 4), width, min_scored=64)
    assert not lg.lazy_suits(1000, 5, sigma, width, min_scored=64)
    for r in range(5):
        drawn = lg.first_noise(
            10**5, 5, sigma, ChaCha20Bits.derived(bytes(32), r), min_scored=64, width=width
        )
        t0 = drawn.threshold
        pos = lg.lazy_select(drawn, 5, (-(2**20), 2**20), lambda p: p % 7, min_scored=64)
        assert drawn.threshold == t0 and not drawn.complete and len(set(pos.tolist())) == 5


def _rational_coin(p: Fraction) -> lg._Coin:
    return lg._Coin(lambda digits: (p, p))


def _word_prefixes(key: str, k: int) -> np.ndarray:
    return ChaCha20Bits.derived(bytes(32), key).uint64(k) >> np.uint64(11)


@pytest.mark.parametrize("p", [Fraction(3, 100), Fraction(9, 20)])
def test_the_bulk_gaps_have_the_geometric_law(p: Fraction) -> None:
    """Gaps decided in bulk (float candidates, certified) follow P(G = g) = (1 − p)^g·p
    exactly (χ² goodness of fit, p > 10⁻⁴), capped at the population as asked."""
    coin = _rational_coin(p)
    draws = 20_000
    gaps = coin.gaps(
        _word_prefixes(f"gaps-{p}", draws), ChaCha20Bits.derived(bytes(32), "x"), 10**9
    )
    pf = float(p)
    top = int(math.log(5 / (draws * pf)) / math.log1p(-pf))  # expected count ≥ 5 below it
    expected = (1 - pf) ** np.arange(top) * pf * draws
    expected = np.append(expected, draws - expected.sum())
    observed = np.bincount(np.minimum(gaps, top), minlength=top + 1)
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    capped = coin.gaps(_word_prefixes(f"gaps-{p}", draws), ChaCha20Bits.derived(bytes(32), "x"), 7)
    assert (capped == np.minimum(gaps, 7)).all()


def test_the_float_certificate_defers_every_uniform_at_a_threshold() -> None:
    """Uniforms whose 53-bit prefix lies at (1 − p)^g: the ones just below or above it get
    their gap (g or g − 1) without extra bits; the one straddling it goes to the exact
    path, and the bulk decision gives what the exact walk gives from the same bits."""
    p = Fraction(1, 7)
    coin = _rational_coin(p)
    prefixes, truth = [], []
    for g in range(1, 60):
        b = math.floor((1 - p) ** g * 2**53)  # (6/7)^g is not dyadic: W at b straddles it
        prefixes += [b - 1, b, b + 1]
        truth += [g, None, g - 1]
    words = np.array(prefixes, dtype=np.uint64)
    slow: list[int] = []
    exact = coin.exact_gap

    def counted(prefix: int, extra: ChaCha20Bits, limit: int) -> int:
        slow.append(prefix)
        return exact(prefix, extra, limit)

    bulk_extra = ChaCha20Bits.derived(bytes(32), "refine")
    coin.exact_gap = counted  # type: ignore[method-assign]
    bulk = coin.gaps(words, bulk_extra, 10**6)
    assert {b for b, t in zip(prefixes, truth, strict=True) if t is None} <= set(slow)
    del coin.exact_gap
    walk_extra = ChaCha20Bits.derived(bytes(32), "refine")
    walk = [coin.exact_gap(int(b), walk_extra, 10**6) for b in slow]
    assert walk == [int(bulk[prefixes.index(b)]) for b in slow]
    assert bulk_extra.bytes_used == walk_extra.bytes_used > 0
    for got, want, b in zip(bulk.tolist(), truth, prefixes, strict=True):
        if want is not None:
            assert got == want and coin.exact_gap(b, bulk_extra, 10**6) == want


@pytest.mark.parametrize(
    ("sigma", "n", "low_step"),
    [(SIGMA, N, 5), (Fraction(2413856893571831, 33554432), 10**5, None)],
)
@pytest.mark.parametrize("margin", [2.0**-6, math.inf])
def test_the_exact_path_gives_what_the_float_path_gives(
    monkeypatch: pytest.MonkeyPatch, sigma: Fraction, n: int, low_step: int | None, margin: float
) -> None:
    """A wider float margin (2^-6: some gaps go to the exact path; ∞: every one does)
    changes nothing: the same slots, values and bits read, drawing and lowering."""

    def draw(seed: int) -> tuple[list[int], list[int], int, int]:
        t = 9 if low_step else lg.first_threshold(n, sigma, 192)
        drawn = lg.top_noise(n, sigma, t, ChaCha20Bits.derived(bytes(32), ("fp", seed)))
        drawn.lower(t - (low_step or int(sigma / 8)))
        pos, val = drawn.positions.tolist(), drawn.values.tolist()
        return pos, val, drawn.bits.bytes_used, drawn.extra.bytes_used

    seeds = range(40 if low_step else 2)
    calls = Counter[str]()
    exact = lg._Coin.exact_gap

    def counted(self: lg._Coin, prefix: int, extra: ChaCha20Bits, limit: int) -> int:
        calls["exact"] += 1
        return exact(self, prefix, extra, limit)

    monkeypatch.setattr(lg._Coin, "exact_gap", counted)
    fast = [draw(s) for s in seeds]
    assert calls["exact"] == 0
    monkeypatch.setattr(lg, "_FLOAT_REL", margin)
    with np.errstate(invalid="ignore"):  # ∞ × 0 in the bounds: no certificate, as meant
        slow = [draw(s) for s in seeds]
    assert calls["exact"] > 0
    assert slow == fast


def test_the_free_slots_are_counted_past_the_taken_ones() -> None:
    gen = np.random.default_rng(3)
    for _ in range(200):
        n = int(gen.integers(1, 60))
        taken = np.sort(gen.choice(n, int(gen.integers(0, n)), replace=False)).astype(np.int64)
        free = np.setdiff1d(np.arange(n), taken)
        offsets = np.sort(gen.choice(free.size, int(gen.integers(0, free.size + 1)), False))
        assert lg._nth_free(taken, offsets.astype(np.int64)).tolist() == free[offsets].tolist()


def test_the_derivation_is_pinned() -> None:
    """The slots and values drawn from a key are part of what an auditor re-executes: a
    change to the derivation shows here (update the pins only with a new derivation)."""
    drawn = lg.top_noise(N, SIGMA, 9, ChaCha20Bits.derived(bytes(32), "pinned"))
    drawn.lower(4)
    assert drawn.positions.tolist() == [37, 0, 2, 4, 6, 7, 32, 36]
    assert drawn.values.tolist() == [10, 5, 8, 8, 8, 4, 5, 6]
    sigma = Fraction(2413856893571831, 33554432)
    wide = lg.first_noise(10**6, 5, sigma, ChaCha20Bits.derived(bytes(32), "pinned"), min_scored=64)
    assert (wide.threshold, wide.positions.size, wide.bits.bytes_used) == (255277806, 177, 9448)
    assert wide.positions[:4].tolist() == [15925, 24243, 30199, 38751]
    assert int(wide.values.sum()) == 47986447823


def test_a_range_as_wide_as_sigma_draws_more_slots_but_still_certifies_at_once() -> None:
    """σ equal to the score range (10^6 slots): the first threshold sits one range below
    the level about c slots clear, so the draw is larger (thousands of slots, still a
    small fraction) and certifies without lowering; a range four times σ is refused."""
    sigma, width = Fraction(50), 50
    assert lg.lazy_suits(10**6, 5, sigma, width, min_scored=64)
    assert not lg.lazy_suits(10**6, 5, sigma, 4 * width, min_scored=64)
    scores = np.arange(10**6) % 51  # every score in [0, 50], the top tied many times
    for r in range(3):
        drawn = lg.first_noise(
            10**6, 5, sigma, ChaCha20Bits.derived(bytes(32), ("wide", r)), min_scored=64,
            width=width,
        )  # fmt: skip
        t0 = drawn.threshold
        assert 192 < drawn.positions.size < 10**6 // 32
        pos = lg.lazy_select(drawn, 5, (0, width), lambda p: scores[p], min_scored=64)
        assert drawn.threshold == t0 and not drawn.complete and len(set(pos.tolist())) == 5
