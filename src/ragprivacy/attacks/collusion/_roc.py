"""Mann–Whitney AUC and DeLong standard error of the collusion sweeps.

The computation is the package's one (:func:`ragprivacy._stats.auc_and_delong_se`, also
behind ``eval``'s membership metrics); the sweeps additionally need two scores per class
so that both structural components have a sample variance.
"""

from __future__ import annotations

import numpy as np

from ragprivacy._stats import auc_and_delong_se
from ragprivacy.errors import DataError

__all__ = ["auc_with_se"]


def auc_with_se(positives: np.ndarray, negatives: np.ndarray) -> tuple[float, float]:
    """AUC = P(X > Y) + ½P(X = Y) for X ~ ``positives``, Y ~ ``negatives``, and its
    DeLong standard error from the structural components V10, V01.

    Raises:
        DataError: a class has fewer than 2 scores.
    """
    m, n = np.size(positives), np.size(negatives)
    if m < 2 or n < 2:
        raise DataError(f"AUC needs at least 2 scores per class; got {m} and {n}.")
    return auc_and_delong_se(positives, negatives)
