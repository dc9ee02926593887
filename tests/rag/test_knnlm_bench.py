"""Smoke run of ``benchmarks/bench_knnlm.py --quick`` (a tiny datastore)."""

from __future__ import annotations

from pathlib import Path

from tests._bench import run_quick


def test_bench_knnlm_quick(tmp_path: Path) -> None:
    res = run_quick("knnlm", tmp_path)
    row = res.details
    assert row["records"] == 30 and row["datastore_entries"] > 30
    assert row["knnlm_tokens_per_answer"] > 0
    parts = sum(row[f"knnlm_{p}_ms_per_token"] for p in ("reader", "search", "mix"))
    # the parts are timed separately from the whole: no timing comparison (it flakes under load)
    assert parts > 0 and row["knnlm_ms_per_token"] > 0
    assert row["ratio"] == row["knnlm_ms_per_token"] / row["plain_ms_per_token"]
    (knn,) = res.rows
    assert knn.measured == row["knnlm_ms_per_token"] and knn.unit == "ms/token"
    assert knn.baseline_measured == row["plain_ms_per_token"] and knn.ratio == row["ratio"]
