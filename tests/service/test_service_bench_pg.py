"""Smoke run of ``benchmarks/bench_service_pg.py --quick`` on the session's PostgreSQL."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from tests._bench import run_quick
from tests._postgres import fresh_database


@pytest.mark.postgres
def test_the_postgres_service_benchmark_runs(tmp_path: Path, postgres_url: str) -> None:
    db = fresh_database(postgres_url, f"bench_{uuid.uuid4().hex[:12]}")
    out = tmp_path / "out"
    results = run_quick("service_pg", tmp_path, "--postgres", db, "--out", str(out), command=True)
    assert json.loads((out / "results.json").read_text()) == json.loads(
        (tmp_path / "service_pg.json").read_text()
    )
    res = results.details
    assert set(res["req_per_s"]) == {"sqlite-1", "pg-1", "pg-2", "pg-1-inline"}
    assert all(v > 0 for v in res["req_per_s"].values())
    assert res["ratio_pg2_over_pg1"] > 0 and res["ratio_pg1_over_sqlite1"] > 0
    assert res["ratio_pgvector_over_inline"] > 0
    held = res["held_bytes_per_replica"]
    assert held["pgvector"] < held["inline"]
    ratios = sorted(r.ratio for r in results.rows)
    assert ratios == sorted(
        res[k]
        for k in ("ratio_pg2_over_pg1", "ratio_pg1_over_sqlite1", "ratio_pgvector_over_inline")
    )
