"""Smoke run of ``benchmarks/bench_retrieval.py --quick``."""

from __future__ import annotations

from pathlib import Path

from tests._bench import run_quick


def test_bench_retrieval_quick(tmp_path: Path) -> None:
    res = run_quick("retrieval", tmp_path)
    result = res.details
    floor = {row["row"]: row for row in result["floor"]}
    crossover = floor.pop("gathered scores of a fraction f against one scan")
    assert crossover["scan_ms"] > 0 and crossover["ratio_f_0.125"] > 0
    assert set(floor) == {
        f"{kind} noisy top-K, {path}"
        for kind in ("exact", "noise-first")
        for path in ("float", "secure")
    }
    for row in floor.values():
        assert row["ratio_to_faiss_flat"] > 0 and row["noise_share"] > 0
        assert round(row["sigma"]) == 3584  # the default calibration, Δ = 1
    for path in ("float", "secure"):
        row = floor[f"noise-first noisy top-K, {path}"]
        assert 0 < row["scored_fraction"] < 0.01  # 64 of 20,000 documents (K = 5, padded)
        assert 5 <= row["candidates_mean"] <= 64
        assert round(row["scored_docs_mean"], 6) == 64
        assert 0 <= row["identical_rate"] <= 1 and row["ratio_to_full_path"] > 0
    assert [row["sigma"] for row in result["fallback"]] == [0.1, 0.3]
    assert all(row["fallback_rate"] == 1.0 for row in result["fallback"])
    assert "sweep" not in result
    # one row per measurement against a baseline, and the noise share where capped
    rows = {row.name: row for row in res.rows}
    assert set(rows) == {
        "exact noisy top-K, float, n = 20,000",
        "noise-first noisy top-K, float, n = 20,000",
        "exact noisy top-K, secure, n = 20,000",
        "exact noisy top-K, secure, n = 20,000: noise's share of the query",
        "noise-first noisy top-K, secure, n = 20,000",
        *(f"lazy noise-then-select, fallback, n = 3,000, σ = {s}" for s in (0.1, 0.3)),
        *(f"lazy retriever, fallback remembered, n = 3,000, σ = {s}" for s in (0.1, 0.3)),
    }
    secure = floor["exact noisy top-K, secure"]
    assert rows["exact noisy top-K, secure, n = 20,000"].measured == secure["retrieve_ms"]
    assert rows["exact noisy top-K, float, n = 20,000"].goal == "≤ 1.3×"
    share = rows["exact noisy top-K, secure, n = 20,000: noise's share of the query"]
    assert share.goal == "≤ 20%" and share.met == (share.ratio <= 0.2)
