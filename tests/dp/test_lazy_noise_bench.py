"""Smoke run of ``benchmarks/bench_lazy_noise.py --quick`` (a small index)."""

from __future__ import annotations

from pathlib import Path

from tests._bench import run_quick


def test_bench_lazy_noise_quick(tmp_path: Path) -> None:
    res = run_quick(
        "lazy_noise", tmp_path, "--n", "3000", "--queries", "2", "--cache", str(tmp_path / "c")
    )
    baselines = {row.baseline for row in res.rows}
    assert baselines == {"FAISS HNSW (M 32, efSearch 64)", "noise-first with every slot's noise"}
    assert all(row.config["n"] == 3000 and row.measured > 0 for row in res.rows)
    assert res.details["drawn_per_query_median"] >= 64  # the candidates' floor, max(64, 8K)
