"""Membership-inference metrics: ROC AUC with DeLong's standard error and a confidence
interval, ROC curves, TPR at a fixed FPR, and accuracy/precision/recall/F1 at a threshold
chosen on a calibration split.

Conventions: ``labels`` are 1 for members and 0 for non-members; a higher score means
"more likely a member". The statistics themselves live in :mod:`ragprivacy._stats`
(scikit-learn's ROC curve and AUC, scipy's binomial intervals, DeLong's SE and the exact
interval where DeLong's collapses); this module adapts them to scores and labels.

Only figures the sample resolves are reported: TPR at FPR f needs at least ⌈1/f⌉
non-members (with 100 non-members "TPR at 0.1 % FPR" would be TPR at FPR 0), so such a
TPR is NaN (``None`` in :class:`MembershipMetrics`). The threshold for the binary metrics
is never chosen on the evaluation set (that would overstate accuracy): it is chosen on a
separate labelled calibration split, as MBA (Section 5.1: 1,000 training / 1,000 test
instances) and S-RAG do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ragprivacy._stats import (
    auc_and_delong_se,
    auc_interval,
    proportion_interval,
    resolves_fpr,
    roc_points,
)
from ragprivacy._validation import check_choice, check_probability
from ragprivacy.errors import DataError

_Scores = Sequence[float] | np.ndarray
_Labels = Sequence[int] | np.ndarray

__all__ = [
    "BinaryMetrics",
    "MembershipMetrics",
    "binary_metrics",
    "choose_threshold",
    "delong_se",
    "membership_metrics",
    "roc_auc",
    "roc_curve",
    "tpr_at_fpr",
]


def _arrays(scores: _Scores, labels: _Labels) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).ravel()
    if s.shape != y.shape:
        raise DataError(
            f"Scores and labels must have the same length; got {s.size} scores and {y.size} labels."
        )
    if not np.isin(y, (0, 1)).all():
        raise DataError("Membership labels must be 0 (non-member) or 1 (member).")
    if np.isnan(s).any():
        raise DataError("Membership scores contain NaN; score every target with a number.")
    return s, y.astype(bool)


def _both_classes(y: np.ndarray) -> None:
    if y.all() or not y.any():
        raise DataError(
            "ROC metrics need at least one member and one non-member; got "
            f"{int(y.sum())} members and {int((~y).sum())} non-members."
        )


def _auc_and_se(s: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    _both_classes(y)
    return auc_and_delong_se(s[y], s[~y])


def roc_auc(scores: _Scores, labels: _Labels) -> float:
    """Area under the ROC curve by the Mann–Whitney U statistic (ties count 1/2).

    >>> roc_auc([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0])
    1.0
    >>> roc_auc([0.5, 0.5], [1, 0])
    0.5
    """
    return _auc_and_se(*_arrays(scores, labels))[0]


def delong_se(scores: _Scores, labels: _Labels) -> float:
    """DeLong's standard error of the AUC (fast mid-rank form of Sun & Xu, 2014); NaN
    with a single member or a single non-member.

    >>> round(delong_se([0.9, 0.4, 0.6, 0.2, 0.7, 0.1], [1, 1, 1, 0, 0, 0]), 4)
    0.2485
    """
    return _auc_and_se(*_arrays(scores, labels))[1]


def roc_curve(scores: _Scores, labels: _Labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The empirical ROC curve: ``(fpr, tpr, thresholds)``, from (0, 0) to (1, 1).

    Point ``i`` classifies ``score >= thresholds[i]`` as member (the first threshold is
    ``+inf``: nothing is a member).

    >>> fpr, tpr, _ = roc_curve([0.9, 0.2, 0.8, 0.1], [1, 1, 0, 0])
    >>> fpr.tolist(), tpr.tolist()
    ([0.0, 0.0, 0.5, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0, 1.0])
    """
    s, y = _arrays(scores, labels)
    _both_classes(y)
    return roc_points(s[y], s[~y])


def tpr_at_fpr(scores: _Scores, labels: _Labels, fpr: float) -> float:
    """The largest TPR of a threshold whose FPR is at most ``fpr`` (no interpolation);
    NaN when the sample cannot resolve ``fpr`` (fewer than ⌈1/fpr⌉ non-members: the only
    such threshold would be the one at FPR 0).

    >>> tpr_at_fpr([0.9, 0.8, 0.7, 0.1], [1, 1, 0, 0], 0.5)
    1.0
    >>> tpr_at_fpr([0.9, 0.8, 0.7, 0.1], [1, 1, 0, 0], 0.01)
    nan
    """
    check_probability("fpr", fpr)
    s, y = _arrays(scores, labels)
    _both_classes(y)
    if not resolves_fpr(int((~y).sum()), fpr):
        return math.nan
    f, t, _ = roc_points(s[y], s[~y])
    ok = f <= fpr + 1e-12
    return float(t[ok].max())


