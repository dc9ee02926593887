"""The service's throughput with its state on PostgreSQL: one replica against two.

``POST /v1/retrieve`` of ``ragprivacy serve`` (uvicorn, one worker per replica, on
127.0.0.1) over one tenant of ``--docs`` documents (``hashing:384``, K = 5), driven by
``--concurrency`` httpx clients (asyncio, one account and key per client) spread over the
replicas in turn — what a load balancer in front of them does. Three set-ups, measured
in alternating blocks (so a change of machine load hits each), medians over ``--rounds``:

* ``sqlite-1``: the state directory (SQLite), one replica — the baseline;
* ``pg-1``: the state in PostgreSQL, one replica;
* ``pg-2``: the same database, two replicas (the window's ledger appends are ordered by
  its head row's lock, so they take turns; embedding, scoring and noise run in parallel);
* ``pg-1-inline``: the first replica again, for a second tenant of the same documents
  created with ``--inline-vectors`` (its embeddings in the documents' rows, held in the
  replica's memory as before pgvector tables). The other PostgreSQL set-ups query the
  tenant whose embeddings are in its pgvector table, streamed for every query.

Reported: requests/s and p50 latency of each, the ratios pg-2 / pg-1, pg-1 / sqlite-1
and pg-1 / pg-1-inline (what streaming a tenant's rows from its pgvector table costs
against holding them), and the bytes a replica holds for the tenant's embeddings either
way (inline: the int32 fixed-point rows and their float64 scoring copy; pgvector: the
Merkle tree of their hashes, about 2 × 32 bytes a document). The PostgreSQL server is
pgserver's (the tests' fixture, started here), on a Unix socket on the same machine;
``--postgres URL`` uses another server instead.

Usage::

    python benchmarks/bench_service_pg.py [--docs 20000] [--queries 400] [--rounds 3]
        [--concurrency 8] [--postgres URL] [--out DIR] [--json PATH] [--quick]

``--out DIR`` writes ``results.json`` (the same results file as ``--json``); ``--rounds``
is also spelled ``--repeats``.

``--quick`` is a smoke run (small, seconds of load). On a 2-core machine two replicas
share the same two cores as the clients and the database: the ratio there measures
contention, not the scaling of separate machines. Timings vary ±30 % on shared machines:
compare ratios within one run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from _harness import Row, bench_parser, once, start, write_results  # noqa: E402
from bench_service import (  # noqa: E402  (the service benchmark's data and servers)
    EMBEDDER,
    TENANT,
    K,
    Server,
    _drive,
    _free_port,
    make_documents,
    make_queries,
)

INLINE = f"{TENANT}-inline"


def build(
    location: str, identity_key: Path | None, docs: int, clients: int, *, inline: bool = False
) -> dict[str, str]:
    """One tenant of ``docs`` documents, ``clients`` accounts with a key each (rate
    limits high enough for the run), an open window. ``inline``: a second tenant of the
    same documents with its embeddings in the rows (accounts ``n<i>``). Returns account →
    key token."""
    from ragprivacy.service import ServiceState, open_window

    state = ServiceState(location, embedder=EMBEDDER, identity_key=identity_key)
    tenants = {TENANT: "c"}
    state.create_tenant(TENANT, k=K)
    if inline:
        state.create_tenant(INLINE, k=K, vector_table=False)
        tenants[INLINE] = "n"
    keys = {}
    for tenant, prefix in tenants.items():
        state.add_documents(tenant, make_documents(docs), batch=1024)
        for i in range(clients):
            name = f"{prefix}{i}"
            state.create_account(tenant, name, epsilon=4.0, delta=1e-6, rate_limit=10**6)
            keys[name] = state.create_key(name).token
    open_window(state)
    state.close()
    return keys


def held_bytes(docs: int, dim: int) -> dict[str, int]:
    """Bytes a replica holds for one tenant's embeddings: inline, the int32 fixed-point
    rows and their float64 scoring matrix; in a pgvector table, the Merkle tree of the
    rows' hashes (its leaves and interior nodes, 32 bytes each)."""
    return {"inline": docs * dim * (4 + 8), "pgvector": (2 * docs - 1) * 32}


def serve(location: str, identity_key: Path | None) -> Server:
    port = _free_port()
    cmd = [sys.executable, "-m", "ragprivacy.cli", "serve", "--state", location]
    if identity_key is not None:
        cmd += ["--identity-key", str(identity_key)]
    return Server([*cmd, "--port", str(port)], port, 1, "/v1/audit/windows")


async def _spread(
    urls: list[str], tokens: list[str], queries: list[str], c: int
) -> tuple[list[float], float]:
    """``c`` clients; client i talks to replica i mod len(urls) (round robin)."""
    groups = [[i for i in range(c) if i % len(urls) == r] for r in range(len(urls))]
    share = [queries[r :: len(urls)] for r in range(len(urls))]
    t = time.perf_counter()
    done = await asyncio.gather(
        *(
            _drive(urls[r], [tokens[i] for i in g], share[r], len(g))
            for r, g in enumerate(groups)
            if g
        )
    )
    wall = time.perf_counter() - t
    return [x for lat, _ in done for x in lat], wall


