"""The fast-paths table in one run: every row measured by its own benchmark script, each
as a ratio to its named baseline, beside its goal.

Runs, one after the other, each as a subprocess with ``--json`` (so that one script's
memory peak, BLAS threads and imports do not touch the next), then reads the rows of
their results files (``_harness.load_results``: each row names its baseline, its ratio,
its goal and whether this run met it; the scripts set the goals):

- ``bench_retrieval.py`` — every row: exact noisy top-K float and secure against a FAISS
  flat search at 10⁶ (with the secure sampler's share of the query), noise first, the
  lazy fallback against the full-noise path (one forced fallback, and the lazy retriever
  whose memory of fallbacks skips the candidate search), and any row added later;
- ``bench_dp_vote.py`` — DP voting per token against plain RAG (the batched vote), on the
  ``hf:`` reader (a GPT-2-small-sized random model; ``--quick``: a tiny one) and the
  reference reader;
- ``bench_coalition.py`` — the coalition estimator's ``ivf`` search against the exact
  search: at 10⁴, and at 10⁵ × 384 its time, peak traced memory, ĉ and pair recall at θ*;
- ``bench_ledger.py`` — group commit at the most writers against one writer with one
  commit per append (``group_commit=False``), for the ledger and the budget store, with
  the efficiency appends/s ÷ (writers × the disk's sync rate).

Each script runs at its own defaults (``--quick``: each one's smoke settings, seconds to
a minute in all; ``--repeats N`` is passed on to each). Prints one Markdown table: row,
measured, named baseline, ratio, goal, met?

Usage::

    python benchmarks/bench_fastpaths.py [--quick] [--only retrieval dp_vote coalition
        ledger] [--plan] [--out-dir DIR] [--from DIR] [--repeats N] [--json PATH]

``--plan`` prints the commands and runs nothing; ``--from DIR`` makes the table from the
results files a run with ``--out-dir DIR`` kept, running nothing. Run the full table on
an idle machine (it takes tens of minutes); timings vary ±30 % on shared machines, so
compare the ratios.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, bench_parser, load_results, once, start

HERE = Path(__file__).resolve().parent


def _every(rows: Sequence[Row]) -> list[Row]:
    return list(rows)


def _batched_vote(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.config.get("path") == "batched"]


def _ivf(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.config.get("search") == "ivf"]


def _most_writers(rows: Sequence[Row]) -> list[Row]:
    """Group commit at the most writers of each store."""
    grouped = [r for r in rows if r.config.get("mode") == "after"]
    most: dict[str, int] = {}
    for r in grouped:
        most[r.config["store"]] = max(most.get(r.config["store"], 0), r.config["writers"])
    return [r for r in grouped if r.config["writers"] == most[r.config["store"]]]


class Script(NamedTuple):
    """A benchmark script and which of its rows the table shows."""

    file: str
    select: Callable[[Sequence[Row]], list[Row]]


SCRIPTS: dict[str, Script] = {
    "retrieval": Script("bench_retrieval.py", _every),
    "dp_vote": Script("bench_dp_vote.py", _batched_vote),
    "coalition": Script("bench_coalition.py", _ivf),
    "ledger": Script("bench_ledger.py", _most_writers),
}


def command(name: str, quick: bool, json_path: Path, repeats: int | None = None) -> list[str]:
    cmd = [sys.executable, str(HERE / SCRIPTS[name].file), "--json", str(json_path)]
    if quick:
        cmd.append("--quick")
    if repeats is not None:
        cmd += ["--repeats", str(repeats)]
    return cmd


def table_rows(name: str, path: Path) -> list[Row]:
    """The rows of ``name``'s results file that the table shows."""
    return SCRIPTS[name].select(load_results(path).rows)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = bench_parser(
        __doc__,
        repeats=None,
        repeats_help="passed on to every script (by default each runs its own)",
    )
    p.add_argument("--only", nargs="+", choices=list(SCRIPTS), default=list(SCRIPTS))
    p.add_argument("--plan", action="store_true", help="print the commands, run nothing")
    p.add_argument("--out-dir", default=None, help="keep each script's JSON and log here")
    p.add_argument(
        "--from",
        dest="from_dir",
        default=None,
        help="run nothing: make the table from the JSON an earlier --out-dir run kept",
    )
    run = start("fastpaths", p, argv)
    a = run.args
    if a.from_dir:
        saved = Path(a.from_dir)
        rows: list[Row] = []
        for name in a.only:
            path = saved / f"{name}.json"
            if not path.exists():
                raise SystemExit(f"{path} does not exist: run with --out-dir {saved} first.")
            rows.extend(table_rows(name, path))
        return run.finish(rows, {"from": str(saved)})
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(a.out_dir or tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        plan = {n: command(n, a.quick, out_dir / f"{n}.json", a.repeats) for n in a.only}
        if a.plan:
            for cmd in plan.values():
                print(" ".join(cmd))
            return {"plan": plan}
        runs: dict[str, Any] = {}
        rows = []
        for name, cmd in plan.items():
            log = out_dir / f"{name}.log"
            print(f"running {' '.join(cmd[1:])}", flush=True)
            with log.open("w") as f:
                done = once(
                    partial(subprocess.run, cmd, stdout=f, stderr=subprocess.STDOUT, check=False)
                )
            rc = done.value.returncode
            runs[name] = {"command": cmd, "returncode": rc, "seconds": done.seconds}
            print(f"  {name}: exit {rc} after {done.seconds:.0f} s", flush=True)
            if rc != 0:
                print(log.read_text()[-2000:], file=sys.stderr)
                continue
            path = out_dir / f"{name}.json"
            runs[name]["result"] = json.loads(path.read_text())
            rows.extend(table_rows(name, path))
    print()
    if a.quick:
        print("--quick: smoke sizes, below those the goals are stated for; 'met?' is only")
        print("the arithmetic of the comparison here.")
    result = run.finish(rows, {"quick": a.quick, "runs": runs})
    failed = [f"{name} (exit {r['returncode']})" for name, r in runs.items() if r["returncode"]]
    if failed:
        print(f"failed, so without rows: {', '.join(failed)}", file=sys.stderr)
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
