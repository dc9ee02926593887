"""Indices: exact (numpy/BLAS) against FAISS flat and HNSW, all in one run (ratios).

For each backend: build time (``add`` of all vectors), batch search throughput (one
``search`` call with all queries), single-query throughput (one call per query, median
latency), the latency of the full score vector of one query (``scores``, what DP
retrieval noises), and recall@k against the exact top-k. Ratios are to ``exact``.

Data: ``random`` unit vectors (the hardest case for HNSW: no low-dimensional structure)
or ``lsa``: LSA vectors of the proxy knowledge corpus, queried with its questions.

Usage::

    python benchmarks/bench_index.py [--quick] [--json OUT] [--n 100000] [--dim 384]
        [--data random|lsa] [--batch 1000] [--single 200] [--k 10] [--threads N]

``--quick`` is a smoke run of a few seconds. Timings vary ±30 % on shared machines:
compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ragprivacy.index import create_index

BACKENDS = ("exact", "faiss-flat", "faiss-hnsw")


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def make_data(kind: str, n: int, dim: int, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """``(vectors [n, dim], queries [n_queries, dim])``, unit rows."""
    if kind == "random":
        rng = np.random.default_rng(0)
        return _unit(rng, n, dim), _unit(rng, n_queries, dim)
    from _knowledge_proxy import make_knowledge_proxy

    from ragprivacy.embed import LsaEmbedder

    proxy = make_knowledge_proxy(n, rng=0)
    emb = LsaEmbedder(n_components=dim).fit(proxy.docs)
    return emb.encode(proxy.docs), emb.encode(proxy.questions[:n_queries])


def _recall(found: np.ndarray, truth: np.ndarray) -> float:
    hits = [len(set(f[f >= 0]) & set(t)) for f, t in zip(found, truth)]
    return float(np.sum(hits) / truth.size)


def bench(
    vectors: np.ndarray,
    queries: np.ndarray,
    *,
    k: int,
    n_single: int,
    threads: int | None,
    backends: Sequence[str] = BACKENDS,
) -> list[dict[str, Any]]:
    n, dim = vectors.shape
    ids = [str(i) for i in range(n)]
    rows: list[dict[str, Any]] = []
    truth: np.ndarray | None = None
    for name in backends:
        index = create_index(name, dim=dim, num_threads=threads)
        start = time.perf_counter()
        index.add(vectors, ids)
        build = time.perf_counter() - start
        index.search(queries[:2], k)  # warm-up
        start = time.perf_counter()
        found = index.search(queries, k)
        batch = time.perf_counter() - start
        singles = []
        for q in queries[:n_single]:
            start = time.perf_counter()
            index.search(q, k)
            singles.append(time.perf_counter() - start)
        score_times = []
        for q in queries[: min(n_single, 50)]:
            start = time.perf_counter()
            index.scores(q)
            score_times.append(time.perf_counter() - start)
        if truth is None:
            truth = found.indices if name == "exact" else create_exact_truth(vectors, queries, k)
        single = statistics.median(singles)
        row = {
            "backend": name,
            "n": n,
            "dim": dim,
            "k": k,
            "build_s": round(build, 3),
            "batch_queries": len(queries),
            "batch_qps": round(len(queries) / batch, 1),
            "single_qps": round(1.0 / single, 1),
            "single_ms": round(1e3 * single, 3),
            "scores_ms": round(1e3 * statistics.median(score_times), 3),
            f"recall@{k}": round(_recall(found.indices, truth), 4),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = next((r for r in rows if r["backend"] == "exact"), rows[0])
    for r in rows:
        r["build_ratio"] = round(r["build_s"] / max(base["build_s"], 1e-9), 2)
        r["batch_qps_ratio"] = round(r["batch_qps"] / base["batch_qps"], 2)
        r["single_qps_ratio"] = round(r["single_qps"] / base["single_qps"], 2)
    return rows


def create_exact_truth(vectors: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    index = create_index("exact", dim=vectors.shape[1])
    index.add(vectors, [str(i) for i in range(len(vectors))])
    return index.search(queries, k).indices


def _table(rows: list[dict[str, Any]], k: int) -> None:
    head = (
        f"{'backend':<11} {'build s':>9} {'x':>6} {'batch q/s':>11} {'x':>6} "
        f"{'single q/s':>11} {'x':>6} {'scores ms':>10} {'recall@' + str(k):>10}"
    )
    print(head)
    for r in rows:
        print(
            f"{r['backend']:<11} {r['build_s']:>9.2f} {r['build_ratio']:>6} "
            f"{r['batch_qps']:>11.0f} {r['batch_qps_ratio']:>6} {r['single_qps']:>11.0f} "
            f"{r['single_qps_ratio']:>6} {r['scores_ms']:>10.3f} {r[f'recall@{k}']:>10.4f}"
        )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smoke run in seconds")
    p.add_argument("--json", default=None, help="write the results to this file")
    p.add_argument("--n", type=int, default=None, help="stored vectors (default 10^5)")
    p.add_argument("--dim", type=int, default=None, help="width (default 384)")
    p.add_argument("--data", choices=("random", "lsa"), default="random")
    p.add_argument("--batch", type=int, default=None, help="queries per batch (default 1000)")
    p.add_argument("--single", type=int, default=None, help="single queries (default 200)")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args(argv)
    n = a.n or (5000 if a.quick else 100_000)
    dim = a.dim or (64 if a.quick else 384)
    batch = a.batch or (100 if a.quick else 1000)
    single = a.single or (30 if a.quick else 200)
    start = time.perf_counter()
    vectors, queries = make_data(a.data, n, dim, batch)
    print(f"data: {a.data} {vectors.shape} in {time.perf_counter() - start:.1f} s", flush=True)
    rows = bench(vectors, queries, k=a.k, n_single=single, threads=a.threads)
    _table(rows, a.k)
    result = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "data": a.data,
        "threads": a.threads,
        "rows": rows,
    }
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
