"""The fast-paths table in one run: every row measured by its own benchmark script, each
as a ratio to its named baseline, beside its goal.

Runs, one after the other, each as a subprocess with ``--json`` (so that one script's
memory peak, BLAS threads and imports do not touch the next), then reads their JSON:

- ``bench_retrieval.py`` — every row its JSON holds (rows with a ``"row"`` name, read
  generically: the first ``ratio…`` field is the ratio, ``"baseline"`` names the
  baseline): exact noisy top-K float and secure against a FAISS flat search at 10⁶, the
  lazy fallback against the full-noise path (one forced fallback, and the lazy retriever
  whose memory of fallbacks skips the candidate search), and any row added later;
- ``bench_dp_vote.py`` — DP voting per token against plain RAG, on the ``hf:`` reader (a
  GPT-2-small-sized random model; ``--quick``: a tiny one) and the reference reader;
- ``bench_coalition.py`` — the coalition estimator's ``ivf`` search at 10⁵ × 384 against
  the exact search (time, peak traced memory, ĉ, pair recall at θ*), and at 10⁴;
- ``bench_ledger.py`` — group commit at the most writers against one commit per append
  (``group_commit=False``), for the ledger and the budget store, with the efficiency
  appends/s ÷ (writers × the disk's sync rate).

Each script runs at its own defaults (``--quick``: each one's smoke settings, seconds to
a minute in all). Goals are those of the fast-paths issue as recorded in
benchmarks/README.md; a row without a recorded goal shows "—". Prints one Markdown table:
row, measured, named baseline, ratio, goal, met?

Usage::

    python benchmarks/bench_fastpaths.py [--quick] [--only retrieval dp_vote coalition
        ledger] [--plan] [--out-dir DIR] [--from DIR] [--json OUT]

``--plan`` prints the commands and runs nothing; ``--from DIR`` makes the table from the
JSON files a run with ``--out-dir DIR`` kept, running nothing. Run the full table on an idle machine
(it takes tens of minutes); timings vary ±30 % on shared machines, so compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent


class Script(NamedTuple):
    """A benchmark script and its arguments for the full run and for ``--quick``."""

    file: str
    full: tuple[str, ...]
    quick: tuple[str, ...]


SCRIPTS: dict[str, Script] = {
    "retrieval": Script("bench_retrieval.py", (), ("--quick",)),
    "dp_vote": Script("bench_dp_vote.py", (), ("--quick",)),
    "coalition": Script("bench_coalition.py", (), ("--quick",)),
    # bench_ledger has no --quick: one round, few appends, 1 and 8 writers
    "ledger": Script(
        "bench_ledger.py",
        (),
        ("--n", "500", "--writers", "1", "8", "--durable-n", "200", "--rounds", "1"),
    ),
}

# Goals of bench_retrieval's rows by the start of their name: (largest ratio, and the
# largest noise share where the issue set one).
RETRIEVAL_GOALS: dict[str, tuple[float, float | None]] = {
    "exact noisy top-K, float": (1.3, None),
    "exact noisy top-K, secure": (1.6, 0.20),
    "lazy noise-then-select, fallback": (1.1, None),
    "lazy retriever, fallback remembered": (1.1, None),
}
DP_VOTE_GOAL = 3.0  # dp_vote per token ≤ 3× plain RAG on the hf: reader
COALITION_SECONDS = 15.0  # ĉ at 10⁵ × 384 in under 15 s ...
COALITION_BYTES = 2 * 2**30  # ... within 2 GiB, the same ĉ, pair recall 1.0 at θ*
GROUP_COMMIT_GOAL = 10.0  # 64 writers ≥ 10× the single-writer durable rate


def _row(
    name: str,
    measured: str,
    baseline: str,
    ratio: float | None,
    goal: str = "—",
    met: bool | None = None,
) -> dict[str, Any]:
    return {
        "row": name,
        "measured": measured,
        "baseline": baseline,
        "ratio": ratio,
        "goal": goal,
        "met": met,
    }


def _first(row: dict[str, Any], test: Callable[[str], bool]) -> str | None:
    return next((k for k in row if test(k)), None)


def retrieval_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Every named row of bench_retrieval's JSON, whatever list it sits in."""
    out: list[dict[str, Any]] = []
    for value in res.values():
        if not isinstance(value, list):
            continue
        named = [r for r in value if isinstance(r, dict) and "row" in r]
        repeated = {r["row"] for r in named if sum(x["row"] == r["row"] for x in named) > 1}
        for r in named:
            if "baseline" not in r:  # a supporting measurement, not a ratio to a baseline
                continue
            name = f"{r['row']}, n = {r['n']:,}" if "n" in r else str(r["row"])
            if r["row"] in repeated and "sigma" in r:
                name += f", σ = {r['sigma']:g}"
            ratio_key = _first(r, lambda k: k.startswith("ratio"))
            ms_key = next((k for k in ("retrieve_ms", "lazy_ms") if k in r), None) or _first(
                r, lambda k: k.endswith("_ms") and k != "baseline_ms"
            )
            ratio = float(r[ratio_key]) if ratio_key else None
            measured = f"{r[ms_key]:.1f} ms" if ms_key else "—"
            base = str(r.get("baseline", "—"))
            if "baseline_ms" in r:
                base += f": {r['baseline_ms']:.1f} ms"
            goal = next((g for p, g in RETRIEVAL_GOALS.items() if r["row"].startswith(p)), None)
            if goal is None or ratio is None:
                out.append(_row(name, measured, base, ratio))
                continue
            out.append(_row(name, measured, base, ratio, f"≤ {goal[0]:g}×", ratio <= goal[0]))
            if goal[1] is not None and "noise_share" in r:
                share = float(r["noise_share"])
                out.append(
                    _row(
                        f"{name}: noise's share of the query",
                        f"{share:.0%} ({r.get('noise_ms', float('nan')):.1f} ms)",
                        "the whole query",
                        share,
                        f"≤ {goal[1]:.0%}",
                        share <= goal[1],
                    )
                )
    return out


