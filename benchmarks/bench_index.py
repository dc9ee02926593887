"""Indices: exact (numpy/BLAS) against FAISS flat and HNSW, all in one run (ratios).

For each backend: build time (``add`` of all vectors), batch search throughput (one
``search`` call with all queries), single-query throughput (one call per query, median
latency), the latency of the full score vector of one query (``scores``, what DP
retrieval noises), and recall@k against the exact top-k. Ratios are to ``exact``.

Data: ``random`` unit vectors (the hardest case for HNSW: no low-dimensional structure)
or ``lsa``: LSA vectors of the proxy knowledge corpus, queried with its questions.

Usage::

    python benchmarks/bench_index.py [--quick] [--json PATH] [--n 100000] [--dim 384]
        [--data random|lsa] [--batch 1000] [--single 200] [--k 10] [--threads N]
        [--repeats 1]

``--quick`` is a smoke run of a few seconds. Timings vary ±30 % on shared machines:
compare ratios within one run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, bench_parser, once, start, time_call, time_interleaved

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
    repeats: int = 1,
    backends: Sequence[str] = BACKENDS,
) -> list[dict[str, Any]]:
    n, dim = vectors.shape
    ids = [str(i) for i in range(n)]
    rows: list[dict[str, Any]] = []
    truth: np.ndarray | None = None
    for name in backends:
        index = create_index(name, dim=dim, num_threads=threads)
        build, batch, found, single, scores = _measure(
            index, vectors, ids, queries, k, n_single, repeats
        )
        if truth is None:
            truth = found.indices if name == "exact" else create_exact_truth(vectors, queries, k)
        row = {
            "backend": name,
            "n": n,
            "dim": dim,
            "k": k,
            "build_s": build,
            "batch_queries": len(queries),
            "batch_qps": len(queries) / batch,
            "single_qps": 1.0 / single,
            "single_ms": 1e3 * single,
            "scores_ms": 1e3 * scores,
            f"recall@{k}": _recall(found.indices, truth),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = next((r for r in rows if r["backend"] == "exact"), rows[0])
    for r in rows:
        r["build_ratio"] = r["build_s"] / max(base["build_s"], 1e-9)
        r["batch_qps_ratio"] = r["batch_qps"] / base["batch_qps"]
        r["single_qps_ratio"] = r["single_qps"] / base["single_qps"]
    return rows


def _measure(
    index: Any,
    vectors: np.ndarray,
    ids: list[str],
    queries: np.ndarray,
    k: int,
    n_single: int,
    repeats: int,
) -> tuple[float, float, Any, float, float]:
    """Seconds of the build, of the batch search (median of ``repeats``, after a warm-up
    search) and its result, and the median seconds of one single-query search and of
    one query's score vector (a query each)."""
    build = once(partial(index.add, vectors, ids)).seconds
    index.search(queries[:2], k)  # warm-up
    batched = time_call(partial(index.search, queries, k), repeats=repeats, warmup=0)
    single = time_interleaved(
        {"search": lambda r: index.search(queries[r], k)},
        repeats=min(n_single, len(queries)),
        warmup=0,
    )["search"]
    scores = time_interleaved(
        {"scores": lambda r: index.scores(queries[r])},
        repeats=min(n_single, 50, len(queries)),
        warmup=0,
    )["scores"]
    return build, batched.median, batched.value, single.median, scores.median


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
            f"{r['backend']:<11} {r['build_s']:>9.2f} {r['build_ratio']:>6.2f} "
            f"{r['batch_qps']:>11.0f} {r['batch_qps_ratio']:>6.2f} {r['single_qps']:>11.0f} "
            f"{r['single_qps_ratio']:>6.2f} {r['scores_ms']:>10.3f} {r[f'recall@{k}']:>10.4f}"
        )


def rows(res: dict[str, Any]) -> list[Row]:
    """Each backend against ``exact``: batch and single-query throughput, build time and
    the latency of one query's score vector."""
    backends = res["backends"]
    base = next((r for r in backends if r["backend"] == "exact"), backends[0])
    k = res["k"]
    out = []
    for r in backends:
        if r is base:
            continue
        config = {"backend": r["backend"], "n": r["n"], "dim": r["dim"], "k": k,
                  "data": res["data"], "threads": res["threads"]}  # fmt: skip
        recall = f"recall@{k} {r[f'recall@{k}']:.4f}"
        for what, key, unit in (
            ("batch search", "batch_qps", "queries/s"),
            ("single-query search", "single_qps", "queries/s"),
            ("build", "build_s", "s"),
            ("one query's score vector", "scores_ms", "ms"),
        ):
            out.append(
                Row(
                    name=f"{what}, {r['backend']}, n = {r['n']:,}, dim {r['dim']}",
                    config=config,
                    measured=r[key],
                    unit=unit,
                    baseline=base["backend"],
                    baseline_measured=base[key],
                    notes=recall if "search" in what else "",
                )
            )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = bench_parser(__doc__, repeats=1, repeats_help="timed batch searches")
    p.add_argument("--n", type=int, default=None, help="stored vectors (default 10^5)")
    p.add_argument("--dim", type=int, default=None, help="width (default 384)")
    p.add_argument("--data", choices=("random", "lsa"), default="random")
    p.add_argument("--batch", type=int, default=None, help="queries per batch (default 1000)")
    p.add_argument("--single", type=int, default=None, help="single queries (default 200)")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    run = start("index", p, argv)
    a = run.args
    n = a.n or (5000 if a.quick else 100_000)
    dim = a.dim or (64 if a.quick else 384)
    batch = a.batch or (100 if a.quick else 1000)
    single = a.single or (30 if a.quick else 200)
    made = once(lambda: make_data(a.data, n, dim, batch))
    vectors, queries = made.value
    print(f"data: {a.data} {vectors.shape} in {made.seconds:.1f} s", flush=True)
    backends = bench(vectors, queries, k=a.k, n_single=single, threads=a.threads, repeats=a.repeats)
    _table(backends, a.k)
    result = {"data": a.data, "threads": a.threads, "k": a.k, "backends": backends}
    return run.finish(rows(result), result)


if __name__ == "__main__":
    main()
