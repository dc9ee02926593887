"""Smoke run of ``benchmarks/bench_dp_vote.py --quick``: both readers are timed against
plain RAG in one run, and the batched and unbatched voting paths release the same
tokens."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_dp_vote.py"

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("torch")


def test_bench_dp_vote_quick(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("ragprivacy_bench_dp_vote", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "dp_vote.json"
    result = module.main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    ref, hf = result["readers"]
    assert ref["reader"] == "reference" and hf["reader"] == "hf-tiny-random"
    assert "unbatched_vs_plain" not in ref  # the reference reader has one voting path
    assert hf["same_tokens"] is True and hf["unbatched_questions"] == 1
    for row in (ref, hf):
        assert row["dp_vote_tokens_per_answer"] > 0 and row["plain_tokens_per_answer"] > 0
        # no timing comparison between systems (it flakes under load): only the arithmetic
        ratio = row["dp_vote_ms_per_token"] / row["plain_ms_per_token"]  # one repeat
        assert row["dp_vote_vs_plain"] == pytest.approx(ratio, rel=1e-9)
    assert hf["unbatched_ms_per_token"] > 0 and hf["unbatched_vs_dp_vote"] > 0
