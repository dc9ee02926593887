"""Smoke run of ``benchmarks/bench_extraction.py --quick``: the current datastore scan
gives the baseline's best ROUGE-L for every answer."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_extraction.py"


def test_bench_extraction_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("ragprivacy_bench_extraction", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "extraction.json"
    result = module.main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["same_results"] is True
    assert result["answers"] == 20 and 0 < result["leaks"] <= 10  # only copies leak
    assert result["baseline"]["scan_s"] > 0 and result["current"]["scan_s"] > 0
    assert "faster; same results: True" in capsys.readouterr().out