def dp_vote_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in res["readers"]:
        hf = str(r["reader"]).startswith("hf")
        ratio = float(r["dp_vote_vs_plain"])
        out.append(
            _row(
                f"DP voting per token, {r['reader']} reader, m = {res['voters']}",
                f"{r['dp_vote_ms_per_token']:.1f} ms/token",
                f"plain RAG (top-5): {r['plain_ms_per_token']:.1f} ms/token",
                ratio,
                f"≤ {DP_VOTE_GOAL:g}×" if hf else "—",
                ratio <= DP_VOTE_GOAL if hf else None,
            )
        )
    return out


def coalition_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    s, g, d = res["small"], res["large"], res["dim"]
    probe = f"ivf, nprobe {res['nprobe']}"
    gib = 2.0**30
    return [
        _row(
            f"coalition ĉ, {s['queries']:,} × {d}, {probe}",
            f"{s['ivf_s']:.2f} s",
            f"exact search: {s['current_s']:.2f} s",
            s["ivf_s"] / s["current_s"],
        ),
        _row(
            f"coalition ĉ, {g['queries']:,} × {d}, {probe}: time",
            f"{g['ivf_s']:.2f} s",
            f"exact search: {g['current_s']:.2f} s",
            g["ivf_s"] / g["current_s"],
            f"< {COALITION_SECONDS:g} s",
            g["ivf_s"] < COALITION_SECONDS,
        ),
        _row(
            f"coalition ĉ, {g['queries']:,} × {d}, {probe}: memory",
            f"peak traced {g['ivf_peak_traced_bytes'] / gib:.2f} GiB (max RSS growth "
            f"{g['ivf_max_rss_growth_bytes'] / gib:.2f} GiB)",
            f"exact search: {g['peak_traced_bytes'] / gib:.2f} GiB",
            g["ivf_peak_traced_bytes"] / g["peak_traced_bytes"],
            "≤ 2 GiB",
            max(g["ivf_peak_traced_bytes"], g["ivf_max_rss_growth_bytes"]) <= COALITION_BYTES,
        ),
        _row(
            f"coalition ĉ, {g['queries']:,} × {d}, {probe}: ĉ and pair recall at θ*",
            f"ĉ = {g['ivf_k_hat']}, recall {g['ivf_pair_recall']:.4f} "
            f"({g['ivf_found_pairs']:,} of {g['ivf_linked_pairs']:,} pairs)",
            f"exact search: ĉ = {g['k_hat']}",
            g["ivf_pair_recall"],
            "same ĉ, recall 1.0",
            bool(g["ivf_same_k_hat"]) and g["ivf_pair_recall"] == 1.0,
        ),
    ]


