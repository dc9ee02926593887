"""Metrics: utility (answers, retrieval, perplexity) and leakage (verbatim, PII)."""

from __future__ import annotations

from ragprivacy.eval.metrics.leakage import longest_verbatim_run, pii_leaked, verbatim_overlap
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
    "exact_match",
    "longest_verbatim_run",
    "match",
    "normalize_answer",
    "perplexity",
    "pii_leaked",
    "precision_at_k",
    "recall_at_k",
    "token_f1",
    "verbatim_overlap",
    "wilson_interval",
]
