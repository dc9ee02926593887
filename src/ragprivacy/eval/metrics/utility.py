"""Utility metrics: answer matching, retrieval quality, perplexity, intervals (the
intervals themselves are scipy's, through :mod:`ragprivacy._stats`).

Answer normalisation follows SQuAD (lower case, no punctuation, no articles, single
spaces). *Match accuracy* is the Private-RAG paper's metric (section 4: an answer counts
when it contains any gold answer); *exact match* and *token F1* are SQuAD's.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

from ragprivacy._stats import proportion_interval

__all__ = [
    "exact_match",
    "match",
    "normalize_answer",
    "perplexity",
    "precision_at_k",
    "recall_at_k",
    "token_f1",
    "wilson_interval",
]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation.

    >>> normalize_answer("The  Velmora, River!")
    'velmora river'
    """
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def match(prediction: str, answers: Iterable[str]) -> bool:
    """True when the normalised prediction contains any normalised gold answer as whole
    words (match accuracy, Private-RAG section 4).

    >>> match("It is in Velmora.", ["velmora"]), match("Velmorana", ["Velmora"])
    (True, False)
    """
    pred = f" {normalize_answer(prediction)} "
    return any((norm := normalize_answer(a)) != "" and f" {norm} " in pred for a in answers)


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
    """True when the normalised prediction equals a normalised gold answer."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(a) for a in answers)


def token_f1(prediction: str, answers: Iterable[str]) -> float:
    """Best SQuAD token F1 of the prediction against the gold answers.

    >>> round(token_f1("born in Velmora", ["Velmora"]), 3)
    0.5
    """
    pred = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        if not pred or not gold:
            best = max(best, float(pred == gold))
            continue
        common = sum((Counter(pred) & Counter(gold)).values())
        if common:
            p, r = common / len(pred), common / len(gold)
            best = max(best, 2 * p * r / (p + r))
    return best


def recall_at_k(retrieved: Sequence[str], relevant: Iterable[str], k: int | None = None) -> float:
    """Fraction of the relevant ids among the first ``k`` retrieved (NaN if none relevant)."""
    rel = set(relevant)
    if not rel:
        return math.nan
    top = set(retrieved[:k] if k is not None else retrieved)
    return len(rel & top) / len(rel)


def precision_at_k(
    retrieved: Sequence[str], relevant: Iterable[str], k: int | None = None
) -> float:
    """Fraction of the first ``k`` retrieved ids that are relevant (NaN if none retrieved)."""
    top = list(retrieved[:k] if k is not None else retrieved)
    if not top:
        return math.nan
    rel = set(relevant)
    return sum(1 for r in top if r in rel) / len(top)


def perplexity(logprobs: Sequence[float] | None) -> float:
    """exp(−mean log-probability) of a token sequence (NaN without probabilities)."""
    if not logprobs:
        return math.nan
    return math.exp(-sum(logprobs) / len(logprobs))


def wilson_interval(successes: int, n: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (scipy's ``binomtest``, through
    :func:`ragprivacy._stats.proportion_interval`); NaN limits when ``n`` is 0.

    >>> tuple(round(x, 3) for x in wilson_interval(8, 10))
    (0.49, 0.943)
    """
    return proportion_interval(successes, n, confidence=confidence, method="wilson")
