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
        [--durable-n 2000] [--rounds 3] [--skip-single] [--stores ledger budget]
        [--quick] [--json PATH]

``--rounds`` is also spelled ``--repeats``. ``--quick``: 500 appends, 1 and 8 writers,
200 durable appends, one round.

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, bench_parser, once, start

from ragprivacy.audit import MerkleLog, verify_consistency, verify_inclusion
from ragprivacy.audit.demo import demo_window
from ragprivacy.dp import SqliteBudgetStore


def _leaves(n: int) -> list[bytes]:
    return [os.urandom(200) for _ in range(n)]  # a query record is ~200-300 bytes


def bench(n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    leaves = _leaves(n)
    log = MerkleLog()
    out["memory_appends_per_s"] = n / once(lambda: [log.append(d) for d in leaves]).seconds
    with tempfile.TemporaryDirectory() as tmp:
        m = min(n, 2000)
        durable = MerkleLog(Path(tmp) / "one.sqlite")
        one = once(lambda: [durable.append(d) for d in leaves[:m]])
        out["sqlite_appends_per_s_one_per_commit"] = m / one.seconds
        durable.close()
        batched = MerkleLog(Path(tmp) / "batch.sqlite")
        many = once(lambda: [batched.append_many(leaves[i : i + 1000]) for i in range(0, n, 1000)])
        out["sqlite_appends_per_s_batch_1000"] = n / many.seconds
        batched.close()
    rng = np.random.default_rng(0)
    root = log.root()
    inc_gen, inc_ver, con_gen, con_ver = [], [], [], []
    for _ in range(300):
        i = int(rng.integers(0, n))
        proof = once(partial(log.inclusion_proof, i, n))
        inc_gen.append(proof.seconds)
        ok = once(partial(verify_inclusion, leaves[i], i, n, proof.value, root))
        inc_ver.append(ok.seconds)
        if not ok.value:
            raise SystemExit("inclusion proof failed")
        old = int(rng.integers(1, n))
        cproof = once(partial(log.consistency_proof, old, n))
        con_gen.append(cproof.seconds)
        old_root = log.root(old)
        ok = once(partial(verify_consistency, old, n, old_root, root, cproof.value))
        con_ver.append(ok.seconds)
        if not ok.value:
            raise SystemExit("consistency proof failed")
    out["inclusion_proof_us"] = 1e6 * statistics.median(inc_gen)
    out["inclusion_verify_us"] = 1e6 * statistics.median(inc_ver)
    out["consistency_proof_us"] = 1e6 * statistics.median(con_gen)
    out["consistency_verify_us"] = 1e6 * statistics.median(con_ver)
    w = once(lambda: demo_window(docs=1000, queries_per_account=5))
    out["audited_queries_per_s_1000_docs"] = len(w.value.transcript.records) / w.seconds
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

        def syncs() -> None:
            for _ in range(n):
                os.pwrite(fd, block, 0)
                sync(fd)

        return n / once(syncs).seconds
    finally:
        os.close(fd)
        path.unlink()


def _threads(writers: int, per: int, op: Callable[[int, int], object]) -> float:
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

    def join() -> None:
        for th in threads:
            th.join()

    elapsed = once(join).seconds
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


GROUP_COMMIT_GOAL = 10.0  # 64 writers ≥ 10× the single-writer durable rate


def group_commit_rows(conc: dict[str, Any]) -> list[Row]:
    """Per writer count of one store's concurrent runs, durable appends/s against the
    single-writer rate before group commit: after (group commit; with the goal at 64
    writers or more) and, beside it, before (one commit per append)."""
    single = conc["single_writer_appends_per_s"]
    if not single:
        return []
    what = {"ledger": "appends", "budget": "charges"}[conc["store"]]
    out = []
    for r in conc["rows"]:
        if r["mode"] == "before" and r["writers"] == 1:
            continue  # the baseline itself
        grouped = r["mode"] == "after"
        goal = grouped and r["writers"] >= 64
        ratio = r["appends_per_s"] / single
        label = "group commit" if grouped else "one commit per append"
        writers = f"{r['writers']} writer{'s' * (r['writers'] > 1)}"
        out.append(
            Row(
                name=f"{label}, {conc['store']} store, {writers}",
                config={
                    "store": conc["store"],
                    "writers": r["writers"],
                    "mode": r["mode"],
                    "rounds": conc["rounds"],
                },
                measured=r["appends_per_s"],
                unit=f"{what}/s",
                baseline="one writer, one commit per append",
                baseline_measured=single,
                goal=f"≥ {GROUP_COMMIT_GOAL:g}× at 64 writers" if goal else None,
                met=ratio >= GROUP_COMMIT_GOAL if goal else None,
                notes=f"efficiency {r['efficiency']:.2f}, {r['appends_per_commit']:.1f} per "
                f"commit, disk {conc['fsync_per_s']:,.0f} syncs/s",
            )
        )
    return out


def rows(res: dict[str, Any]) -> list[Row]:
    """The SQLite log's appends against the in-memory log's, and group commit."""
    out = []
    if "memory_appends_per_s" in res:
        for key, what in (
            ("sqlite_appends_per_s_one_per_commit", "SQLite log, one append per transaction"),
            ("sqlite_appends_per_s_batch_1000", "SQLite log, batches of 1,000"),
        ):
            out.append(
                Row(
                    name=what,
                    config={"n": res["n"]},
                    measured=res[key],
                    unit="appends/s",
                    baseline="in-memory log",
                    baseline_measured=res["memory_appends_per_s"],
                )
            )
    for key, conc in res.items():
        if key.startswith("concurrent_"):
            out.extend(group_commit_rows(conc))
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    ap = bench_parser(
        __doc__,
        repeats=3,
        quick_repeats=1,
        repeats_help="rounds of the concurrent runs",
        repeats_aliases=("--rounds",),
    )
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--durable-n", type=int, default=2000, help="appends per concurrent run")
    ap.add_argument("--skip-single", action="store_true", help="only the concurrent runs")
    ap.add_argument(
        "--stores",
        nargs="+",
        choices=sorted(_STORES),
        default=["ledger", "budget"],
        help="the durable stores of the concurrent runs",
    )
    run = start("ledger", ap, argv)
    args = run.args
    if args.quick:
        args.n, args.writers, args.durable_n = 500, [1, 8], 200
    res: dict[str, Any] = {} if args.skip_single else bench(args.n)
    for k, v in res.items():
        print(f"{k:40s} {v:12.1f}")
    if not args.skip_single:
        res["n"] = args.n
    for store in args.stores:
        conc = bench_concurrent(sorted(set(args.writers)), args.durable_n, args.repeats, store)
        res[f"concurrent_{store}"] = conc
        _print_concurrent(conc)
    return run.finish(rows(res), res)


if __name__ == "__main__":
    main()
