"""Cost of private retrieval against plain retrieval, all in one run (ratios).

1. Noisy top-K (collusion paper eq. 2.1: score every document, noise every score, take
   the top K) against a plain exact top-K (``ExactIndex.search``) over n random unit
   vectors: the float simulation path and the secure discrete-Gaussian path.
2. The exact lazy noise-then-select (``lazy_noisy_topk`` over FAISS HNSW top-C
   candidates, with one global bound u = 1 and with per-bucket bounds from
   ``BucketBounds``) against a plain HNSW search, across σ, with the fraction of queries
   that fell back to full noise, on clustered unit vectors (topics of 50 documents,
   within-topic cosine ≈ 0.5; queries paraphrase a document).

Usage::

    python benchmarks/bench_retrieval.py [--sizes 100000 1000000] [--hnsw-n 100000]
        [--dim 384] [--queries 20] [--sigmas ...] [--candidates 64] [--buckets B]
        [--json out.json]

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from ragprivacy.dp import GaussianNoisyTopK
from ragprivacy.index import create_index
from ragprivacy.retrieval import BucketBounds, lazy_noisy_topk


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _per_query(fn: Callable[[np.ndarray], object], queries: np.ndarray) -> float:
    fn(queries[0])  # warm-up
    times = []
    for q in queries[1:]:
        t = time.perf_counter()
        fn(q)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_noisy(n: int, dim: int, k: int, queries: int, rng: np.random.Generator) -> dict:
    data = _unit(rng, n, dim)
    qs = _unit(rng, queries + 1, dim)
    index = create_index("exact", dim=dim, num_threads=1)
    index.add(data, [str(i) for i in range(n)])
    sim = GaussianNoisyTopK(sigma=0.5, k=k, simulation=True)
    secure = GaussianNoisyTopK(sigma=0.5, k=k)
    gen = np.random.default_rng(0)
    plain = _per_query(lambda q: index.search(q[None, :], k), qs)
    noisy_sim = _per_query(lambda q: sim.select(index.scores(q[None, :])[0], rng=gen), qs)
    noisy_sec = _per_query(lambda q: secure.select(index.scores(q[None, :])[0]), qs[:6])
    return {
        "n": n,
        "plain_exact_ms": plain * 1e3,
        "noisy_float_ms": noisy_sim * 1e3,
        "noisy_secure_ms": noisy_sec * 1e3,
        "ratio_float": noisy_sim / plain,
        "ratio_secure": noisy_sec / plain,
    }


def _clustered(
    rng: np.random.Generator, n: int, dim: int, queries: int, per_topic: int = 50
) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors around n/per_topic random topic centres (within-topic cosine ≈ 0.5,
    like sentence embeddings of related texts), and queries that paraphrase a document
    (cosine ≈ 0.85 with it)."""
    topics = _unit(rng, max(1, n // per_topic), dim)
    lab = rng.integers(topics.shape[0], size=n)
    x = topics[lab] + rng.standard_normal((n, dim)).astype(np.float32) / np.sqrt(dim)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    which = rng.integers(n, size=queries)
    q = x[which] + 0.6 * rng.standard_normal((queries, dim)).astype(np.float32) / np.sqrt(dim)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return x, q.astype(np.float32)


def bench_lazy(
    n: int,
    dim: int,
    k: int,
    queries: int,
    sigmas: list[float],
    rng: np.random.Generator,
    *,
    candidates: int = 64,
    buckets: int | None = None,
    ef_construction: int = 200,
) -> list[dict]:
    """Lazy exact noise-then-select over HNSW top-C candidates vs a plain HNSW top-K,
    with one global bound (u = 1) and with per-bucket bounds (k-means cells)."""
    data, qs = _clustered(rng, n, dim, queries + 1)
    index = create_index("faiss-hnsw", dim=dim, num_threads=1, ef_construction=ef_construction)
    t = time.perf_counter()
    index.add(data, [str(i) for i in range(n)])
    build = time.perf_counter() - t
    t = time.perf_counter()
    bb = BucketBounds.build(data, buckets=buckets, iterations=5, rng=0)
    bucket_build = time.perf_counter() - t
    rows = index._stored()  # type: ignore[attr-defined]
    plain = _per_query(lambda q: index.search(q[None, :], k), qs)
    top_k_score = float(np.mean([np.sort(rows @ q)[-k] for q in qs[:10]]))
    bound_gap = float(np.mean([np.median(bb.bounds(q)) for q in qs[:10]]))

    def score_of(q: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        def f(p: np.ndarray) -> np.ndarray:
            return (rows @ q)[p] if p.size > n // 8 else rows[p] @ q

        return f

    out = []
    for sigma in sigmas:
        for mode in ("global", "buckets"):
            gen = np.random.default_rng(1)
            stats: list[tuple[bool, int, int]] = []

            def lazy(
                q: np.ndarray,
                sigma: float = sigma,
                mode: str = mode,
                gen: np.random.Generator = gen,
                stats: list = stats,
            ) -> None:
                found = index.search(q[None, :], candidates)
                sel = lazy_noisy_topk(
                    found.indices[0],
                    found.scores[0],
                    n,
                    k,
                    sigma,
                    score_of=score_of(q),
                    bound=1.0 + 1e-4 if mode == "global" else bb.bounds(q),
                    buckets=None if mode == "global" else bb,
                    rng=gen,
                )
                stats.append((sel.fell_back, sel.revealed, sel.rounds))

            t_lazy = _per_query(lazy, qs)
            row = {
                "n": n,
                "sigma": sigma,
                "bound": mode,
                "buckets": bb.count if mode == "buckets" else 1,
                "plain_hnsw_ms": plain * 1e3,
                "lazy_ms": t_lazy * 1e3,
                "ratio": t_lazy / plain,
                "fallback_rate": float(np.mean([s[0] for s in stats])),
                "mean_revealed": float(np.mean([s[1] for s in stats])),
                "mean_rounds": float(np.mean([s[2] for s in stats])),
                "hnsw_build_s": build,
                "bucket_build_s": bucket_build,
                "kth_score": top_k_score,
                "median_bucket_bound": bound_gap,
            }
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    p.add_argument("--hnsw-n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--queries", type=int, default=20)
    p.add_argument(
        "--sigmas", type=float, nargs="+", default=[0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 30.0, 422.0]
    )
    p.add_argument("--candidates", type=int, default=64)
    p.add_argument("--buckets", type=int, default=None)
    p.add_argument("--ef-construction", type=int, default=200)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    result = {"noisy_topk": [], "lazy_hnsw": []}
    for n in a.sizes:
        row = bench_noisy(n, a.dim, a.k, a.queries, rng)
        result["noisy_topk"].append(row)
        print(json.dumps(row))
    if a.hnsw_n:
        result["lazy_hnsw"] = bench_lazy(
            a.hnsw_n,
            a.dim,
            a.k,
            a.queries,
            a.sigmas,
            rng,
            candidates=a.candidates,
            buckets=a.buckets,
            ef_construction=a.ef_construction,
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
