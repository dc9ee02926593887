from __future__ import annotations

import math

import numpy as np
import pytest

from ragprivacy.attacks.collusion import auc_with_se
from ragprivacy.errors import DataError
from ragprivacy.eval.metrics import (
    binary_metrics,
    choose_threshold,
    delong_se,
    membership_metrics,
    roc_auc,
    roc_curve,
    tpr_at_fpr,
)


def _brute_auc(s: np.ndarray, y: np.ndarray) -> float:
    pos, neg = s[y == 1], s[y == 0]
    wins = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(wins / (len(pos) * len(neg)))


def _brute_delong(s: np.ndarray, y: np.ndarray) -> float:
    pos, neg = s[y == 1], s[y == 0]
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    return math.sqrt(np.var(v10, ddof=1) / len(pos) + np.var(v01, ddof=1) / len(neg))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_and_delong_match_brute_force_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.normal(y * 0.7, 1.0), 1)  # rounding makes ties
    assert roc_auc(s, y) == pytest.approx(_brute_auc(s, y), abs=1e-12)
    assert delong_se(s, y) == pytest.approx(_brute_delong(s, y), rel=1e-9)
    from sklearn.metrics import roc_auc_score

    assert roc_auc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def _tied_scores() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 200)
    return np.round(rng.normal(y * 0.5, 1.0), 1), y


@pytest.mark.parametrize(
    ("scores", "labels"),
    [
        ([0.9, 0.5, 0.5, 0.2, 0.5, 0.5, 0.1], [1, 1, 1, 1, 0, 0, 0]),  # ties across classes
        ([0.5, 0.5, 0.5, 0.5, 0.5], [1, 0, 1, 0, 1]),  # constant: AUC 1/2, SE 0
        ([3.0, 2.0, 1.0, 0.0, -1.0], [1, 1, 0, 0, 0]),  # separated: AUC 1, SE 0
        ([0.0, 0.0, 1.0, 1.0], [1, 1, 0, 0]),  # reversed: AUC 0, SE 0
        _tied_scores(),
    ],
)
def test_roc_auc_and_delong_se_equal_the_collusion_auc_with_se(
    scores: list[float], labels: list[int]
) -> None:
    s, y = np.asarray(scores, dtype=float), np.asarray(labels)
    assert (roc_auc(s, y), delong_se(s, y)) == auc_with_se(s[y == 1], s[y == 0])


def test_degenerate_classes_for_auc_and_delong_se() -> None:
    with pytest.raises(DataError):
        auc_with_se([0.1, 0.2], [])
    with pytest.raises(DataError, match="at least one member and one non-member"):
        delong_se([0.1, 0.2], [1, 1])
    # One member: the AUC is defined, its DeLong variance is not (no spread in V10).
    assert roc_auc([0.4, 0.4, 0.1], [1, 0, 0]) == 0.75
    assert math.isnan(delong_se([0.4, 0.4, 0.1], [1, 0, 0]))
    with pytest.raises(DataError, match="at least 2 scores per class"):
        auc_with_se([0.4], [0.4, 0.1])


def test_delong_se_covers_the_true_auc_at_the_nominal_rate() -> None:
    # binormal model with true AUC = Phi(1/sqrt(2)) for a unit shift
    from scipy.stats import norm

    true = norm.cdf(1 / math.sqrt(2))
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(200):
        y = np.r_[np.ones(60), np.zeros(60)]
        s = rng.normal(y, 1.0)
        a, se = roc_auc(s, y), delong_se(s, y)
        hits += abs(a - true) <= 1.96 * se
    assert 0.88 <= hits / 200 <= 0.99  # 95% nominal; false alarm < 1e-3 for a correct SE


def test_roc_curve_and_tpr_at_fpr() -> None:
    s = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    y = [1, 1, 0, 1, 0, 0]
    fpr, tpr, thr = roc_curve(s, y)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    assert thr[0] == np.inf
    assert tpr_at_fpr(s, y, 0.0) == pytest.approx(2 / 3)
    assert tpr_at_fpr(s, y, 0.34) == pytest.approx(1.0)


def test_threshold_is_chosen_on_calibration_not_evaluation() -> None:
    cal_s, cal_y = [0.9, 0.8, 0.2, 0.1], [1, 1, 0, 0]
    t = choose_threshold(cal_s, cal_y)
    assert 0.2 < t < 0.8
    ev_s, ev_y = [0.3, 0.35, 0.1, 0.05], [1, 1, 0, 0]  # perfectly separable at 0.2
    m = membership_metrics(ev_s, ev_y, calibration_scores=cal_s, calibration_labels=cal_y)
    assert m.auc == 1.0
    assert m.accuracy == 0.5  # the calibrated threshold misses the shifted members
    assert m.threshold == t
    b = binary_metrics(ev_s, ev_y, 0.2)
    assert (b.accuracy, b.precision, b.recall, b.f1) == (1.0, 1.0, 1.0, 1.0)


def test_f1_criterion_and_bad_inputs() -> None:
    t = choose_threshold([0.9, 0.6, 0.5, 0.1], [1, 1, 0, 0], criterion="f1")
    assert 0.5 < t <= 0.6
    with pytest.raises(DataError, match="at least one member and one non-member"):
        roc_auc([0.1, 0.2], [1, 1])
    with pytest.raises(DataError, match="same length"):
        roc_auc([0.1], [1, 0])
    with pytest.raises(DataError, match="NaN"):
        roc_auc([math.nan, 0.2], [1, 0])
