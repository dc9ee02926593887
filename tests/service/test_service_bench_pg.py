"""Smoke run of ``benchmarks/bench_service_pg.py --quick`` on the session's PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests._postgres import fresh_database

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_service_pg.py"


@pytest.mark.postgres
def test_the_postgres_service_benchmark_runs(tmp_path, postgres_url) -> None:  # type: ignore[no-untyped-def]
    db = fresh_database(postgres_url, f"bench_{uuid.uuid4().hex[:12]}")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--postgres", db, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert set(res["req_per_s"]) == {"sqlite-1", "pg-1", "pg-2", "pg-1-inline"}
    assert all(v > 0 for v in res["req_per_s"].values())
    assert res["ratio_pg2_over_pg1"] > 0 and res["ratio_pg1_over_sqlite1"] > 0
    assert res["ratio_pgvector_over_inline"] > 0
    held = res["held_bytes_per_replica"]
    assert held["pgvector"] < held["inline"]
