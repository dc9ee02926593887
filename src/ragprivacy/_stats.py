"""The package's one home for ROC statistics and confidence intervals, shared by the
membership metrics and experiment reports (``eval``) and the collusion attacks
(``attacks``, which may not import ``eval``).

What comes from a library, and what is written here and why:

* **ROC curve and AUC** — scikit-learn's :func:`sklearn.metrics.roc_curve` (every distinct
  threshold kept) and :func:`sklearn.metrics.roc_auc_score`. With ties counted as one
  half the area under the empirical curve is the Mann–Whitney statistic
  AUC = P(X > Y) + ½P(X = Y) (Mann & Whitney 1947).
* **Binomial intervals** (Wilson, Clopper–Pearson) — :func:`scipy.stats.binomtest`.
* **DeLong's standard error of the AUC** — written here: neither scikit-learn nor scipy
  has it. Var = S10 / m + S01 / n from the structural components V10 (per positive) and
  V01 (per negative) (DeLong, DeLong & Clarke-Pearson 1988), in the mid-rank form of
  Sun & Xu (2014), O((m + n) log(m + n)).
* **The AUC interval where DeLong's fails** — written here. A normal interval
  AUC ± z·SE collapses to "1.000 ± 0.000" at separation (every member above every
  non-member: SE = 0), at AUC 0, when every score is tied, and has no SE with a single
  score in a class. There (and wherever AUC ± z·SE leaves [0, 1]) we give a
  Clopper–Pearson interval on k = min(m, n) disjoint member/non-member pairs: each pair
  is an independent Bernoulli(AUC) trial (ties broken at random), so with every pair won —
  separation — the interval [(α/2)^(1/k), 1] is exact, and in general it is taken at the
  expected number of wins AUC·k. It is conservative (it uses k pairs, not m·n), which is
  the honest price of a figure the sample cannot pin down. A bootstrap would not help:
  every resample of a separated sample is separated.
* **Interval for a mean of bounded per-item scores** (precision, ROUGE-L over questions)
  — Student's t from scipy (:func:`mean_interval`); it is a point where every item
  scored the same, which for a deterministic system (precision 1 of the exact top-K) is
  the truth rather than a collapse.
* **Resolvable FPR** — a TPR at FPR f needs a threshold with f·n_neg non-members above
  it; with fewer than 1/f non-members the only such threshold is FPR 0, so
  :func:`resolves_fpr` says whether a sample can report TPR at ``f`` at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ragprivacy.errors import DataError

# scipy.stats and sklearn.metrics (pandas with it) are imported by the functions that use
# them: together about a second of every process that imports this module, the
# command line's and each pool worker's among them, most of which never ask for a
# statistic.

__all__ = [
    "AucInterval",
    "auc_and_delong_se",
    "auc_interval",
    "auc_interval_from",
    "mean_interval",
    "min_non_members",
    "proportion_interval",
    "resolves_fpr",
    "roc_points",
]


def _classes(positives: npt.ArrayLike, negatives: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(positives, dtype=np.float64).ravel()
    y = np.asarray(negatives, dtype=np.float64).ravel()
    if x.size == 0 or y.size == 0:
        raise DataError(f"AUC needs at least one score per class; got {x.size} and {y.size}.")
    return x, y


def _labelled(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.r_[np.ones(x.size, dtype=np.int8), np.zeros(y.size, dtype=np.int8)], np.r_[x, y]


def roc_points(
    positives: npt.ArrayLike, negatives: npt.ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The empirical ROC curve ``(fpr, tpr, thresholds)`` from (0, 0) to (1, 1), one point
    per distinct score (scikit-learn's ``roc_curve``, nothing dropped).

    Point ``i`` classifies ``score >= thresholds[i]`` as positive; the first threshold
    is ``+inf`` (nothing positive).

    >>> fpr, tpr, thr = roc_points([0.9, 0.2], [0.8, 0.1])
    >>> fpr.tolist(), tpr.tolist(), float(thr[0])
    ([0.0, 0.0, 0.5, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0, 1.0], inf)
    """
    from sklearn.metrics import roc_curve

    labels, scores = _labelled(*_classes(positives, negatives))
    fpr, tpr, thr = roc_curve(labels, scores, drop_intermediate=False)
    return fpr.astype(np.float64), tpr.astype(np.float64), thr.astype(np.float64)


