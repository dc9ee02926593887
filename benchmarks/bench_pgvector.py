"""Private retrieval over a pgvector HNSW index against plain pgvector search (ratios).

One tenant's index is a PostgreSQL table with a pgvector HNSW index (``PgvectorIndex``).
Per query, interleaved in one run:

* plain: ``index.search(q, k)`` — ``ORDER BY embedding <#> q LIMIT k`` over the HNSW graph
  (the baseline);
* lazy: the exact lazy noise-then-select (``lazy_index_topk``: the HNSW top-C candidates,
  the certified bound u = 1 for cosine scores of unit vectors clipped to (−1, 1), the
  other documents scored in the database, the full-scan fallback), for each σ;
* full: full noise-then-select over the exact score vector from one sequential scan in the
  database (``index.scores``, what the fallback reads) — the other reference.

Reports the medians, the ratios lazy/plain and full/plain, the fallback rate, how many
non-candidates were noised, and the build: ``COPY`` load and ``CREATE INDEX ... USING
hnsw`` times, and recall@k of the plain search against the exact top-k. Data: clustered
unit vectors (topics of 50 documents, queries paraphrase a document), as
``bench_retrieval.py``.

The server: ``--url`` (an existing database with pgvector), or a fresh one started from the
``pgserver`` wheel's binaries (``tests/_postgres.py``) in a temporary folder.

Usage::

    python benchmarks/bench_pgvector.py [--quick] [--n 100000] [--dim 384] [--queries 30]
        [--sigmas 0.1 0.3 1 3 10 100] [--candidates 64] [--m 16] [--ef-construction 64]
        [--ef-search 40] [--threads 2] [--url URL] [--json OUT]

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_retrieval import _clustered

from ragprivacy.dp import GaussianNoisyTopK
from ragprivacy.index import PgvectorIndex
from ragprivacy.retrieval import lazy_index_topk

RANGE = (-1.0, 1.0)


def _timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def run(a: argparse.Namespace, url: str) -> dict:
    rng = np.random.default_rng(0)
    data, qs = _clustered(rng, a.n, a.dim, a.queries + 1)
    index = PgvectorIndex(
        url,
        dim=a.dim,
        m=a.m,
        ef_construction=a.ef_construction,
        ef_search=a.ef_search,
        num_threads=a.threads,
        maintenance_work_mem=a.maintenance_work_mem,
    )
    try:
        load_s, _ = _timed(lambda: index.add(data, [str(i) for i in range(a.n)]))
        print(f"COPY of {a.n} x {a.dim}: {load_s:.1f} s", flush=True)
        build_s, _ = _timed(index.build)
        print(f"HNSW build (m={a.m}, ef_construction={a.ef_construction}): {build_s:.1f} s")
        recall = []
        for q in qs[:10]:
            truth = set(np.argsort(-(data @ q))[: a.k].tolist())
            got = set(index.search(q, a.k).indices[0].tolist())
            recall.append(len(truth & got) / a.k)
        full_mech = {s: GaussianNoisyTopK(sigma=s, k=a.k, simulation=True) for s in a.sigmas}
        gen = np.random.default_rng(1)
        plain_t: list[float] = []
        lazy_t: dict[float, list[float]] = {s: [] for s in a.sigmas}
        full_t: dict[float, list[float]] = {s: [] for s in a.sigmas}
        stats: dict[float, list[tuple[bool, int, int]]] = {s: [] for s in a.sigmas}
        index.search(qs[0], a.k)  # warm-up (plans, caches)
        lazy_index_topk(index, qs[0], a.k, 1.0, candidates=a.candidates, rng=gen)
        for q in qs[1:]:  # interleaved: every method on every query, in turn
            plain_t.append(_timed(lambda q=q: index.search(q, a.k))[0])
            for s in a.sigmas:
                dt, sel = _timed(
                    lambda q=q, s=s: lazy_index_topk(
                        index,
                        q,
                        a.k,
                        s,
                        candidates=a.candidates,
                        bound=1.0,
                        score_range=RANGE,
                        sensitivity=2.0,
                        rng=gen,
                    )
                )
                lazy_t[s].append(dt)
                stats[s].append((sel.fell_back, sel.revealed, sel.rounds))  # type: ignore[attr-defined]
                full_t[s].append(
                    _timed(
                        lambda q=q, s=s: full_mech[s].select(
                            np.clip(index.scores(q)[0], *RANGE), rng=gen
                        )
                    )[0]
                )
        plain = statistics.median(plain_t)
        rows = []
        for s in a.sigmas:
            lazy, full = statistics.median(lazy_t[s]), statistics.median(full_t[s])
            row = {
                "sigma": s,
                "plain_hnsw_ms": plain * 1e3,
                "lazy_ms": lazy * 1e3,
                "full_scan_ms": full * 1e3,
                "ratio_lazy": lazy / plain,
                "ratio_full": full / plain,
                "fallback_rate": float(np.mean([x[0] for x in stats[s]])),
                "mean_revealed": float(np.mean([x[1] for x in stats[s]])),
                "mean_rounds": float(np.mean([x[2] for x in stats[s]])),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        return {
            "n": a.n,
            "dim": a.dim,
            "k": a.k,
            "queries": a.queries,
            "candidates": a.candidates,
            "m": a.m,
            "ef_construction": a.ef_construction,
            "ef_search": a.ef_search,
            "threads": a.threads,
            "copy_load_s": load_s,
            "hnsw_build_s": build_s,
            "recall_at_k": float(np.mean(recall)),
            "rows": rows,
        }
    finally:
        index.drop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="a smoke test: 5,000 x 64, 8 queries")
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--queries", type=int, default=30)
    p.add_argument("--sigmas", type=float, nargs="+", default=[0.1, 0.3, 1.0, 3.0, 10.0, 100.0])
    p.add_argument("--candidates", type=int, default=64)
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--ef-construction", type=int, default=64)
    p.add_argument("--ef-search", type=int, default=40)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--maintenance-work-mem", default="1GB")
    p.add_argument("--url", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    if a.quick:
        a.n, a.dim, a.queries, a.sigmas = 5_000, 64, 8, [0.3, 1.0, 10.0]
    stop: Callable[[], None] | None = None
    url = a.url
    if url is None:
        from tests._postgres import start_postgres

        url, stop = start_postgres(tempfile.mkdtemp(prefix="bench-pgvector-"))
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    try:
        result = run(a, url)
    finally:
        if stop is not None:
            stop()
    print(
        f"n={result['n']} dim={result['dim']}: COPY {result['copy_load_s']:.1f} s, HNSW build "
        f"{result['hnsw_build_s']:.1f} s, recall@{a.k} {result['recall_at_k']:.2f}"
    )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
