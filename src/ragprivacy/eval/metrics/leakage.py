"""Leakage metrics: how much of a source document a generated text reproduces verbatim.

Comparison is on the shared word tokenizer's case-folded tokens
(``ragprivacy.generate.tokenize``), so spacing and case do not matter.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher

from ragprivacy.generate import normalize, tokenize
from ragprivacy.types import PIISpan

__all__ = ["longest_verbatim_run", "pii_leaked", "verbatim_overlap"]


def _norm_tokens(text: str | Sequence[str]) -> list[str]:
    toks = tokenize(text) if isinstance(text, str) else list(text)
    return [normalize(t) for t in toks]


def longest_verbatim_run(generated: str | Sequence[str], source: str | Sequence[str]) -> int:
    """Length in tokens of the longest run of ``generated`` found verbatim in ``source``.

    >>> longest_verbatim_run("he said the cat sat on the mat", "The cat sat on the mat.")
    6
    """
    a, b = _norm_tokens(generated), _norm_tokens(source)
    if not a or not b:
        return 0
    m = SequenceMatcher(None, a, b, autojunk=False).find_longest_match(0, len(a), 0, len(b))
    return int(m.size)


def verbatim_overlap(
    generated: str | Sequence[str], source: str | Sequence[str], *, min_run: int = 8
) -> float:
    """Fraction of generated tokens inside some run of ≥ ``min_run`` tokens that also
    occurs in ``source`` (0 for an empty generation).

    >>> verbatim_overlap("x y a b c d", "a b c d e", min_run=3)
    0.6666666666666666
    """
    a, b = _norm_tokens(generated), _norm_tokens(source)
    if not a or len(a) < min_run:
        return 0.0
    grams = {tuple(b[i : i + min_run]) for i in range(len(b) - min_run + 1)}
    covered = [False] * len(a)
    for i in range(len(a) - min_run + 1):
        if tuple(a[i : i + min_run]) in grams:
            for j in range(i, i + min_run):
                covered[j] = True
    return sum(covered) / len(a)


def pii_leaked(generated: str, spans: Iterable[PIISpan]) -> list[PIISpan]:
    """The PII spans whose value appears in ``generated`` (case-insensitive, whole tokens).

    >>> s = PIISpan(0, 9, "name", "Ann Berry")
    >>> [p.kind for p in pii_leaked("Patient ann berry called.", [s])]
    ['name']
    """
    gen = " " + " ".join(_norm_tokens(generated)) + " "
    out = []
    for span in spans:
        value = " ".join(_norm_tokens(span.value))
        if value and f" {value} " in gen:
            out.append(span)
    return out
