from __future__ import annotations

import math

import pytest

from ragprivacy.eval.metrics import (
    exact_match,
    longest_verbatim_run,
    match,
    perplexity,
    pii_leaked,
    precision_at_k,
    recall_at_k,
    token_f1,
    verbatim_overlap,
    wilson_interval,
)
from ragprivacy.types import PIISpan


def test_match_is_whole_word_containment() -> None:
    assert match("The answer is Velmora.", ["velmora"])
    assert not match("Velmorana", ["Velmora"])
    assert match("in the Quenlith Dynamics offices", ["Quenlith Dynamics", "x"])
    assert not match("", ["a"])


def test_exact_match_and_f1_follow_squad() -> None:
    assert exact_match("The Velmora!", ["velmora"])
    assert token_f1("born in Velmora", ["Velmora"]) == pytest.approx(0.5)
    assert token_f1("nothing", ["Velmora"]) == 0.0
    assert token_f1("a", ["the"]) == 1.0  # both normalise to empty


def test_retrieval_metrics() -> None:
    assert recall_at_k(["a", "b", "c"], ["c", "d"]) == 0.5
    assert recall_at_k(["a", "b", "c"], ["c"], k=2) == 0.0
    assert precision_at_k(["a", "b"], ["a"]) == 0.5
    assert math.isnan(recall_at_k(["a"], []))
    assert math.isnan(precision_at_k([], ["a"]))


def test_perplexity() -> None:
    assert perplexity([math.log(0.5)] * 4) == pytest.approx(2.0)
    assert math.isnan(perplexity(None))


def test_wilson_interval_known_value_and_edges() -> None:
    lo, hi = wilson_interval(8, 10)
    assert (round(lo, 3), round(hi, 3)) == (0.49, 0.943)
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == pytest.approx(1.0)


def test_verbatim_metrics() -> None:
    src = "The patient John Smith takes 5 mg of warfarin daily."
    gen = "john smith takes 5 mg of warfarin daily and rests"
    assert longest_verbatim_run(gen, src) == 8
    assert verbatim_overlap(gen, src, min_run=8) == pytest.approx(8 / 10)
    assert verbatim_overlap("unrelated words only here", src, min_run=2) == 0.0
    spans = [PIISpan(12, 22, "name", "John Smith"), PIISpan(37, 45, "drug", "warfarin")]
    assert [s.kind for s in pii_leaked(gen, spans)] == ["name", "drug"]
    assert pii_leaked("Johnny Smithers", spans) == []