@dataclass(frozen=True, slots=True)
class BinaryMetrics:
    """Accuracy, precision, recall and F1 of ``score >= threshold`` as "member"."""

    threshold: float
    accuracy: float
    precision: float
    recall: float
    f1: float


def binary_metrics(scores: _Scores, labels: _Labels, threshold: float) -> BinaryMetrics:
    """Binary classification metrics at ``threshold`` (precision is 0 with no positive).

    >>> binary_metrics([0.9, 0.6, 0.4, 0.1], [1, 0, 1, 0], 0.5).accuracy
    0.5
    """
    s, y = _arrays(scores, labels)
    pred = s >= threshold
    tp = int((pred & y).sum())
    fp = int((pred & ~y).sum())
    fn = int((~pred & y).sum())
    acc = float((pred == y).mean()) if len(y) else math.nan
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return BinaryMetrics(float(threshold), acc, precision, recall, f1)


def choose_threshold(scores: _Scores, labels: _Labels, *, criterion: str = "accuracy") -> float:
    """The threshold that maximises ``criterion`` ("accuracy" or "f1") on labelled
    (calibration) scores. Candidates are midpoints between consecutive distinct scores
    plus both ends; ties go to the higher threshold (fewer members claimed).

    >>> choose_threshold([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0])
    0.55
    """
    check_choice("criterion", criterion, ("accuracy", "f1"))
    s, y = _arrays(scores, labels)
    if not len(s):
        raise DataError("Cannot choose a threshold on an empty calibration split.")
    u = np.unique(s)
    cands = (
        np.r_[u[0] - 1.0, (u[:-1] + u[1:]) / 2.0, u[-1] + 1.0]
        if len(u) > 1
        else np.r_[u[0] - 1.0, u[0], u[0] + 1.0]
    )
    best, best_t = -1.0, float(cands[-1])
    for t in cands[::-1]:
        m = binary_metrics(s, y, float(t))
        v = m.accuracy if criterion == "accuracy" else m.f1
        if v > best + 1e-12:
            best, best_t = v, float(t)
    return best_t


@dataclass(frozen=True, slots=True)
class MembershipMetrics:
    """Everything the attacks × defenses table reports for one attack.

    ``threshold`` was chosen on the calibration split; the binary metrics are measured on
    the evaluation split with it. ``auc_low``/``auc_high`` bound a 95 % interval for the
    AUC (``auc_interval``: "delong" or "paired-exact", see :mod:`ragprivacy._stats`);
    ``accuracy_low``/``accuracy_high`` a 95 % Wilson interval for the accuracy over the
    ``n_members + n_non_members`` evaluation targets. A TPR at an FPR the sample cannot
    resolve (fewer than ⌈1/FPR⌉ non-members) is ``None``.
    """

    n_members: int
    n_non_members: int
    auc: float
    auc_se: float
    accuracy: float
    precision: float
    recall: float
    f1: float
    threshold: float
    tpr_at_1pct_fpr: float | None
    tpr_at_01pct_fpr: float | None
    auc_low: float
    auc_high: float
    auc_interval: str
    accuracy_low: float
    accuracy_high: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def membership_metrics(
    scores: _Scores,
    labels: _Labels,
    *,
    calibration_scores: _Scores | None = None,
    calibration_labels: _Labels | None = None,
    criterion: str = "accuracy",
) -> MembershipMetrics:
    """AUC with DeLong's SE and a 95 % interval, TPR at 1 % and 0.1 % FPR (where the
    non-members resolve them) on the evaluation split, and binary metrics at the threshold
    chosen on the calibration split (``criterion``: "accuracy" or "f1"), the accuracy with
    a 95 % Wilson interval.

    Without a calibration split the threshold is chosen on the evaluation split itself,
    which is optimistic; pass one for reported figures.
    """
    s, y = _arrays(scores, labels)
    if calibration_scores is None or calibration_labels is None:
        threshold = choose_threshold(s, y, criterion=criterion)
    else:
        threshold = choose_threshold(calibration_scores, calibration_labels, criterion=criterion)
    b = binary_metrics(s, y, threshold)
    _both_classes(y)
    ci = auc_interval(s[y], s[~y])
    correct = int(((s >= threshold) == y).sum())
    acc_low, acc_high = proportion_interval(correct, len(y))

    def tpr(fpr: float) -> float | None:
        v = tpr_at_fpr(s, y, fpr)
        return None if math.isnan(v) else v

    return MembershipMetrics(
        n_members=int(y.sum()),
        n_non_members=int((~y).sum()),
        auc=ci.auc,
        auc_se=ci.se,
        accuracy=b.accuracy,
        precision=b.precision,
        recall=b.recall,
        f1=b.f1,
        threshold=threshold,
        tpr_at_1pct_fpr=tpr(0.01),
        tpr_at_01pct_fpr=tpr(0.001),
        auc_low=ci.low,
        auc_high=ci.high,
        auc_interval=ci.method,
        accuracy_low=acc_low,
        accuracy_high=acc_high,
    )
