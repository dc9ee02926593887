"""Smoke run of ``benchmarks/bench_coalition.py --quick``: the blocked range search and the
IVF searches give the all-pairs baseline's ĉ, and the IVF pair recall is measured."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._bench import run_quick


def test_bench_coalition_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = run_quick("coalition", tmp_path)
    result = res.details
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
    rows = {row.name: row for row in res.rows}
    recall = rows["coalition ĉ, 10,000 × 64, ivf, nprobe 32: ĉ and pair recall at θ*"]
    assert recall.ratio == result["large"]["ivf_pair_recall"] and recall.met is True
    assert (
        rows["coalition ĉ, 2,000 × 64, exact search"].baseline_measured
        == (result["small"]["baseline_s"])
    )
