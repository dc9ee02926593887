"""Smoke run of ``benchmarks/bench_coalition.py --quick``: the blocked range search and the
IVF searches give the all-pairs baseline's ĉ, and the IVF pair recall is measured."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_coalition.py"


def test_bench_coalition_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("ragprivacy_bench_coalition", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "coalition.json"
    result = module.main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["small"]["same_k_hat"] is True
    assert result["small"]["queries"] == 2000 and result["large"]["queries"] == 10000
    assert result["small"]["k_hat"] == 10 and result["large"]["k_hat"] == 10  # P-C, k = 10
    assert result["large"]["peak_traced_bytes"] > 0
    assert result["small"]["ivf_same_k_hat"] is True and result["large"]["ivf_k_hat"] == 10
    for size in ("small", "large"):
        r = result[size]
        assert r["ivf_linked_pairs"] > 0 and r["ivf_found_pairs"] <= r["ivf_linked_pairs"]
        assert r["ivf_pair_recall"] == r["ivf_found_pairs"] / r["ivf_linked_pairs"]
        assert 0.0 < r["ivf_bound_cell_share"] <= 1.0
    assert result["large"]["ivf_peak_traced_bytes"] > 0
    assert "faster; same k_hat: True" in capsys.readouterr().out
