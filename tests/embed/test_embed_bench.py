"""Smoke run of ``benchmarks/bench_embed.py --quick``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_embed.py"


def test_bench_embed_quick(tmp_path: Path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("ragprivacy_bench_embed", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "embed.json"
    result = module.main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    rows = {r["embedder"]: r for r in result["throughput"]}
    assert set(rows) == {"lsa", "hashing"}
    assert rows["hashing"]["ratio_to_hashing"] == 1.0
    assert all(r["texts_per_s"] > 0 for r in rows.values())
    assert all(r["recall@5"] >= 0.9 for r in result["recall"])
    assert "texts/s" in capsys.readouterr().out
