"""The copy model of the reference reader: longest-suffix matches into the context.

A :class:`ContextIndex` is built once per prompt. It lays the context documents' tokens
end to end, each document followed by an end-of-document marker, and gives every distinct
normalised token a small id. For a history ``h`` it keeps, for every position ``p``, the
match length ``M[p]`` = the number of tokens (counted up to ``horizon``) by which the
history ends as the context does just before ``p``. Appending a token ``w`` updates them
through the positions ``q`` that hold ``w`` (indexed once per prompt)::

    M'[p] = min(M[p − 1] + 1, horizon)  if context[p − 1] == w  else 0

The copy distribution spreads mass over the tokens at the positions with ``M[p] ≥ 1``,
weighting each by ``COPY_BASE ** (M[p] − M*)`` where ``M*`` is the longest match, so a
match one token longer weighs ``COPY_BASE`` (= 4) times more — the longest suffix
dominates, as an induction head's attention would. The reported match length
``ℓ* = min(M*, max_match)`` is what the reader's copy weight depends on; counting further
(``horizon`` ≥ ``max_match``) only tells apart positions that agree on the last
``max_match`` tokens (templated text repeats 8-token phrases across documents). A
position holding the end-of-document marker votes for ``</s>``: copying stops at the end
of the document.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ragprivacy._typing import FloatArray, IntArray
from ragprivacy.generate.background import EOS, EOS_ID, BackgroundModel
from ragprivacy.generate.tokens import normalize

__all__ = ["COPY_BASE", "ContextIndex", "MatchState"]

COPY_BASE = 4.0
_NO_MATCH = -2  # a history token that is not in the context


class ContextIndex:
    """Per-prompt index of the context documents (see the module docstring).

    Attributes:
        doc_tokens: each document's tokens.
        surface: every position's token as written (``</s>`` at each document end).
        ids: context-vocabulary id of every position (0 = end-of-document marker).
        display: the first surface form of each context-vocabulary id (0 → ``</s>``).
        vocab: normalised token → context-vocabulary id.
        bg_ids: background id of each context-vocabulary id (-1 if the background
            model has not seen it).
    """

    __slots__ = (
        "_occurrences",
        "_powers",
        "bg_ctx",
        "bg_display",
        "bg_ids",
        "display",
        "doc_tokens",
        "horizon",
        "ids",
        "max_match",
        "surface",
        "vocab",
    )

    def __init__(
        self,
        doc_tokens: Sequence[Sequence[str]],
        background: BackgroundModel,
        *,
        max_match: int = 8,
        horizon: int | None = None,
        doc_norms: Sequence[Sequence[str]] | None = None,
    ) -> None:
        self.doc_tokens = [list(d) for d in doc_tokens]
        self.max_match = max_match
        self.horizon = max(max_match, horizon or max_match)
        vocab: dict[str, int] = {EOS: 0}
        display = [EOS]
        ids: list[int] = []
        surface: list[str] = []
        if doc_norms is None:
            doc_norms = [[normalize(t) for t in toks] for toks in self.doc_tokens]
        for toks, norms in zip(self.doc_tokens, doc_norms):
            surface.extend(toks)
            surface.append(EOS)
            for t, n in zip(toks, norms):
                k = vocab.get(n)
                if k is None:
                    k = len(display)
                    vocab[n] = k
                    display.append(t)
                ids.append(k)
            ids.append(0)
        self.surface = surface
        self.vocab = vocab
        self.display = display
        self.ids: IntArray = np.asarray(ids, dtype=np.int64)
        bg = [EOS_ID]
        for n in list(vocab)[1:]:
            b = background.lookup_normalized(n)
            bg.append(-1 if b is None else b)
        self.bg_ids: IntArray = np.asarray(bg, dtype=np.int64)
        self.bg_display = {int(b): display[k] for k, b in enumerate(bg) if b >= 0 and k > 0}
        self.bg_ctx = {int(b): k for k, b in enumerate(bg) if b >= 0 and k > 0}
        order = np.argsort(self.ids, kind="stable")
        bounds = np.searchsorted(self.ids[order], np.arange(len(display) + 1))
        self._occurrences = {k: order[bounds[k] : bounds[k + 1]] for k in range(1, len(display))}
        self._powers: FloatArray = COPY_BASE ** -np.arange(self.horizon + 1, dtype=np.float64)

    def __len__(self) -> int:
        return len(self.ids)

    def token_id(self, token: str) -> int:
        """Context-vocabulary id of ``token`` (``-2`` if absent; the end marker never
        matches a history token)."""
        k = self.vocab.get(normalize(token), _NO_MATCH)
        return _NO_MATCH if k == 0 else k

    def start(self, history: Sequence[str]) -> MatchState:
        """The match state for ``history`` (only its last ``horizon`` tokens matter)."""
        state = MatchState(np.zeros(len(self.ids), dtype=np.int64), np.zeros(0, dtype=np.int64))
        for t in list(history)[-self.horizon :]:
            self.advance(state, self.token_id(t))
        return state

    def advance(self, state: MatchState, token_id: int) -> None:
        """Update ``state`` in place for one appended token (context id ``token_id``)."""
        prev = self._occurrences.get(token_id) if token_id > 0 else None
        if prev is None:
            state.m[state.pos] = 0
            state.pos = np.zeros(0, dtype=np.int64)
            return
        lengths = np.minimum(state.m[prev] + 1, self.horizon)
        state.m[state.pos] = 0
        nxt = prev + 1
        state.m[nxt] = lengths
        state.pos = nxt

    def copy_surface(self, state: MatchState, k: int) -> str | None:
        """How the context writes token ``k`` where the history matches longest before it
        (earliest such position), or ``None`` if no matched position holds it."""
        if k <= 0 or len(state.pos) == 0:
            return None
        cand = state.pos[self.ids[state.pos] == k]
        if len(cand) == 0:
            return None
        return self.surface[int(cand[int(np.argmax(state.m[cand]))])]

    def copy_distribution(self, state: MatchState) -> tuple[int, FloatArray | None]:
        """``(ℓ*, P_copy)``; ``P_copy`` is over context-vocabulary ids (``None`` when
        nothing matches)."""
        pos = state.pos
        if len(pos) == 0:
            return 0, None
        matched = state.m[pos]
        longest = int(matched.max())
        weights = self._powers[longest - matched]
        pc = np.bincount(self.ids[pos], weights=weights, minlength=len(self.display))
        return min(longest, self.max_match), pc / float(pc.sum())


class MatchState:
    """Match lengths ``M`` (dense) and the positions where ``M > 0`` (sorted)."""

    __slots__ = ("m", "pos")

    def __init__(self, m: IntArray, pos: IntArray) -> None:
        self.m = m
        self.pos = pos
