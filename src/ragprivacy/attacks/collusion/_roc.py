"""Mann–Whitney AUC and DeLong standard error (private helpers of the collusion attacks).

Kept here so the collusion sweeps do not depend on a shared metrics module; both are
the textbook definitions (Mann & Whitney 1947; DeLong, DeLong & Clarke-Pearson 1988)
with ties counted as one half.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import rankdata

from ragprivacy.errors import DataError

__all__ = ["auc_with_se"]


def auc_with_se(positives: np.ndarray, negatives: np.ndarray) -> tuple[float, float]:
    """AUC = P(X > Y) + ½P(X = Y) for X ~ ``positives``, Y ~ ``negatives``, and its
    DeLong standard error from the structural components V10, V01.

    O((m + n) log(m + n)): midranks of the pooled sample give both the U statistic and
    every structural component, so no m × n comparison matrix is formed.
    """
    x = np.asarray(positives, dtype=np.float64).ravel()
    y = np.asarray(negatives, dtype=np.float64).ravel()
    m, n = x.size, y.size
    if m < 2 or n < 2:
        raise DataError(f"AUC needs at least 2 scores per class; got {m} and {n}.")
    pooled = rankdata(np.concatenate([x, y]))
    rx, ry = pooled[:m], pooled[m:]
    auc = (rx.sum() - m * (m + 1) / 2) / (m * n)
    v10 = (rx - rankdata(x)) / n  # share of negatives below each positive (ties ½)
    v01 = 1.0 - (ry - rankdata(y)) / m  # share of positives above each negative
    var = v10.var(ddof=1) / m + v01.var(ddof=1) / n
    return float(auc), float(math.sqrt(max(var, 0.0)))
