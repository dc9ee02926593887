"""Metrics: utility (answers, retrieval, perplexity) and leakage (verbatim, PII)."""

from __future__ import annotations

from ragprivacy.eval.metrics.extraction import (
    CorpusCoverage,
    DatastoreIndex,
    DisclosureIndex,
    extraction_counts,
    lcs_length,
    max_rouge_l,
    rouge_l,
    rouge_tokens,
)
from ragprivacy.eval.metrics.leakage import longest_verbatim_run, pii_leaked, verbatim_overlap
from ragprivacy.eval.metrics.membership import (
    BinaryMetrics,
    MembershipMetrics,
    binary_metrics,
    choose_threshold,
    delong_se,
    membership_metrics,
    roc_auc,
    roc_curve,
    tpr_at_fpr,
)
from ragprivacy.eval.metrics.utility import (
    exact_match,
    match,
    normalize_answer,
    perplexity,
    precision_at_k,
    recall_at_k,
    token_f1,
    wilson_interval,
)

__all__ = [
    "BinaryMetrics",
    "CorpusCoverage",
    "DatastoreIndex",
    "DisclosureIndex",
    "MembershipMetrics",
    "binary_metrics",
    "choose_threshold",
    "delong_se",
    "exact_match",
    "extraction_counts",
    "lcs_length",
    "longest_verbatim_run",
    "match",
    "max_rouge_l",
    "membership_metrics",
    "normalize_answer",
    "perplexity",
    "pii_leaked",
    "precision_at_k",
    "recall_at_k",
    "roc_auc",
    "roc_curve",
    "rouge_l",
    "rouge_tokens",
    "token_f1",
    "tpr_at_fpr",
    "verbatim_overlap",
    "wilson_interval",
]
