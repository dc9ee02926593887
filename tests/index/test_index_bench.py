"""Smoke run of ``benchmarks/bench_index.py --quick``."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_index.py"


def test_bench_index_quick(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("ragprivacy_bench_index", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "index.json"
    result = module.main(["--quick", "--n", "2000", "--threads", "1", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    rows = {r["backend"]: r for r in result["rows"]}
    assert set(rows) == {"exact", "faiss-flat", "faiss-hnsw"}
    assert rows["exact"]["batch_qps_ratio"] == 1.0
    assert rows["exact"]["recall@10"] == rows["faiss-flat"]["recall@10"] == 1.0
    assert rows["faiss-hnsw"]["recall@10"] >= 0.9
