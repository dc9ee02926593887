"""The k-account collusion attack (collusion paper §3.5, §4, App. A).

* :class:`ScalarMechanism` (M*, eq. 3.3–3.4) and its adversaries: :class:`PooledMeanAttack`
  (A*), :func:`bayes_llr` (§A.2 (i)), :class:`DiversifiedSplit` (§A.2 (ii));
* :class:`TopKHarness` — the same probe attack through the multi-tenant service's noisy
  top-K (§4.4; same-tenant vs external under M4, §A.3);
* :func:`auc_with_se` — Mann–Whitney AUC with its DeLong standard error.
"""

from __future__ import annotations

from ragprivacy.attacks.collusion._roc import auc_with_se
from ragprivacy.attacks.collusion.scalar import (
    DiversifiedSplit,
    PooledMeanAttack,
    ScalarMechanism,
    bayes_llr,
    bayes_llr_samples,
)
from ragprivacy.attacks.collusion.topk import TopKCellResult, TopKHarness, hit_probability

__all__ = [
    "DiversifiedSplit",
    "PooledMeanAttack",
    "ScalarMechanism",
    "TopKCellResult",
    "TopKHarness",
    "auc_with_se",
    "bayes_llr",
    "bayes_llr_samples",
    "hit_probability",
]
