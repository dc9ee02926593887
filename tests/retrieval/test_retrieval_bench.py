"""Smoke run of ``benchmarks/bench_retrieval.py --quick``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_retrieval.py"


def test_bench_retrieval_quick(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("ragprivacy_bench_retrieval", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "retrieval.json"
    result = module.main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    floor = {row["row"]: row for row in result["floor"]}
    crossover = floor.pop("gathered scores of a fraction f against one scan")
    assert crossover["scan_ms"] > 0 and crossover["ratio_f_0.125"] > 0
    assert set(floor) == {
        f"{kind} noisy top-K, {path}"
        for kind in ("exact", "noise-first")
        for path in ("float", "secure")
    }
    for row in floor.values():
        assert row["ratio_to_faiss_flat"] > 0 and row["noise_share"] > 0
        assert round(row["sigma"]) == 3584  # the default calibration, Δ = 1
    for path in ("float", "secure"):
        row = floor[f"noise-first noisy top-K, {path}"]
        assert 0 < row["scored_fraction"] < 0.01  # 64 of 20,000 documents (K = 5, padded)
        assert 5 <= row["candidates_mean"] <= 64
        assert round(row["scored_docs_mean"], 6) == 64
        assert 0 <= row["identical_rate"] <= 1 and row["ratio_to_full_path"] > 0
    assert [row["sigma"] for row in result["fallback"]] == [0.1, 0.3]
    assert all(row["fallback_rate"] == 1.0 for row in result["fallback"])
    assert "sweep" not in result