def rows(res: dict[str, Any]) -> list[Row]:
    """Requests/s: PostgreSQL against SQLite with one replica, two replicas against one,
    and the tenant streamed from its pgvector table against one held in memory."""
    rate = res["req_per_s"]
    config = {k: res[k] for k in ("docs", "queries_per_block", "rounds", "concurrency")}
    return [
        Row(
            name=f"{name}, {res['docs']:,} documents, {res['concurrency']} clients",
            config={**config, "setup": setup},
            measured=rate[setup],
            unit="req/s",
            baseline=baseline,
            baseline_measured=rate[base],
        )
        for name, setup, baseline, base in (
            ("state in PostgreSQL, one replica (pg-1)", "pg-1", "SQLite state, one replica",
             "sqlite-1"),
            ("state in PostgreSQL, two replicas (pg-2)", "pg-2", "pg-1", "pg-1"),
            ("pgvector table streamed per query (pg-1)", "pg-1",
             "embeddings held in the replica (pg-1-inline)", "pg-1-inline"),
        )
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from ragprivacy.embed import create_embedder

    p = bench_parser(
        __doc__,
        repeats=3,
        quick_repeats=2,
        repeats_help="alternating blocks per set-up",
        repeats_aliases=("--rounds",),
    )
    p.add_argument("--docs", type=int, default=20000)
    p.add_argument("--queries", type=int, default=400, help="per set-up and round")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--postgres", default=None, help="a database URL (default: start pgserver)")
    p.add_argument("--out", type=Path, default=None)
    run = start("service_pg", p, argv)
    a = run.args
    if a.quick:
        a.docs, a.queries, a.concurrency = 500, 40, 4
    tmp = Path(tempfile.mkdtemp(prefix="bench-service-pg-"))
    stop = None
    if a.postgres is None:
        from tests._postgres import start_postgres

        url, stop = start_postgres(tmp / "pg")
    else:
        url = a.postgres
    servers: list[Server] = []
    try:
        key_file = tmp / "identity.key"

        def build_both() -> tuple[dict[str, str], dict[str, str]]:
            return (
                build(str(tmp / "state"), None, a.docs, a.concurrency),
                build(url, key_file, a.docs, a.concurrency, inline=True),
            )

        built = once(build_both)
        (keys_sqlite, keys_pg), build_s = built.value, built.seconds
        sqlite1 = serve(str(tmp / "state"), None)
        servers.append(sqlite1)
        pg = [serve(url, key_file), serve(url, key_file)]
        servers += pg
        setups = {
            "sqlite-1": ([sqlite1.url], [keys_sqlite[f"c{i}"] for i in range(a.concurrency)]),
            "pg-1": ([pg[0].url], [keys_pg[f"c{i}"] for i in range(a.concurrency)]),
            "pg-2": ([s.url for s in pg], [keys_pg[f"c{i}"] for i in range(a.concurrency)]),
            "pg-1-inline": ([pg[0].url], [keys_pg[f"n{i}"] for i in range(a.concurrency)]),
        }
        qs = make_queries((a.queries * a.repeats + 2 * a.concurrency) * len(setups), seed=2)
        for urls, tokens in setups.values():  # each replica loads the window first
            asyncio.run(_spread(urls, tokens, qs[: 2 * a.concurrency], a.concurrency))
        rates: dict[str, list[float]] = {n: [] for n in setups}
        p50: dict[str, list[float]] = {n: [] for n in setups}
        pos = 2 * a.concurrency
        for rnd in range(a.repeats):
            for name, (urls, tokens) in setups.items():
                block = qs[pos : pos + a.queries]
                pos += a.queries
                lat, wall = asyncio.run(_spread(urls, tokens, block, a.concurrency))
                rates[name].append(len(lat) / wall)
                p50[name].append(statistics.median(lat) * 1e3)
                print(json.dumps({"round": rnd, "setup": name, "req_per_s": rates[name][-1]}))
        med = {n: statistics.median(v) for n, v in rates.items()}
        res: dict[str, Any] = {
            "docs": a.docs,
            "queries_per_block": a.queries,
            "rounds": a.repeats,
            "concurrency": a.concurrency,
            "build_s": build_s,
            "req_per_s": med,
            "p50_ms": {n: statistics.median(v) for n, v in p50.items()},
            "ratio_pg2_over_pg1": med["pg-2"] / med["pg-1"],
            "ratio_pg1_over_sqlite1": med["pg-1"] / med["sqlite-1"],
            "ratio_pgvector_over_inline": med["pg-1"] / med["pg-1-inline"],
            "held_bytes_per_replica": held_bytes(a.docs, create_embedder(EMBEDDER).dim),
        }
        print(json.dumps(res, indent=2))
    finally:
        for s in servers:
            s.stop()
        if stop is not None:
            stop()
    document = run.finish(rows(res), res)
    if a.out is not None:
        write_results(a.out / "results.json", document)
    return document


if __name__ == "__main__":
    main()
