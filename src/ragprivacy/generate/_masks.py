"""Mask filling for the reference reader (the MBA task, MBA Section 4.4).

Each ``[Mask_i]`` is predicted in order, left to right, from the words before it — the
text's own words with earlier masks replaced by their predictions — by the copy model
over the context (:mod:`ragprivacy.generate._copy`):

1. Every context position ``p`` that the left history matches (``M[p] ≥ 1``) proposes
   the token at ``p``, weighted as in the copy distribution (``COPY_BASE ** (M[p] − ℓ*)``).
2. The words *after* the mask (up to two, up to the next mask) delimit multi-word
   answers: if the context continues from ``p`` with 1 to ``max_span`` tokens and then
   exactly those words, the proposal becomes that whole span and its weight is multiplied
   by ``COPY_BASE`` per matched right word (as if the match were that much longer).
3. Proposals are summed by normalised form; the heaviest wins (ties: earliest position).
4. With no left match, a position followed by the right words proposes the single
   token before them; with neither, the background model's most probable word given
   the left history is the answer.

Answers keep the context's case. The result is rendered one ``[Mask_i]: answer`` per line,
as the MBA prompt asks.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragprivacy.generate._copy import COPY_BASE, ContextIndex
from ragprivacy.generate._extract import is_word
from ragprivacy.generate.background import BOS_ID, EOS_ID, UNK_ID, BackgroundModel
from ragprivacy.generate.templates import MASK_PATTERN
from ragprivacy.generate.tokens import detokenize, normalize, tokenize

__all__ = ["fill_masks", "format_mask_answers"]

_RIGHT_WORDS = 2


def _right_anchor(index: ContextIndex, p: int, right: Sequence[int], max_span: int) -> int:
    """The span length ``s`` such that the context holds ``right`` right after
    ``ids[p : p + s]`` within one document, or 0."""
    ids = index.ids
    r = len(right)
    for s in range(1, max_span + 1):
        if p + s - 1 >= len(ids) or ids[p + s - 1] == 0:
            return 0
        end = p + s + r
        if end <= len(ids) and all(ids[p + s + j] == right[j] for j in range(r)):
            return s
    return 0


def _predict(
    history: Sequence[str],
    right: Sequence[str],
    index: ContextIndex,
    background: BackgroundModel,
    max_span: int,
) -> list[str]:
    right_ids = [index.token_id(t) for t in right[:_RIGHT_WORDS]]
    if any(r < 0 for r in right_ids):
        right_ids = []
    match = index.start(history)
    m = match.m
    longest = int(m[match.pos].max()) if len(match.pos) else 0
    if longest > 0:
        votes: dict[tuple[str, ...], float] = {}
        first: dict[tuple[str, ...], list[str]] = {}
        for p in match.pos.tolist():
            if index.ids[p] == 0:
                continue
            weight = COPY_BASE ** (int(m[p]) - longest)
            span = _right_anchor(index, p, right_ids, max_span) if right_ids else 0
            if span:
                weight *= COPY_BASE ** len(right_ids)
                tokens = index.surface[p : p + span]
            else:
                tokens = [index.surface[p]]
            key = tuple(normalize(t) for t in tokens)
            votes[key] = votes.get(key, 0.0) + weight
            first.setdefault(key, tokens)
        if votes:
            best = max(votes, key=lambda k: votes[k])  # first maximum: earliest position
            return list(first[best])
    ids, r = index.ids, len(right_ids)
    if r and len(ids) > r:
        ok = ids[: len(ids) - r] != 0  # ok[q] ⇔ the token before the anchor at q + 1
        for j in range(r):
            ok &= ids[1 + j : len(ids) - r + 1 + j] == right_ids[j]
        hits = np.flatnonzero(ok)
        if len(hits):
            return [index.surface[int(hits[0])]]
    p_bg = background.distribution(history)
    for j in np.argsort(-p_bg, kind="stable")[:200].tolist():
        if j in (UNK_ID, EOS_ID, BOS_ID):
            continue
        word = background.surfaces[j]
        if is_word(word):
            return [word]
    return []


def fill_masks(
    text: str, index: ContextIndex, background: BackgroundModel, *, max_span: int = 4
) -> list[tuple[str, list[str]]]:
    """``[(mask number, answer tokens)]`` for every ``[Mask_i]`` of ``text``, in order."""
    pieces = MASK_PATTERN.split(text)
    history = tokenize(pieces[0])
    out: list[tuple[str, list[str]]] = []
    for j in range(1, len(pieces), 2):
        number, after = pieces[j], pieces[j + 1]
        after_tokens = tokenize(after)
        answer = _predict(history, after_tokens, index, background, max_span)
        out.append((number, answer))
        history = [*history, *answer, *after_tokens]
    return out


def format_mask_answers(answers: Sequence[tuple[str, Sequence[str]]]) -> str:
    """One ``[Mask_i]: answer`` per line (the format of MBA Section 4.4).

    >>> format_mask_answers([("1", ["Velmora"]), ("2", ["blood", "pressure"])])
    '[Mask_1]: Velmora\\n[Mask_2]: blood pressure'
    """
    return "\n".join(f"[Mask_{n}]: {detokenize(list(a))}" for n, a in answers)