def auc_and_delong_se(positives: npt.ArrayLike, negatives: npt.ArrayLike) -> tuple[float, float]:
    """AUC for X ~ ``positives``, Y ~ ``negatives`` and its DeLong standard error.

    The AUC is scikit-learn's ``roc_auc_score`` (ties count ½); the standard error comes
    from the mid-ranks of the pooled sample (no m × n comparison matrix). It is NaN when
    a class has a single score (its structural components have no sample variance).

    >>> auc, se = auc_and_delong_se([0.9, 0.4, 0.6], [0.2, 0.7, 0.1])
    >>> round(auc, 4), round(se, 4)
    (0.7778, 0.2485)

    Raises:
        DataError: a class has no score.
    """
    from scipy.stats import rankdata
    from sklearn.metrics import roc_auc_score

    x, y = _classes(positives, negatives)
    m, n = x.size, y.size
    auc = float(roc_auc_score(*_labelled(x, y)))
    if m < 2 or n < 2:
        return auc, math.nan
    pooled = rankdata(np.concatenate([x, y]))
    rx, ry = pooled[:m], pooled[m:]
    v10 = (rx - rankdata(x)) / n  # share of negatives below each positive (ties ½)
    v01 = 1.0 - (ry - rankdata(y)) / m  # share of positives above each negative
    var = float(np.var(v10, ddof=1)) / m + float(np.var(v01, ddof=1)) / n
    return auc, math.sqrt(max(var, 0.0))


@dataclass(frozen=True, slots=True)
class AucInterval:
    """An AUC, its DeLong SE (NaN where undefined) and a two-sided confidence interval.

    ``method`` is ``"delong"`` (AUC ± z·SE) or ``"paired-exact"`` (Clopper–Pearson on
    min(m, n) disjoint pairs; see the module docstring).
    """

    auc: float
    se: float
    low: float
    high: float
    method: str
    confidence: float


def _paired_exact(auc: float, pairs: int, confidence: float) -> tuple[float, float]:
    """Clopper–Pearson limits for ``pairs`` Bernoulli(AUC) trials at ``AUC·pairs`` wins.

    The beta-quantile form of the exact interval accepts a fractional count; at 0 or
    ``pairs`` wins it is the textbook one-sided-closed exact interval.
    """
    from scipy.stats import beta

    a = (1.0 - confidence) / 2.0
    wins = auc * pairs
    low = 0.0 if wins <= 0 else float(beta.ppf(a, wins, pairs - wins + 1))
    high = 1.0 if wins >= pairs else float(beta.ppf(1.0 - a, wins + 1, pairs - wins))
    return low, high


def auc_interval(
    positives: npt.ArrayLike, negatives: npt.ArrayLike, *, confidence: float = 0.95
) -> AucInterval:
    """AUC with a ``confidence`` interval that never collapses to a point.

    DeLong's normal interval where it is informative (SE > 0 and inside [0, 1]); else
    the exact paired interval (module docstring). At separation with 50 members and 50
    non-members the AUC is 1 and the interval is [0.025^(1/50), 1]:

    >>> r = auc_interval(np.arange(50) + 100.0, np.arange(50.0))
    >>> r.auc, round(r.low, 3), r.high, r.method
    (1.0, 0.929, 1.0, 'paired-exact')

    Raises:
        DataError: a class has no score, or ``confidence`` is not in (0, 1).
    """
    x, y = _classes(positives, negatives)
    auc, se = auc_and_delong_se(x, y)
    return auc_interval_from(auc, se, min(x.size, y.size), confidence=confidence)


def auc_interval_from(
    auc: float, se: float, pairs: int, *, confidence: float = 0.95
) -> AucInterval:
    """:func:`auc_interval` from a stored AUC, its DeLong SE and min(m, n) (``pairs``),
    for results that keep those rather than the scores.

    >>> r = auc_interval_from(1.0, 0.0, 100)
    >>> round(r.low, 4), r.high, r.method
    (0.9638, 1.0, 'paired-exact')

    Raises:
        DataError: ``confidence`` is not in (0, 1) or ``pairs`` < 1.
    """
    if not 0.0 < confidence < 1.0:
        raise DataError(f"The 'confidence' level must be in (0, 1); got {confidence!r}.")
    if pairs < 1:
        raise DataError(f"An AUC interval needs at least one score per class; got {pairs}.")
    if math.isfinite(se) and se > 0:
        from scipy.stats import norm

        z = float(norm.ppf(0.5 + confidence / 2.0))
        low, high = auc - z * se, auc + z * se
        if low >= 0.0 and high <= 1.0:
            return AucInterval(auc, se, low, high, "delong", confidence)
    low, high = _paired_exact(auc, pairs, confidence)
    return AucInterval(auc, se, low, high, "paired-exact", confidence)


