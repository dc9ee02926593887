"""Smoke run of ``benchmarks/bench_audited_retrieval.py --quick`` (a small index)."""

from __future__ import annotations

from pathlib import Path

from tests._bench import run_quick


def test_bench_audited_retrieval_quick(tmp_path: Path) -> None:
    res = run_quick(
        "audited_retrieval", tmp_path, "--n", "8000", "--queries", "2",
        "--cache", str(tmp_path / "cache"),
    )  # fmt: skip
    assert {row.baseline for row in res.rows} == {"FAISS HNSW (M 32, efSearch 64)"}
    assert len(res.rows) == 5 and all(row.measured > 0 for row in res.rows)
    config = res.rows[0].config
    # 8,000 slots admit the lazy path at the calibration; σ = 0.5 (a quarter of the
    # range) sends every query to the full derivation
    assert config["lazy_at_sigma"] and config["lazy_at_small_sigmas"][-1] is False
    assert res.details["verify_passed"] and res.details["records"] == 3  # a warm-up and 2 timed
