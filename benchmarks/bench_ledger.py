"""Throughput of the audit ledger (RFC 9162 Merkle log) and of its proof verification.

Measures, in one run on this machine:

- appends per second to an in-memory log, and to the SQLite log (WAL, synchronous=FULL)
  one leaf per transaction (every append durable on return) and in batches;
- durable appends per second with 1, 8 and 64 concurrent writer threads on one log, each
  append durable when it returns: before (``group_commit=False``, one transaction and so
  one sync per append, the baseline) and after (group commit: the writers that queue while
  a commit syncs share the next one), beside the disk's raw fsync rate measured in the same
  run on the same file system; with the efficiency appends/s ÷ (writers × fsync rate) and
  the ratio to the single-writer durable rate (before). The disk's rate is that of
  ``fdatasync`` (what SQLite calls for a commit on Linux), also given for ``fsync``;
- inclusion-proof generation + verification time at the final size;
- consistency-proof generation + verification time between random sizes;
- one audited query end to end (derived noise on every score, top-K, record, receipt).

Usage::

    python benchmarks/bench_ledger.py [--n 20000] [--writers 1 8 64]
        [--durable-n 2000] [--json out.json]

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ragprivacy.audit import MerkleLog, demo_window, verify_consistency, verify_inclusion
from ragprivacy.dp import SqliteBudgetStore


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


def fsync_rate(
    directory: Path, n: int = 300, *, sync: Callable[[int], None] = os.fdatasync
) -> float:
    """The disk's raw sync rate: rewrite 256 bytes of one file and sync it, n times
    (``fdatasync`` by default, the call SQLite makes on Linux for a commit)."""
    path = directory / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = os.urandom(256)
        os.write(fd, block)
        os.fsync(fd)
        t = time.perf_counter()
        for _ in range(n):
            os.pwrite(fd, block, 0)
            sync(fd)
        return n / (time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()


def _threads(writers: int, per: int, op: Callable[[int, int], None]) -> float:
    """``writers`` threads each call ``op(writer, i)`` for i < per, started together;
    returns the wall time."""
    start = threading.Barrier(writers + 1)
    errors: list[BaseException] = []

    def work(w: int) -> None:
        start.wait()
        try:
            for i in range(per):
                op(w, i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for th in threads:
        th.start()
    start.wait()
    t = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t
    if errors:
        raise SystemExit(f"a durable write failed: {errors[0]!r}")
    return elapsed


def concurrent_appends(path: Path, writers: int, total: int, *, group_commit: bool) -> dict:
    """``writers`` threads append ``total`` leaves to one durable log between them (each
    append durable on return); appends/s over the wall time, and appends per commit."""
    log = MerkleLog(path, group_commit=group_commit)
    per = max(1, total // writers)
    leaves = [[os.urandom(200) for _ in range(per)] for _ in range(writers)]
    elapsed = _threads(writers, per, lambda w, i: log.append(leaves[w][i]))
    done = writers * per
    if log.size != done:
        raise SystemExit(f"the log holds {log.size} leaves, not {done}")
    log.verify_storage()
    commits = log._group.commits if log._group is not None else done
    log.close()
    return {"appends_per_s": done / elapsed, "appends_per_commit": done / commits}


def concurrent_charges(path: Path, writers: int, total: int, *, group_commit: bool) -> dict:
    """``writers`` threads make ``total`` durable charges between them on one per-document
    budget store (each charge: 3 of 1,000 documents, 2 Rényi orders, never refused);
    charges/s over the wall time (as ``appends_per_s``), and charges per commit."""
    store = SqliteBudgetStore(path, capacity=[1e9, 1e9], group_commit=group_commit)
    per = max(1, total // writers)
    rng = np.random.default_rng(0)
    docs = [[[f"doc{d}" for d in rng.choice(1000, 3, replace=False)] for _ in range(per)]
            for _ in range(writers)]  # fmt: skip
    elapsed = _threads(writers, per, lambda w, i: store.charge(docs[w][i], [0.01, 0.02]))
    done = writers * per
    if len(store.charges()) != done:
        raise SystemExit(f"the store holds {len(store.charges())} charges, not {done}")
    commits = store._group.commits if store._group is not None else done
    store.close()
    return {"appends_per_s": done / elapsed, "appends_per_commit": done / commits}


_STORES = {"ledger": concurrent_appends, "budget": concurrent_charges}


def bench_concurrent(
    writers: list[int], total: int, rounds: int = 3, store: str = "ledger"
) -> dict:
    """Durable appends/s per writer count, before and after group commit, beside the
    disk's sync rate. The disk of a shared machine changes speed from minute to minute,
    so each round measures the sync rate and then, for each writer count, before and after
    back to back; each run's efficiency uses its round's sync rate, and the figures are
    medians over the rounds."""
    runs: dict[tuple[int, str], list[dict]] = {}
    syncs, fulls = [], []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        for r in range(rounds):
            sync = fsync_rate(root, 200)
            syncs.append(sync)
            fulls.append(fsync_rate(root, 100, sync=os.fsync))
            for w in writers:
                n = total if w > 1 else total // 2  # a lone writer: one sync each
                for mode, grouped in (("before", False), ("after", True)):
                    res = _STORES[store](
                        root / f"{store}-{mode}-{w}-{r}.sqlite", w, n, group_commit=grouped
                    )
                    res["sync_per_s"] = sync
                    runs.setdefault((w, mode), []).append(res)
    med = statistics.median
    single = med(x["appends_per_s"] for x in runs.get((1, "before"), [{"appends_per_s": 0}]))
    out: dict = {
        "store": store,
        "writers": writers,
        "rounds": rounds,
        "fsync_per_s": med(syncs),
        "fsync_per_s_samples": syncs,
        "fsync_full_per_s": med(fulls),
        "single_writer_appends_per_s": single,
        "rows": [],
    }
    for w in writers:
        for mode in ("before", "after"):
            rs = runs[w, mode]
            out["rows"].append(
                {
                    "writers": w,
                    "mode": mode,
                    "appends_per_s": med(x["appends_per_s"] for x in rs),
                    "appends_per_commit": med(x["appends_per_commit"] for x in rs),
                    "efficiency": med(x["appends_per_s"] / (w * x["sync_per_s"]) for x in rs),
                    "vs_single_writer": med(x["appends_per_s"] for x in rs) / single
                    if single
                    else float("nan"),
                    "samples": [x["appends_per_s"] for x in rs],
                }
            )
    return out


def _print_concurrent(conc: dict) -> None:
    what = {"ledger": "appends", "budget": "charges"}[conc["store"]]
    print(
        f"\n{conc['store']}: disk sync rate {conc['fsync_per_s']:.0f}/s with fdatasync (per "
        f"round {', '.join(f'{x:.0f}' for x in conc['fsync_per_s_samples'])}), "
        f"{conc['fsync_full_per_s']:.0f}/s with fsync; single-writer durable rate "
        f"{conc['single_writer_appends_per_s']:.0f} {what}/s"
    )
    print(f"medians of {conc['rounds']} rounds")
    print(f"{'writers':>7} {'mode':>6} {what + '/s':>10} {'per commit':>10} "
          f"{'efficiency':>10} {'x single':>9}  samples")  # fmt: skip
    for r in conc["rows"]:
        print(
            f"{r['writers']:>7} {r['mode']:>6} {r['appends_per_s']:>10.0f} "
            f"{r['appends_per_commit']:>10.1f} {r['efficiency']:>10.3f} "
            f"{r['vs_single_writer']:>8.1f}x  {', '.join(f'{x:.0f}' for x in r['samples'])}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--durable-n", type=int, default=2000, help="appends per concurrent run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the concurrent runs")
    ap.add_argument("--skip-single", action="store_true", help="only the concurrent runs")
    ap.add_argument(
        "--stores",
        nargs="+",
        choices=sorted(_STORES),
        default=["ledger", "budget"],
        help="the durable stores of the concurrent runs",
    )
    ap.add_argument("--json", type=str, default=None)
    args = ap.parse_args()
    res: dict = {} if args.skip_single else bench(args.n)
    for k, v in res.items():
        print(f"{k:40s} {v:12.1f}")
    for store in args.stores:
        conc = bench_concurrent(sorted(set(args.writers)), args.durable_n, args.rounds, store)
        res[f"concurrent_{store}"] = conc
        _print_concurrent(conc)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
