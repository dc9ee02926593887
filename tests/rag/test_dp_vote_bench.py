"""Smoke run of ``benchmarks/bench_dp_vote.py --quick``: both readers are timed against
plain RAG in one run, and the batched and unbatched voting paths release the same
tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._bench import run_quick


def test_bench_dp_vote_quick(tmp_path: Path) -> None:
    res = run_quick("dp_vote", tmp_path)
    ref, hf = res.details["readers"]
    assert ref["reader"] == "reference" and hf["reader"] == "hf-tiny-random"
    assert "unbatched_vs_plain" not in ref  # the reference reader has one voting path
    assert hf["same_tokens"] is True and hf["unbatched_questions"] == 1
    for row in (ref, hf):
        assert row["dp_vote_tokens_per_answer"] > 0 and row["plain_tokens_per_answer"] > 0
        # no timing comparison between systems (it flakes under load): only the arithmetic
        ratio = row["dp_vote_ms_per_token"] / row["plain_ms_per_token"]  # one repeat
        assert row["dp_vote_vs_plain"] == pytest.approx(ratio, rel=1e-9)
    assert hf["unbatched_ms_per_token"] > 0 and hf["unbatched_vs_dp_vote"] > 0
    rows = {(r.config["reader"], r.config["path"], r.baseline): r for r in res.rows}
    assert len(rows) == 4  # each reader batched; the hf reader unbatched against both
    batched = rows["hf-tiny-random", "batched", "plain RAG (top-5)"]
    assert batched.goal == "≤ 3×" and batched.measured == hf["dp_vote_ms_per_token"]
    assert rows["reference", "batched", "plain RAG (top-5)"].goal is None
    slow = rows["hf-tiny-random", "unbatched", "batched DP voting, same 1 question"]
    assert slow.ratio == pytest.approx(hf["unbatched_vs_dp_vote"], rel=1e-9)  # one repeat