def ledger_rows(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Group commit at the most writers against the single-writer durable rate (the
    issue's goal: ≥ 10× it at 64 writers), with one commit per append at as many writers
    and the efficiency appends/s ÷ (writers × the disk's sync rate) beside it."""
    out = []
    for key, conc in res.items():
        if not key.startswith("concurrent_"):
            continue
        most = max(conc["writers"])
        by_mode = {r["mode"]: r for r in conc["rows"] if r["writers"] == most}
        before, after = by_mode["before"], by_mode["after"]
        ratio = float(after["vs_single_writer"])
        out.append(
            _row(
                f"group commit, {conc['store']} store, {most} writers",
                f"{after['appends_per_s']:,.0f}/s, efficiency {after['efficiency']:.2f} "
                f"(disk {conc['fsync_per_s']:,.0f} syncs/s); one commit per append at "
                f"{most} writers: {before['appends_per_s']:,.0f}/s, efficiency "
                f"{before['efficiency']:.2f}",
                f"one writer, one commit per append: {conc['single_writer_appends_per_s']:,.0f}/s",
                ratio,
                f"≥ {GROUP_COMMIT_GOAL:g}× at 64 writers" if most >= 64 else "—",
                ratio >= GROUP_COMMIT_GOAL if most >= 64 else None,
            )
        )
    return out


READERS: dict[str, Callable[[dict[str, Any]], list[dict[str, Any]]]] = {
    "retrieval": retrieval_rows,
    "dp_vote": dp_vote_rows,
    "coalition": coalition_rows,
    "ledger": ledger_rows,
}


def command(name: str, quick: bool, json_path: Path) -> list[str]:
    script = SCRIPTS[name]
    args = script.quick if quick else script.full
    return [sys.executable, str(HERE / script.file), *args, "--json", str(json_path)]


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| row | measured | named baseline | ratio | goal | met? |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.3g}×"
        met = {True: "yes", False: "no", None: "—"}[r["met"]]
        lines.append(
            f"| {r['row']} | {r['measured']} | {r['baseline']} | {ratio} | {r['goal']} | {met} |"
        )
    return "\n".join(lines)


def render_saved(out_dir: Path, names: list[str], json_out: str | None) -> dict[str, Any]:
    """The table from the ``<name>.json`` files an earlier run left in ``out_dir``."""
    rows: list[dict[str, Any]] = []
    for name in names:
        path = out_dir / f"{name}.json"
        if not path.exists():
            raise SystemExit(f"{path} does not exist: run with --out-dir {out_dir} first.")
        rows.extend(READERS[name](json.loads(path.read_text())))
    print(table(rows))
    result: dict[str, Any] = {"from": str(out_dir), "rows": rows}
    if json_out:
        Path(json_out).write_text(json.dumps(result, indent=1))
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="each script's smoke settings")
    p.add_argument("--only", nargs="+", choices=list(SCRIPTS), default=list(SCRIPTS))
    p.add_argument("--plan", action="store_true", help="print the commands, run nothing")
    p.add_argument("--out-dir", default=None, help="keep each script's JSON and log here")
    p.add_argument("--json", default=None, help="write the table and the runs here")
    p.add_argument(
        "--from",
        dest="from_dir",
        default=None,
        help="run nothing: make the table from the JSON an earlier --out-dir run kept",
    )
    a = p.parse_args(argv)
    if a.from_dir:
        return render_saved(Path(a.from_dir), a.only, a.json)
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(a.out_dir or tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        plan = {n: command(n, a.quick, out_dir / f"{n}.json") for n in a.only}
        if a.plan:
            for cmd in plan.values():
                print(" ".join(cmd))
            return {"plan": plan}
        runs: dict[str, Any] = {}
        rows: list[dict[str, Any]] = []
        for name, cmd in plan.items():
            log = out_dir / f"{name}.log"
            print(f"running {' '.join(cmd[1:])}", flush=True)
            t0 = time.perf_counter()
            with log.open("w") as f:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=False)
            seconds = time.perf_counter() - t0
            runs[name] = {"command": cmd, "returncode": rc.returncode, "seconds": seconds}
            print(f"  {name}: exit {rc.returncode} after {seconds:.0f} s", flush=True)
            if rc.returncode != 0:
                print(log.read_text()[-2000:], file=sys.stderr)
                rows.append(_row(f"{name}: failed (exit {rc.returncode})", "—", "—", None))
                continue
            res = json.loads((out_dir / f"{name}.json").read_text())
            runs[name]["result"] = res
            rows.extend(READERS[name](res))
    print()
    if a.quick:
        print("--quick: smoke sizes, below those the goals are stated for; 'met?' is only")
        print("the arithmetic of the comparison here.")
    print(table(rows))
    result: dict[str, Any] = {
        "quick": a.quick,
        "load_average": list(os.getloadavg()),
        "rows": rows,
        "runs": runs,
    }
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    if any(r["returncode"] != 0 for r in runs.values()):
        raise SystemExit(1)
    return result


if __name__ == "__main__":
    main()
