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
        [--ef-search 40] [--threads 2] [--url URL] [--repeats 1] [--json PATH]

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _harness import Row, bench_parser, once, start, time_interleaved
from bench_retrieval import _clustered

from ragprivacy.dp import GaussianNoisyTopK
from ragprivacy.index import PgvectorIndex
from ragprivacy.retrieval import lazy_index_topk

RANGE = (-1.0, 1.0)


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
        load_s = once(lambda: index.add(data, [str(i) for i in range(a.n)])).seconds
        print(f"COPY of {a.n} x {a.dim}: {load_s:.1f} s", flush=True)
        build_s = once(index.build).seconds
        print(f"HNSW build (m={a.m}, ef_construction={a.ef_construction}): {build_s:.1f} s")
        recall = []
        for q in qs[:10]:
            truth = set(np.argsort(-(data @ q))[: a.k].tolist())
            got = set(index.search(q, a.k).indices[0].tolist())
            recall.append(len(truth & got) / a.k)
        full_mech = {s: GaussianNoisyTopK(sigma=s, k=a.k, simulation=True) for s in a.sigmas}
        gen = np.random.default_rng(1)
        stats: dict[float, list[tuple[bool, int, int]]] = {s: [] for s in a.sigmas}
        index.search(qs[0], a.k)  # warm-up (plans, caches)
        lazy_index_topk(index, qs[0], a.k, 1.0, candidates=a.candidates, rng=gen)

        def lazy(s: float) -> Callable[[int], None]:
            return lambda r: lazy_one(qs[1 + r % a.queries], s)

        def full(s: float) -> Callable[[int], object]:
            return lambda r: full_mech[s].select(
                np.clip(index.scores(qs[1 + r % a.queries])[0], *RANGE), rng=gen
            )

        def lazy_one(q: np.ndarray, s: float) -> None:
            sel = lazy_index_topk(
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
            stats[s].append((sel.fell_back, sel.revealed, sel.rounds))

        # Interleaved: every method on every query, in turn (``repeats`` passes over them).
        fns: dict[str, Callable[[int], object]] = {
            "plain": lambda r: index.search(qs[1 + r % a.queries], a.k)
        }
        for s in a.sigmas:
            fns[f"lazy {s}"] = lazy(s)
            fns[f"full {s}"] = full(s)
        timed = time_interleaved(fns, repeats=a.queries * a.repeats, warmup=0)
        plain = timed["plain"].median
        rows = []
        for s in a.sigmas:
            lazy_s, full_s = timed[f"lazy {s}"].median, timed[f"full {s}"].median
            row = {
                "sigma": s,
                "plain_hnsw_ms": plain * 1e3,
                "lazy_ms": lazy_s * 1e3,
                "full_scan_ms": full_s * 1e3,
                "ratio_lazy": lazy_s / plain,
                "ratio_full": full_s / plain,
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
            "repeats": a.repeats,
            "candidates": a.candidates,
            "m": a.m,
            "ef_construction": a.ef_construction,
            "ef_search": a.ef_search,
            "threads": a.threads,
            "copy_load_s": load_s,
            "hnsw_build_s": build_s,
            "recall_at_k": float(np.mean(recall)),
            "sigmas": rows,
        }
    finally:
        index.drop()


def rows(res: dict[str, Any]) -> list[Row]:
    """Per σ, the lazy path and the full scan against a plain pgvector HNSW search."""
    out = []
    size = f"n = {res['n']:,}, dim {res['dim']}"
    for r in res["sigmas"]:
        config = {k: res[k] for k in ("n", "dim", "k", "queries", "candidates", "m")}
        for what, key in (
            ("lazy noise-then-select over pgvector HNSW", "lazy_ms"),
            ("full noise over one sequential scan", "full_scan_ms"),
        ):
            out.append(
                Row(
                    name=f"{what}, {size}, σ = {r['sigma']:g}",
                    config={**config, "sigma": r["sigma"]},
                    measured=r[key],
                    unit="ms",
                    baseline="plain pgvector HNSW search",
                    baseline_measured=r["plain_hnsw_ms"],
                    notes=f"fallback rate {r['fallback_rate']:.2f}" if key == "lazy_ms" else "",
                )
            )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = bench_parser(__doc__, repeats=1, repeats_help="timed passes over the queries")
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
    bench = start("pgvector", p, argv)
    a = bench.args
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
    return bench.finish(rows(result), result)


if __name__ == "__main__":
    main()
