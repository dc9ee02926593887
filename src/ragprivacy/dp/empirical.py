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

import numpy as np

from ragprivacy._validation import check_in_range, check_probability
from ragprivacy.errors import ConfigError

__all__ = ["EmpiricalLoss", "empirical_epsilon"]


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
