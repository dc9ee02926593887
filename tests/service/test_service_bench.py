"""Smoke run of ``benchmarks/bench_service.py --quick`` (every section, small)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_service.py"


def test_the_service_benchmark_runs_and_reports_every_section(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    for level in res["http"]["levels"]:
        for mode in ("plain", "private"):
            assert level[mode]["requests"] > 0 and level[mode]["p50_ms"] > 0
        assert level["ratio_req_per_s"] > 0
    assert res["verify"]["verify_full_passed"] and res["verify"]["verify_sampled_passed"]
    assert 0 <= res["timing"]["member_vs_nonmember"]["mannwhitney_p"] <= 1
    assert "| stage | ms |" in (out / "results.md").read_text()
