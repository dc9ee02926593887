"""Smoke run of ``benchmarks/bench_extraction.py --quick``: the current datastore scan
gives the baseline's best ROUGE-L for every answer."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._bench import run_quick


def test_bench_extraction_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = run_quick("extraction", tmp_path)
    result = res.details
    assert result["same_results"] is True
    assert result["answers"] == 20 and 0 < result["leaks"] <= 10  # only copies leak
    assert result["baseline"]["scan_s"] > 0 and result["current"]["scan_s"] > 0
    assert "faster; same results: True" in capsys.readouterr().out
    scan = res.rows[0]
    assert scan.measured == result["current"]["scan_s"]
    assert scan.baseline_measured == result["baseline"]["scan_s"]
