"""Smoke run of ``benchmarks/bench_index.py --quick``."""

from __future__ import annotations

from pathlib import Path

from tests._bench import run_quick


def test_bench_index_quick(tmp_path: Path) -> None:
    res = run_quick("index", tmp_path, "--n", "2000", "--threads", "1")
    rows = {r["backend"]: r for r in res.details["backends"]}
    assert set(rows) == {"exact", "faiss-flat", "faiss-hnsw"}
    assert rows["exact"]["batch_qps_ratio"] == 1.0
    assert rows["exact"]["recall@10"] == rows["faiss-flat"]["recall@10"] == 1.0
    assert rows["faiss-hnsw"]["recall@10"] >= 0.9
    named = {(r.config["backend"], r.unit): r for r in res.rows}
    assert {b for b, _ in named} == {"faiss-flat", "faiss-hnsw"}  # each against exact
    assert all(r.baseline == "exact" and r.config["n"] == 2000 for r in res.rows)
    batch = [r for r in res.rows if r.name.startswith("batch search, faiss-hnsw")]
    assert len(batch) == 1 and batch[0].ratio == rows["faiss-hnsw"]["batch_qps_ratio"]
