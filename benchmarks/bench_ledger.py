"""Throughput of the audit ledger (RFC 9162 Merkle log) and of its proof verification.

Measures, in one run on this machine:

- appends per second to an in-memory log, and to the SQLite log (WAL, synchronous=FULL)
  one leaf per transaction (every append durable on return) and in batches;
- inclusion-proof generation + verification time at the final size;
- consistency-proof generation + verification time between random sizes;
- one audited query end to end (derived noise on every score, top-K, record, receipt).

Usage::

    python benchmarks/bench_ledger.py [--n 20000] [--json out.json]

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from ragprivacy.audit import MerkleLog, demo_window, verify_consistency, verify_inclusion


def _leaves(n: int) -> list[bytes]:
    return [os.urandom(200) for _ in range(n)]  # a query record is ~200-300 bytes


def bench(n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    leaves = _leaves(n)
    log = MerkleLog()
    t = time.perf_counter()
    for d in leaves:
        log.append(d)
    out["memory_appends_per_s"] = n / (time.perf_counter() - t)
    with tempfile.TemporaryDirectory() as tmp:
        m = min(n, 2000)
        durable = MerkleLog(Path(tmp) / "one.sqlite")
        t = time.perf_counter()
        for d in leaves[:m]:
            durable.append(d)
        out["sqlite_appends_per_s_one_per_commit"] = m / (time.perf_counter() - t)
        durable.close()
        batched = MerkleLog(Path(tmp) / "batch.sqlite")
        t = time.perf_counter()
        for i in range(0, n, 1000):
            batched.append_many(leaves[i : i + 1000])
        out["sqlite_appends_per_s_batch_1000"] = n / (time.perf_counter() - t)
        batched.close()
    rng = np.random.default_rng(0)
    root = log.root()
    inc_gen, inc_ver, con_gen, con_ver = [], [], [], []
    for _ in range(300):
        i = int(rng.integers(0, n))
        t = time.perf_counter()
        proof = log.inclusion_proof(i, n)
        inc_gen.append(time.perf_counter() - t)
        t = time.perf_counter()
        ok = verify_inclusion(leaves[i], i, n, proof, root)
        inc_ver.append(time.perf_counter() - t)
        if not ok:
            raise SystemExit("inclusion proof failed")
        old = int(rng.integers(1, n))
        t = time.perf_counter()
        cproof = log.consistency_proof(old, n)
        con_gen.append(time.perf_counter() - t)
        old_root = log.root(old)
        t = time.perf_counter()
        ok = verify_consistency(old, n, old_root, root, cproof)
        con_ver.append(time.perf_counter() - t)
        if not ok:
            raise SystemExit("consistency proof failed")
    out["inclusion_proof_us"] = 1e6 * statistics.median(inc_gen)
    out["inclusion_verify_us"] = 1e6 * statistics.median(inc_ver)
    out["consistency_proof_us"] = 1e6 * statistics.median(con_gen)
    out["consistency_verify_us"] = 1e6 * statistics.median(con_ver)
    t = time.perf_counter()
    w = demo_window(docs=1000, queries_per_account=5)
    out["audited_queries_per_s_1000_docs"] = len(w.transcript.records) / (time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()
    res = bench(args.n)
    for k, v in res.items():
        print(f"{k:40s} {v:12.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
