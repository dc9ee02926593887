"""Smoke run of ``benchmarks/bench_embed.py --quick``."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests._bench import run_quick


def test_bench_embed_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = run_quick("embed", tmp_path)
    result = res.details
    rows = {r["embedder"]: r for r in result["throughput"]}
    assert set(rows) == {"lsa", "hashing"}
    assert rows["hashing"]["ratio_to_hashing"] == 1.0
    assert all(r["texts_per_s"] > 0 for r in rows.values())
    assert all(r["recall@5"] >= 0.9 for r in result["recall"])
    assert "texts/s" in capsys.readouterr().out
    named = {row.name: row for row in res.rows}
    assert set(named) == {
        "encoding throughput, lsa",
        "recall@5, lsa k=128, proxy-zipf-300",
        "recall@5, hashing, proxy-zipf-300",
    }
    lsa = named["encoding throughput, lsa"]
    assert lsa.baseline == "hashing" and lsa.measured == rows["lsa"]["texts_per_s"]
