"""Cost of private retrieval against plain retrieval, all in one run (ratios).

1. Noisy top-K (collusion paper eq. 2.1: score every document, noise every score, take
   the top K) against a plain exact top-K (``ExactIndex.search``) over n random unit
   vectors: the float simulation path and the secure discrete-Gaussian path.
2. The exact lazy noise-then-select (``lazy_noisy_topk`` over FAISS HNSW top-C
   candidates) against a plain HNSW search, across σ, with the fraction of queries that
   fell back to full noise.

Usage::

    python benchmarks/bench_retrieval.py [--sizes 100000 1000000] [--hnsw-n 100000]
        [--dim 384] [--queries 20] [--json out.json]

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
from ragprivacy.retrieval import lazy_noisy_topk


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


def bench_lazy(
    n: int, dim: int, k: int, queries: int, sigmas: list[float], rng: np.random.Generator
) -> list[dict]:
    data = _unit(rng, n, dim)
    qs = _unit(rng, queries + 1, dim)
    index = create_index("faiss-hnsw", dim=dim, num_threads=1)
    t = time.perf_counter()
    index.add(data, [str(i) for i in range(n)])
    build = time.perf_counter() - t
    rows = index._stored()  # type: ignore[attr-defined]
    plain = _per_query(lambda q: index.search(q[None, :], k), qs)
    out = []
    for sigma in sigmas:
        cand = max(64, 8 * k)
        gen = np.random.default_rng(1)
        fell = []

        def lazy(
            q: np.ndarray,
            sigma: float = sigma,
            cand: int = cand,
            gen: np.random.Generator = gen,
            fell: list = fell,
        ) -> None:
            found = index.search(q[None, :], cand)
            sel = lazy_noisy_topk(
                found.indices[0],
                found.scores[0],
                n,
                k,
                sigma,
                score_of=lambda p: rows[p] @ q,
                bound=1.0 + 1e-5,
                rng=gen,
            )
            fell.append(sel.fell_back)

        t_lazy = _per_query(lazy, qs)
        out.append(
            {
                "n": n,
                "sigma": sigma,
                "hnsw_build_s": build,
                "plain_hnsw_ms": plain * 1e3,
                "lazy_ms": t_lazy * 1e3,
                "ratio": t_lazy / plain,
                "fallback_rate": float(np.mean(fell)),
            }
        )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--hnsw-n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--queries", type=int, default=20)
    p.add_argument("--sigmas", type=float, nargs="+", default=[0.01, 0.03, 0.1, 0.3, 1.0])
    p.add_argument("--json", default=None)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    result = {"noisy_topk": [], "lazy_hnsw": []}
    for n in a.sizes:
        row = bench_noisy(n, a.dim, a.k, a.queries, rng)
        result["noisy_topk"].append(row)
        print(json.dumps(row))
    if a.hnsw_n:
        for row in bench_lazy(a.hnsw_n, a.dim, a.k, a.queries, a.sigmas, rng):
            result["lazy_hnsw"].append(row)
            print(json.dumps(row))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
