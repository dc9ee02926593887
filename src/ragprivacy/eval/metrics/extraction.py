"""Extraction metrics: ROUGE-L (Lin, 2004) and the untargeted-leak test of the
random-projection paper (G.2, after Huang et al., 2023): a generation leaks when its
ROUGE-L F-measure with some datastore document exceeds 0.5.

ROUGE-L is the figure Google's ``rouge-score`` package reports (``RougeScorer(["rougeL"])``,
no stemming), computed here so that it needs no runtime dependency and so that
:func:`max_rouge_l` can prune a datastore scan: the longest common subsequence (LCS) of
the two token lists, ``P = LCS / |candidate|``, ``R = LCS / |reference|`` and
``F = 2PR / (P + R)`` (β = 1). Tokens are ``rouge-score``'s: the text lower-cased, every
run of characters other than ``a-z0-9`` a separator (so "don't" is "don", "t" and "café"
is "caf", as in Lin's original ROUGE). The test suite checks that both give the same
F-measure, exactly, on random and corpus text pairs; that agreement is why this stays
hand-written.

:func:`max_rouge_l` scans a datastore exactly but fast: the LCS is at most the size of the
two texts' multiset intersection, so documents whose bag-of-words F-bound is already at
or below the best (or the threshold) are skipped without computing an LCS.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

__all__ = ["DatastoreIndex", "lcs_length", "max_rouge_l", "rouge_l", "rouge_tokens"]


_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def rouge_tokens(text: str) -> list[str]:
    """``rouge-score``'s tokens: lower-cased runs of ``a-z0-9`` (no stemming).

    >>> rouge_tokens("The cat, the HAT.")
    ['the', 'cat', 'the', 'hat']
    >>> rouge_tokens("Don't e-mail the café")
    ['don', 't', 'e', 'mail', 'the', 'caf']
    """
    return _NON_ALNUM.sub(" ", text.lower()).split()


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence (O(|a|·|b|) time, O(|b|) memory).

    >>> lcs_length("abcbdab", "bdcaba")
    4
    """
    if not a or not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
        prev = cur
    return prev[-1]


def _f(lcs: int, n_cand: int, n_ref: int) -> float:
    if lcs == 0:
        return 0.0
    p, r = lcs / n_cand, lcs / n_ref
    return 2 * p * r / (p + r)


def rouge_l(candidate: str | Sequence[str], reference: str | Sequence[str]) -> float:
    """ROUGE-L F-measure of ``candidate`` against ``reference``.

    >>> round(rouge_l("the cat sat on the mat", "the cat lay on the mat"), 4)
    0.8333
    """
    a = rouge_tokens(candidate) if isinstance(candidate, str) else list(candidate)
    b = rouge_tokens(reference) if isinstance(reference, str) else list(reference)
    return _f(lcs_length(a, b), len(a), len(b))


class DatastoreIndex:
    """Token lists and bags of words of a datastore, for :func:`max_rouge_l`."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.tokens = [rouge_tokens(t) for t in texts]
        self.bags = [Counter(t) for t in self.tokens]
        self._postings: dict[str, list[int]] = {}
        for i, bag in enumerate(self.bags):
            for w in bag:
                self._postings.setdefault(w, []).append(i)

    def __len__(self) -> int:
        return len(self.tokens)

    def candidates(self, bag: Counter[str]) -> dict[int, int]:
        """``{document: size of the multiset intersection}`` for documents sharing a word."""
        out: dict[int, int] = {}
        for w, c in bag.items():
            for i in self._postings.get(w, ()):
                out[i] = out.get(i, 0) + min(c, self.bags[i][w])
        return out


def max_rouge_l(
    candidate: str, datastore: DatastoreIndex, *, threshold: float = 0.0
) -> tuple[float, int]:
    """The best ROUGE-L F of ``candidate`` over the datastore and that document's position
    (``(0.0, -1)`` when nothing overlaps). Documents whose bound cannot beat
    ``max(best, threshold)`` are skipped, so the result is exact whenever it exceeds
    ``threshold``."""
    a = rouge_tokens(candidate)
    if not a:
        return 0.0, -1
    inter = datastore.candidates(Counter(a))
    if not inter:
        return 0.0, -1
    order = sorted(inter, key=lambda i: -_f(inter[i], len(a), len(datastore.tokens[i])))
    best, best_i = 0.0, -1
    for i in order:
        bound = _f(inter[i], len(a), len(datastore.tokens[i]))
        if bound <= max(best, threshold):
            break
        f = _f(lcs_length(a, datastore.tokens[i]), len(a), len(datastore.tokens[i]))
        if f > best:
            best, best_i = f, i
    return float(np.float64(best)), best_i
