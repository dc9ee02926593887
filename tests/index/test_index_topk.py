"""The exact top-k selection against a full stable sort, ties included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ragprivacy.index._checks import exact_topk


def _reference(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # stable: lower position first
    return order, np.take_along_axis(scores, order, axis=1)


@settings(max_examples=200, deadline=None)
@given(
    q=st.integers(1, 5),
    n=st.integers(1, 40),
    k=st.integers(1, 50),
    levels=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_matches_stable_sort_with_ties(q: int, n: int, k: int, levels: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, levels, size=(q, n)).astype(np.float32)  # many ties
    k = min(k, n)
    got_pos, got_val = exact_topk(scores, k)
    want_pos, want_val = _reference(scores, k)
    np.testing.assert_array_equal(got_pos, want_pos)
    np.testing.assert_array_equal(got_val, want_val)
    assert got_pos.dtype == np.int64


def test_continuous_scores() -> None:
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((7, 1000)).astype(np.float32)
    got_pos, _ = exact_topk(scores, 25)
    np.testing.assert_array_equal(got_pos, _reference(scores, 25)[0])