def proportion_interval(
    successes: int, n: int, *, confidence: float = 0.95, method: str = "wilson"
) -> tuple[float, float]:
    """Two-sided interval for a binomial proportion: scipy's ``binomtest`` with
    ``method`` "wilson" (score interval, no continuity correction) or "exact"
    (Clopper–Pearson). NaN limits when ``n`` is 0.

    >>> tuple(round(v, 3) for v in proportion_interval(8, 10))
    (0.49, 0.943)
    >>> tuple(round(v, 3) for v in proportion_interval(10, 10, method="exact"))
    (0.692, 1.0)

    Raises:
        DataError: ``successes`` is not in [0, n], or ``method`` is unknown.
    """
    if method not in ("wilson", "exact"):
        raise DataError(f"The interval 'method' must be 'wilson' or 'exact'; got {method!r}.")
    if n <= 0:
        return (math.nan, math.nan)
    if not 0 <= successes <= n:
        raise DataError(f"A proportion needs 0 <= successes <= n; got {successes} of {n}.")
    from scipy.stats import binomtest

    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=confidence, method=method)
    return (float(ci.low), float(ci.high))


def mean_interval(
    values: npt.ArrayLike, *, confidence: float = 0.95, unit: bool = False
) -> tuple[float, float]:
    """Student-t interval for the mean of ``values`` (NaNs dropped; NaN limits with
    fewer than 2 values).

    ``unit``: the values lie in [0, 1] (a precision, an F1, a ROUGE-L). The interval is
    clipped to [0, 1], and where every value is the same (all 1.0) the t interval, a point,
    is replaced by the Wilson score interval at that value: for values in [0, 1] the
    variance is at most μ(1 − μ), the Bernoulli variance, so "1.000 (1.000–1.000)" becomes
    the interval a sample of n ones supports. (Written out here because scipy's Wilson
    interval takes an integer count of successes.) Elsewhere it is the t interval, which
    undercovers small skewed samples (measured: 92 % for the mean of 15 Beta(8, 1) values).

    >>> tuple(round(v, 3) for v in mean_interval([0.2, 0.4, 0.6, 0.8]))
    (0.089, 0.911)
    >>> tuple(round(v, 3) for v in mean_interval([1.0] * 20, unit=True))
    (0.839, 1.0)
    """
    from scipy.stats import norm, t

    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[~np.isnan(v)]
    if v.size < 2:
        return (math.nan, math.nan)
    mean = float(v.mean())
    q = float(t.ppf(0.5 + confidence / 2.0, v.size - 1))
    half = q * float(v.std(ddof=1)) / math.sqrt(v.size)
    lo, hi = mean - half, mean + half
    if unit:
        if half == 0.0:
            z = float(norm.ppf(0.5 + confidence / 2.0))
            n, z2 = v.size, z * z
            centre = (mean + z2 / (2 * n)) / (1 + z2 / n)
            spread = z * math.sqrt(mean * (1 - mean) / n + z2 / (4 * n * n)) / (1 + z2 / n)
            lo, hi = centre - spread, centre + spread
        lo, hi = max(0.0, lo), min(1.0, hi)
    return (lo, hi)


def min_non_members(fpr: float) -> int:
    """The fewest negatives that resolve a false-positive rate ``fpr`` > 0: ⌈1 / fpr⌉.

    >>> min_non_members(0.01), min_non_members(0.001)
    (100, 1000)
    """
    return math.ceil(1.0 / fpr - 1e-9)


def resolves_fpr(n_negatives: int, fpr: float) -> bool:
    """Whether ``n_negatives`` negatives can show a TPR at false-positive rate ``fpr``:
    FPR 0 always, else only with at least ⌈1 / fpr⌉ negatives (below that the only
    threshold with FPR ≤ ``fpr`` is the one with FPR 0).

    >>> resolves_fpr(100, 0.01), resolves_fpr(100, 0.001), resolves_fpr(100, 0.0)
    (True, False, True)
    """
    return fpr == 0.0 or n_negatives >= min_non_members(fpr)
