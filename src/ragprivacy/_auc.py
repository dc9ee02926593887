"""Mann–Whitney AUC and its DeLong standard error, shared by the membership metrics
(``eval``) and the collusion attacks (``attacks``), which may not import ``eval``.

Both are the textbook definitions (Mann & Whitney 1947; DeLong, DeLong & Clarke-Pearson
1988) with ties counted as one half: AUC = P(X > Y) + ½P(X = Y), and
Var = S10 / m + S01 / n from the structural components V10 (per positive) and V01 (per
negative), in the mid-rank form of Sun & Xu (2014).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy.stats import rankdata

from ragprivacy.errors import DataError

__all__ = ["auc_and_delong_se"]


def auc_and_delong_se(positives: npt.ArrayLike, negatives: npt.ArrayLike) -> tuple[float, float]:
    """AUC for X ~ ``positives``, Y ~ ``negatives`` and its DeLong standard error.

    O((m + n) log(m + n)): midranks of the pooled sample give both the U statistic and
    every structural component, so no m × n comparison matrix is formed. The standard
    error is NaN when a class has a single score (its structural components have no
    sample variance).

    >>> auc, se = auc_and_delong_se([0.9, 0.4, 0.6], [0.2, 0.7, 0.1])
    >>> round(auc, 4), round(se, 4)
    (0.7778, 0.2485)

    Raises:
        DataError: a class has no score.
    """
    x = np.asarray(positives, dtype=np.float64).ravel()
    y = np.asarray(negatives, dtype=np.float64).ravel()
    m, n = x.size, y.size
    if m == 0 or n == 0:
        raise DataError(f"AUC needs at least one score per class; got {m} and {n}.")
    pooled = rankdata(np.concatenate([x, y]))
    rx, ry = pooled[:m], pooled[m:]
    auc = float((rx.sum() - m * (m + 1) / 2) / (m * n))
    if m < 2 or n < 2:
        return auc, math.nan
    v10 = (rx - rankdata(x)) / n  # share of negatives below each positive (ties ½)
    v01 = 1.0 - (ry - rankdata(y)) / m  # share of positives above each negative
    var = float(np.var(v10, ddof=1)) / m + float(np.var(v01, ddof=1)) / n
    return auc, math.sqrt(max(var, 0.0))
