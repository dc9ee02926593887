"""Smoke run of ``benchmarks/bench_service.py --quick`` (every section, small)."""

from __future__ import annotations

import json
from pathlib import Path

from tests._bench import run_quick


def test_the_service_benchmark_runs_and_reports_every_section(tmp_path: Path) -> None:
    out = tmp_path / "out"
    results = run_quick("service", tmp_path, "--out", str(out), command=True, timeout=600)
    res = results.details
    for level in res["http"]["levels"]:
        for mode in ("plain", "private"):
            assert level[mode]["requests"] > 0 and level[mode]["p50_ms"] > 0
        assert level["ratio_req_per_s"] > 0
    assert res["verify"]["verify_full_passed"] and res["verify"]["verify_sampled_passed"]
    assert 0 <= res["timing"]["member_vs_nonmember"]["mannwhitney_p"] <= 1
    md = (out / "results.md").read_text()
    assert "| stage | ms |" in md and "| row | measured | named baseline |" in md
    saved = json.loads((out / "results.json").read_text())
    assert saved == json.loads((tmp_path / "service.json").read_text())
    throughput = {r.config["clients"]: r for r in results.rows if r.unit == "req/s"}
    assert set(throughput) == {1, 4}  # the quick run's levels of clients
    for level in res["http"]["levels"]:
        row = throughput[level["concurrency"]]
        assert row.measured == level["private"]["req_per_s"]
        assert row.ratio == level["ratio_req_per_s"]
