"""The k-account collusion attack (collusion paper §3.5, §4, App. A).

* the adversaries against M* (:class:`ragprivacy.dp.ScalarMechanism`, eq. 3.3–3.4):
  :class:`PooledMeanAttack` (A*), :func:`bayes_llr` (§A.2 (i)), :class:`DiversifiedSplit`
  (§A.2 (ii));
* :func:`auc_with_se` — Mann–Whitney AUC with its DeLong standard error.
"""

from __future__ import annotations

from ragprivacy.attacks.collusion._roc import auc_with_se
from ragprivacy.attacks.collusion.scalar import (
    DiversifiedSplit,
    PooledMeanAttack,
    bayes_llr,
    bayes_llr_samples,
)

__all__ = [
    "DiversifiedSplit",
    "PooledMeanAttack",
    "auc_with_se",
    "bayes_llr",
    "bayes_llr_samples",
]
