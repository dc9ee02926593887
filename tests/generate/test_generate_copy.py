"""The copy model's incremental match lengths against a brute-force suffix match, and
the copy distribution's weights."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragprivacy.generate import BackgroundModel, tokenize
from ragprivacy.generate._copy import COPY_BASE, ContextIndex

WORDS = ["a", "b", "c", "A", "d"]
BG = BackgroundModel.from_texts(["a b c d"], order=2)


def _brute_force(docs: list[list[str]], history: list[str], horizon: int) -> list[int]:
    flat: list[str | None] = []
    for d in docs:
        flat.extend(t.casefold() for t in d)
        flat.append(None)  # end-of-document marker
    hist = [t.casefold() for t in history]
    out = []
    for p in range(len(flat)):
        n = 0
        while n < min(horizon, len(hist)) and p - 1 - n >= 0:
            c = flat[p - 1 - n]
            if c is None or c != hist[-1 - n]:
                break
            n += 1
        out.append(n)
    return out


@settings(max_examples=150, deadline=None)
@given(
    docs=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), min_size=1, max_size=3
    ),
    history=st.lists(st.sampled_from([*WORDS, "zz"]), max_size=14),
    horizon=st.integers(1, 6),
)
def test_incremental_match_lengths_equal_brute_force(
    docs: list[list[str]], history: list[str], horizon: int
) -> None:
    index = ContextIndex(docs, BG, max_match=min(3, horizon), horizon=horizon)
    state = index.start([])
    for i, tok in enumerate(history):
        index.advance(state, index.token_id(tok))
        expected = _brute_force(docs, history[: i + 1], horizon)
        assert state.m.tolist() == expected
        assert state.pos.tolist() == [p for p, v in enumerate(expected) if v > 0]
    fresh = index.start(history)
    assert fresh.m.tolist() == _brute_force(docs, history, horizon)


def test_copy_distribution_weights_and_end_of_document() -> None:
    docs = [["x", "y", "z"], ["w", "y", "q"], ["x", "y"]]
    index = ContextIndex(docs, BG, max_match=8)
    state = index.start(["x", "y"])
    longest, pc = index.copy_distribution(state)
    assert longest == 2
    # "x y" is followed by "z" (match 2) and by the end of doc 3 (match 2); "y" alone by "q".
    w = {"z": 1.0, "</s>": 1.0, "q": COPY_BASE**-1}
    total = sum(w.values())
    assert pc[index.vocab["z"]] == pytest.approx(w["z"] / total)
    assert pc[0] == pytest.approx(w["</s>"] / total)
    assert pc[index.vocab["q"]] == pytest.approx(w["q"] / total)
    assert pc.sum() == pytest.approx(1.0)
    assert index.copy_surface(state, index.vocab["z"]) == "z"
    none = index.start(["unseen"])
    assert index.copy_distribution(none) == (0, None)


def test_longer_matches_break_ties_beyond_max_match() -> None:
    shared = tokenize("i have read your query carefully and")
    docs = [["hello", "anna", *shared, "first"], ["hello", "boris", *shared, "second"]]
    index = ContextIndex(docs, BG, max_match=3, horizon=16)
    _, pc = index.copy_distribution(index.start(["boris", *shared]))
    # Matches of 8 and 7 tokens: weights 1 and 1/4.
    assert pc[index.vocab["second"]] == pytest.approx(1 / (1 + COPY_BASE**-1))
    flat = ContextIndex(docs, BG, max_match=3, horizon=3)
    _, even = flat.copy_distribution(flat.start(["boris", *shared]))
    assert even[flat.vocab["second"]] == pytest.approx(0.5)
    assert np.isclose(even.sum(), 1.0)
