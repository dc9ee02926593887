"""The shared ROC statistics and intervals (``ragprivacy._stats``), checked against
scikit-learn, brute force, closed forms and their nominal coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import beta, norm
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from ragprivacy._stats import (
    auc_and_delong_se,
    auc_interval,
    mean_interval,
    min_non_members,
    proportion_interval,
    resolves_fpr,
    roc_points,
)
from ragprivacy.errors import DataError
from ragprivacy.eval.metrics import membership_metrics, roc_auc, roc_curve, tpr_at_fpr


def _sample(seed: int, *, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, int(rng.integers(20, 400)))
    y[:2] = (0, 1)  # both classes
    s = rng.normal(y * rng.uniform(0, 2), 1.0)
    return (np.round(s, 1) if ties else s), y


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_auc_and_roc_points_equal_sklearn_and_brute_force(seed: int, ties: bool) -> None:
    s, y = _sample(seed, ties=ties)
    pos, neg = s[y == 1], s[y == 0]
    auc, _ = auc_and_delong_se(pos, neg)
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    assert auc == pytest.approx(wins / (pos.size * neg.size), abs=1e-12)
    assert roc_auc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    fpr, tpr, thr = roc_points(pos, neg)
    sk_fpr, sk_tpr, sk_thr = sk_roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, sk_fpr)
    np.testing.assert_allclose(tpr, sk_tpr)
    np.testing.assert_array_equal(thr, sk_thr)
    # every point by counting: one per distinct score (plus the +inf start)
    assert thr.size == np.unique(s).size + 1
    for f, t, th in zip(fpr[1:], tpr[1:], thr[1:]):
        assert t == pytest.approx((pos >= th).mean()) and f == pytest.approx((neg >= th).mean())
    m_fpr, m_tpr, _ = roc_curve(s, y)
    np.testing.assert_array_equal(m_fpr, fpr)
    np.testing.assert_array_equal(m_tpr, tpr)


def test_delong_interval_where_it_is_informative() -> None:
    rng = np.random.default_rng(11)
    pos, neg = rng.normal(0.8, 1, 150), rng.normal(0, 1, 150)
    r = auc_interval(pos, neg)
    auc, se = auc_and_delong_se(pos, neg)
    assert r.method == "delong" and (r.auc, r.se) == (auc, se)
    assert r.low == pytest.approx(auc - norm.ppf(0.975) * se)
    assert r.high == pytest.approx(auc + norm.ppf(0.975) * se)


@pytest.mark.parametrize(("m", "n"), [(50, 50), (100, 30), (2, 200), (1, 5)])
def test_interval_at_separation_is_exact_and_never_a_point(m: int, n: int) -> None:
    r = auc_interval(np.arange(m) + 1000.0, np.arange(n, dtype=float))
    k = min(m, n)
    assert r.auc == 1.0 and r.method == "paired-exact"
    assert r.high == 1.0 and r.low < 1.0  # contains 1, width > 0
    assert r.low == pytest.approx(0.025 ** (1 / k))  # exact CP with k wins of k
    rev = auc_interval(np.arange(n, dtype=float), np.arange(m) + 1000.0)
    assert (rev.auc, rev.low) == (0.0, 0.0) and rev.high == pytest.approx(1 - 0.025 ** (1 / k))


def test_interval_with_every_score_tied_has_width_and_centre_half() -> None:
    r = auc_interval(np.full(40, 0.3), np.full(60, 0.3))
    assert r.auc == 0.5 and r.se == 0.0 and r.method == "paired-exact"
    assert r.low == pytest.approx(beta.ppf(0.025, 20, 21))
    assert r.high == pytest.approx(beta.ppf(0.975, 21, 20))
    assert r.low < 0.5 < r.high


@pytest.mark.statistical
def test_auc_interval_covers_a_true_auc_near_one() -> None:
    # binormal with shift 3.5: AUC = Phi(3.5/sqrt 2) = 0.9933, so many samples of 30 + 30
    # separate (DeLong SE 0) and the rest sit at the boundary; the rule must still cover.
    true = norm.cdf(3.5 / math.sqrt(2))
    rng = np.random.default_rng(5)
    hits, exact = 0, 0
    for _ in range(400):
        r = auc_interval(rng.normal(3.5, 1, 30), rng.normal(0, 1, 30))
        hits += r.low <= true <= r.high
        exact += r.method == "paired-exact"
    assert exact > 100  # the case under test does occur
    # 95 % nominal; a correct interval falls below 0.9 with probability < 1e-4
    assert hits / 400 >= 0.9


def test_proportion_interval_is_the_textbook_wilson_and_clopper_pearson() -> None:
    z = norm.ppf(0.975)
    for n in (1, 7, 40, 333):
        for k in sorted({0, 1, n // 3, n - 1, n}):
            p = k / n
            centre = (p + z * z / (2 * n)) / (1 + z * z / n)
            half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
            lo, hi = proportion_interval(k, n)
            assert (lo, hi) == pytest.approx((max(0.0, centre - half), min(1.0, centre + half)))
            lo, hi = proportion_interval(k, n, method="exact")
            assert lo == pytest.approx(0.0 if k == 0 else beta.ppf(0.025, k, n - k + 1))
            assert hi == pytest.approx(1.0 if k == n else beta.ppf(0.975, k + 1, n - k))
    assert all(math.isnan(v) for v in proportion_interval(0, 0))
    with pytest.raises(DataError, match="successes"):
        proportion_interval(5, 4)
    with pytest.raises(DataError, match="'method'"):
        proportion_interval(1, 4, method="normal")


def test_resolvable_fpr_and_membership_metrics_leave_out_what_the_sample_cannot_show() -> None:
    assert (min_non_members(0.01), min_non_members(0.001), min_non_members(0.3)) == (100, 1000, 4)
    assert resolves_fpr(1000, 0.001) and not resolves_fpr(999, 0.001)
    rng = np.random.default_rng(2)
    y = np.r_[np.ones(100), np.zeros(100)].astype(int)
    s = rng.normal(y * 1.5, 1.0)
    m = membership_metrics(s, y)
    assert m.tpr_at_1pct_fpr is not None and m.tpr_at_01pct_fpr is None
    assert math.isnan(tpr_at_fpr(s, y, 0.001))
    assert tpr_at_fpr(s, y, 0.0) <= m.tpr_at_1pct_fpr
    assert m.auc_low < m.auc < m.auc_high and m.auc_interval == "delong"
    correct = int(round(m.accuracy * 200))
    assert (m.accuracy_low, m.accuracy_high) == proportion_interval(correct, 200)
    sep = membership_metrics(np.r_[s[:100] + 100, s[100:]], y)
    assert sep.auc == 1.0 and sep.auc_interval == "paired-exact" and sep.auc_low < 1.0


def test_mean_interval_is_scipys_one_sample_t_interval() -> None:
    from scipy.stats import ttest_1samp

    rng = np.random.default_rng(4)
    for size in (2, 5, 40):
        v = rng.uniform(0, 1, size)
        ci = ttest_1samp(v, 0.0).confidence_interval(0.95)
        assert mean_interval(v) == pytest.approx((ci.low, ci.high))
    assert mean_interval([0.5, math.nan, 0.5]) == (0.5, 0.5)  # NaNs dropped; no spread
    assert all(math.isnan(x) for x in mean_interval([0.3]))


def test_unit_mean_interval_never_collapses_and_covers() -> None:
    """For values in [0, 1] the interval stays inside [0, 1], and a sample of equal values
    gets the Wilson interval at that value (the Bernoulli variance bounds theirs) instead
    of a point; elsewhere it is the t interval, whose coverage is checked on skewed data."""
    lo, hi = mean_interval([1.0] * 20, unit=True)
    assert hi == 1.0 and 0.8 < lo < 0.9  # Wilson's lower limit for 20/20: 0.839
    assert mean_interval([0.0] * 20, unit=True)[0] == 0.0
    v = [0.2, 0.4, 0.6, 0.8]
    t_lo, t_hi = mean_interval(v)
    u_lo, u_hi = mean_interval(v, unit=True)
    assert (u_lo, u_hi) == (t_lo, t_hi)
    assert mean_interval([0.9, 1.0, 1.0], unit=True)[1] == 1.0  # t's upper limit clipped
    rng = np.random.default_rng(5)
    a, b, n = 8.0, 1.0, 15  # mean 8/9: skewed towards 1, where t intervals undercover
    covered = sum(
        lo <= a / (a + b) <= hi
        for lo, hi in (mean_interval(rng.beta(a, b, n), unit=True) for _ in range(2000))
    )
    assert covered / 2000 >= 0.90  # t undercovers skewed small samples: 0.92 here
