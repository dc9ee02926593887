"""Smoke run of ``benchmarks/bench_service_memory.py --quick`` (a small tenant)."""

from __future__ import annotations

from pathlib import Path

from tests._bench import run_quick


def test_bench_service_memory_quick(tmp_path: Path) -> None:
    res = run_quick("service_memory", tmp_path, "--n", "1500", "--queries", "2")
    assert {row.baseline for row in res.rows} == {"float32 index (n·d·4 bytes)"}
    assert {row.config["setup"] for row in res.rows} == {"service"}
    assert all(row.config["n"] == 1500 and row.measured > 0 for row in res.rows)
    assert res.details["index_bytes"] == 1500 * 384 * 4
    for run in res.details["runs"].values():
        # the worker built the window the service published (its roots are checked)
        assert run["n"] == 1500 and run["peak_rss"] >= run["built_rss"] > run["imported_rss"]
        assert run["parts"]["int32 rows"] == 1500 * 384 * 4
        assert run["parts"]["Merkle tree (packed)"] <= 2 * 32 * 1500
