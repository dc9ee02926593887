"""Empirical privacy loss: a statistically valid lower bound on ε from observed outputs.

Run a mechanism many times on two neighbouring inputs, reduce each output to a discrete
outcome (a post-processing, so it cannot increase the loss), and bound

    ε ≥ max_S log((P_D(S) − δ) / P_D'(S))

over outcomes S in both directions, with Clopper–Pearson bounds whose simultaneous
coverage is 1 − ``alpha`` (Bonferroni over all outcomes and both directions). If the
returned lower bound exceeds the mechanism's claimed ε, the claim is refuted at false-alarm
rate ≤ ``alpha``. This is the "histogram-based estimate with a confidence bound" used to
audit every mechanism in :mod:`ragprivacy.dp` (Jagielski et al. 2020; Ding et al. 2018).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ragprivacy._validation import check_in_range, check_probability
from ragprivacy.errors import ConfigError

__all__ = [
    "EmpiricalLoss",
    "MeasuredEpsilon",
    "ThresholdLoss",
    "empirical_epsilon",
    "threshold_epsilon",
]

_MAX_THRESHOLDS = 512  # thresholds tried on the half that chooses the decision


@dataclass(frozen=True, slots=True)
class EmpiricalLoss:
    """The lower confidence bound on ε, the point estimate, and the outcome attaining it."""

    epsilon_lower: float
    epsilon_point: float
    outcome: int | None
    direction: str


def _cp_lower(k: np.ndarray, n: int, a: float) -> np.ndarray:
    from scipy.stats import beta

    out = np.zeros(k.shape)
    pos = k > 0
    out[pos] = beta.ppf(a, k[pos], n - k[pos] + 1)
    return out


def _cp_upper(k: np.ndarray, n: int, a: float) -> np.ndarray:
    from scipy.stats import beta

    out = np.ones(k.shape)
    lt = k < n
    out[lt] = beta.ppf(1 - a, k[lt] + 1, n - k[lt])
    return out


def empirical_epsilon(
    outcomes_d: np.ndarray,
    outcomes_d_prime: np.ndarray,
    *,
    delta: float = 0.0,
    alpha: float = 1e-6,
) -> EmpiricalLoss:
    """Lower confidence bound on the privacy loss between two samples of outcomes.

    Args:
        outcomes_d: integer outcome codes of runs on D.
        outcomes_d_prime: integer outcome codes of runs on the neighbour D'.
        delta: the δ of the claim being tested ((ε, δ)-DP; 0 for pure DP).
        alpha: simultaneous false-alarm rate of the bound.

    Returns:
        :class:`EmpiricalLoss`; ``epsilon_lower`` is 0 when no outcome shows a loss.
    """
    a = np.asarray(outcomes_d).ravel()
    b = np.asarray(outcomes_d_prime).ravel()
    if (
        a.size == 0
        or b.size == 0
        or not (np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer))
    ):
        raise ConfigError(
            f"Outcomes must be non-empty integer arrays (discretise first); got sizes "
            f"{a.size} and {b.size}, dtypes {a.dtype} and {b.dtype}."
        )
    delta = check_probability("delta", delta)
    alpha = check_in_range("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
    labels, inv = np.unique(np.concatenate([a, b]), return_inverse=True)
    ca = np.bincount(inv[: a.size], minlength=labels.size)
    cb = np.bincount(inv[a.size :], minlength=labels.size)
    per = alpha / (4 * labels.size)  # two bounds per ratio, two directions, all outcomes
    best = EmpiricalLoss(0.0, 0.0, None, "none")
    for name, num, den, n_num, n_den in (
        ("D/D'", ca, cb, a.size, b.size),
        ("D'/D", cb, ca, b.size, a.size),
    ):
        lo = _cp_lower(num, n_num, per) - delta
        hi = _cp_upper(den, n_den, per)
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = np.where(lo > 0, np.log(np.maximum(lo, 1e-300) / hi), -np.inf)
        i = int(np.argmax(bound))
        if bound[i] > best.epsilon_lower:
            pn, pd = num[i] / n_num, den[i] / n_den
            point = math.log((pn - delta) / pd) if pd > 0 and pn > delta else math.inf
            best = EmpiricalLoss(float(bound[i]), point, int(labels[i]), name)
    return best


@dataclass(frozen=True, slots=True)
class ThresholdLoss:
    """The lower confidence bound on ε from an attack score thresholded at ``threshold``.

    ``tpr`` is P(decide "member") on the runs with the member (D), ``fpr`` on the runs
    without it (D'), both as observed; ``tpr_lower``/``fpr_upper`` are their
    Clopper–Pearson bounds that the bound uses. ``direction`` is ``"score >= t"`` or
    ``"score < t"`` (the decision that attains the bound), ``"none"`` when no threshold
    shows a loss. Where the direction says "(D' as the member)" the roles are swapped:
    ``tpr`` and ``n_in`` are then of the runs on D', ``fpr`` and ``n_out`` of those on D."""

    epsilon_lower: float
    epsilon_point: float
    threshold: float | None
    direction: str
    tpr: float
    fpr: float
    tpr_lower: float
    fpr_upper: float
    n_in: int
    n_out: int


def threshold_epsilon(
    scores_in: npt.ArrayLike,
    scores_out: npt.ArrayLike,
    *,
    delta: float = 0.0,
    alpha: float = 0.05,
) -> ThresholdLoss:
    """Lower confidence bound on ε from an attack's scores on runs with and without the
    member.

    For an (ε, δ)-DP mechanism every decision S satisfies P_D(S) ≤ e^ε P_D'(S) + δ in
    both directions, so ε ≥ log((TPR − δ) / FPR) for the decision "score ≥ t" (and for
    "score < t", and with the roles of D and D' swapped). The runs are split in halves:
    the first half chooses the decision (the threshold, its side and direction whose
    Clopper–Pearson bound is highest there), the second half measures it — TPR bounded
    below and FPR above by Clopper–Pearson at ``alpha``/2 each — so the one bound
    reported is valid with probability ≥ 1 − ``alpha`` with no correction for the
    thresholds tried: a correct mechanism's claimed ε is exceeded at most that often.
    Thresholding a scalar score and choosing it on held-out runs is how DP training is
    audited (Jagielski et al. 2020; Nasr et al. 2021); :func:`empirical_epsilon` bounds
    single outcomes instead."""
    a = np.asarray(scores_in, dtype=np.float64).ravel()
    b = np.asarray(scores_out, dtype=np.float64).ravel()
    if a.size < 2 or b.size < 2 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ConfigError(
            f"Scores must be finite, at least 2 runs on each side; got {a.size} and {b.size}."
        )
    delta = check_probability("delta", delta)
    alpha = check_in_range("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)
    ha, hb = a.size // 2, b.size // 2
    rule = _best_rule(a[:ha], b[:hb], delta, alpha / 2)
    none = ThresholdLoss(0.0, 0.0, None, "none", 0.0, 0.0, 0.0, 1.0, a.size - ha, b.size - hb)
    if rule is None:
        return none
    threshold, below, swapped = rule
    test_a, test_b = a[ha:], b[hb:]
    hit_a = int(np.sum((test_a < threshold) if below else (test_a >= threshold)))
    hit_b = int(np.sum((test_b < threshold) if below else (test_b >= threshold)))
    num, den = (hit_b, hit_a) if swapped else (hit_a, hit_b)
    n_num, n_den = (test_b.size, test_a.size) if swapped else (test_a.size, test_b.size)
    lo = float(_cp_lower(np.array([num]), n_num, alpha / 2)[0])
    hi = float(_cp_upper(np.array([den]), n_den, alpha / 2)[0])
    pn, pd = num / n_num, den / n_den
    point = 0.0 if pn <= delta else (math.log((pn - delta) / pd) if pd > 0 else math.inf)
    bound = math.log((lo - delta) / hi) if lo > delta else 0.0
    name = ("score < t" if below else "score >= t") + (" (D' as the member)" if swapped else "")
    return ThresholdLoss(
        epsilon_lower=max(bound, 0.0),
        epsilon_point=point,
        threshold=threshold,
        direction=name,
        tpr=pn,
        fpr=pd,
        tpr_lower=lo,
        fpr_upper=hi,
        n_in=n_num,
        n_out=n_den,
    )


def _best_rule(
    a: np.ndarray, b: np.ndarray, delta: float, per: float
) -> tuple[float, bool, bool] | None:
    """On the selection half: (threshold, decision is "score < t", D' is the member) of
    the highest Clopper–Pearson bound, or ``None`` when no rule shows a loss."""
    thresholds = np.unique(np.concatenate([a, b]))
    if thresholds.size > _MAX_THRESHOLDS:  # quantiles suffice to choose; it is not the test
        thresholds = np.unique(np.quantile(thresholds, np.linspace(0, 1, _MAX_THRESHOLDS)))
    sa, sb = np.sort(a), np.sort(b)
    ge_a = a.size - np.searchsorted(sa, thresholds, side="left")
    ge_b = b.size - np.searchsorted(sb, thresholds, side="left")
    best: tuple[float, tuple[float, bool, bool]] | None = None
    for below, hit_a, hit_b in ((False, ge_a, ge_b), (True, a.size - ge_a, b.size - ge_b)):
        for swapped, num, den, n_num, n_den in (
            (False, hit_a, hit_b, a.size, b.size),
            (True, hit_b, hit_a, b.size, a.size),
        ):
            lo = _cp_lower(num, n_num, per) - delta
            hi = _cp_upper(den, n_den, per)
            with np.errstate(divide="ignore", invalid="ignore"):
                gain = np.log(np.maximum(lo, 1e-300) / hi)
            bound = np.where(lo > 0, gain, -np.inf)
            i = int(np.argmax(bound))
            if bound[i] > 0 and (best is None or bound[i] > best[0]):
                best = (float(bound[i]), (float(thresholds[i]), below, swapped))
    return None if best is None else best[1]


@dataclass(frozen=True, slots=True)
class MeasuredEpsilon:
    """One system's measured ε beside its claim.

    Attributes:
        system: the system's label.
        release: what the attack read.
        claimed_epsilon: the account's ε as the system states it (∞: no guarantee).
        claimed_delta: its δ.
        bound: the lower confidence bound and the TPR/FPR it comes from.
        trials: accounts that attacked on each of ``D`` and ``D'``.
        queries: queries each account made.
        alpha: the bound's false-alarm rate (1 − its confidence).
    """

    system: str
    release: str
    claimed_epsilon: float
    claimed_delta: float
    bound: ThresholdLoss
    trials: int
    queries: int
    alpha: float

    @property
    def refuted(self) -> bool:
        """Whether the measured bound exceeds the claim (a finite one)."""
        return math.isfinite(self.claimed_epsilon) and (
            self.bound.epsilon_lower > self.claimed_epsilon
        )

    def to_dict(self) -> dict[str, Any]:
        b = self.bound
        return {
            "system": self.system,
            "release": self.release,
            "claimed_epsilon": self.claimed_epsilon,
            "claimed_delta": self.claimed_delta,
            "epsilon_lower": b.epsilon_lower,
            "confidence": 1 - self.alpha,
            "refuted": self.refuted,
            "tpr": b.tpr,
            "fpr": b.fpr,
            "tpr_lower": b.tpr_lower,
            "fpr_upper": b.fpr_upper,
            "threshold": b.threshold,
            "decision": b.direction,
            "trials_per_side": self.trials,
            "queries_per_account": self.queries,
        }
