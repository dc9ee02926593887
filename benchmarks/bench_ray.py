"""``executor: ray`` against the process pool (the baseline) on this machine: the same
grid, the same number of CPUs, in one run.

Each repeat runs the grid into a fresh output directory with the pool (``workers: W``)
and then as Ray tasks on a local Ray instance of ``W`` CPUs (started once, before the
repeats, and timed on its own: ``ray_start_s``), interleaved; the figures are medians.
The Ray run's time includes putting the cache snapshot and the config in the object
store, the tasks, the progress queue and the checkpoints; a connected Ray keeps its
worker processes between runs, where the pool spawns (and imports) its workers afresh,
so the first Ray run plus Ray's start (``ray_cold_s``, what one ``ragprivacy run``
with ``address: local`` costs) is reported too.
Both runs must give the same metrics for every cell (checked, not assumed).

The grid: collusion sweeps of the scalar mechanism (one cell per ε_acc row; their cost is
set by ``--trials``) and a QA experiment over a small synthetic corpus (a cell per
system: building the corpus, the index and the generator, then answering), which is
what a membership cell does at a smaller scale.

Usage::

    python benchmarks/bench_ray.py [--workers 2] [--trials 400000] [--rows 6]
        [--repeats 3] [--quick] [--json PATH]

Timings vary ±30 % on shared machines: compare the ratio within one run.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, bench_parser, once, start

from ragprivacy.eval import parse_config, run_config


def _grid(rows: int, trials: int, questions: int, workers: int) -> dict[str, Any]:
    return {
        "name": "bench-ray",
        "seed": 5,
        "workers": workers,
        "corpora": {"k": {"synthetic": "knowledge", "n": 200}},
        "models": {"background_n": 100},
        "experiments": [
            {
                "type": "collusion",
                "mechanism": "scalar",
                "eps_acc": [float(i + 1) for i in range(rows)],
                "coalition_sizes": [1, 2],
                "n": 1000,
                "trials": trials,
            },
            {
                "type": "qa",
                "corpus": "k",
                "systems": ["non-rag", "rag"],
                "k": 3,
                "questions": questions,
            },
        ],
    }


def _metrics(results: dict[str, Any]) -> list[Any]:
    """Every cell's result without wall times (which differ run to run)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "seconds"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return [strip(c["result"]) for c in results["cells"]]


def _start_ray(cpus: int) -> tuple[Any, str | None, float]:
    """A local Ray instance of ``cpus`` CPUs with its files in a short temporary directory
    (unix socket paths are limited to 107 bytes), or the connection this process already
    has (a test's); returns (ray, the directory to remove or None, seconds to start)."""
    import ray

    if ray.is_initialized():
        return ray, None, 0.0
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    temp = tempfile.mkdtemp(prefix="r")
    started = once(
        lambda: ray.init(
            num_cpus=cpus,
            include_dashboard=False,
            _temp_dir=temp,
            log_to_driver=False,
            logging_level="WARNING",
        )
    )
    return ray, temp, started.seconds


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = bench_parser(__doc__, repeats=3, quick_repeats=1)
    parser.add_argument("--workers", type=int, default=2, help="pool workers = Ray CPUs")
    parser.add_argument("--trials", type=int, default=400_000, help="trials per sweep cell")
    parser.add_argument("--rows", type=int, default=6, help="collusion cells (eps_acc rows)")
    parser.add_argument("--questions", type=int, default=40, help="QA questions per cell")
    bench = start("ray", parser, argv)
    args = bench.args
    if args.quick:
        args.trials, args.rows, args.questions = 20_000, 2, 5

    grid = _grid(args.rows, args.trials, args.questions, args.workers)
    pool_cfg = parse_config(grid)
    ray_cfg = parse_config({**grid, "executor": "ray"})
    cells = args.rows + 2
    ray, temp, start_s = _start_ray(args.workers)
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    times: dict[str, list[float]] = {"pool": [], "ray": []}
    same = True
    try:
        for r in range(args.repeats):
            found = {}
            for name, cfg in (("pool", pool_cfg), ("ray", ray_cfg)):
                out = work / f"{name}-{r}"
                ran = once(partial(run_config, cfg, out, workers=args.workers, progress=False))
                times[name].append(ran.seconds)
                found[name] = _metrics(ran.value.results)
            same = same and found["pool"] == found["ray"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if temp is not None:
            ray.shutdown()
            shutil.rmtree(temp, ignore_errors=True)

    pool_s, ray_s = statistics.median(times["pool"]), statistics.median(times["ray"])
    cold_s = start_s + times["ray"][0]  # one `ragprivacy run` with address: local
    result: dict[str, Any] = {
        "baseline": "process pool",
        "workers": args.workers,
        "cells": cells,
        "trials": args.trials,
        "questions": args.questions,
        "repeats": args.repeats,
        "pool_s": pool_s,
        "ray_s": ray_s,
        "ray_start_s": start_s,
        "ratio": ray_s / pool_s,
        "ray_cold_s": cold_s,
        "cold_ratio": cold_s / pool_s,
        "runs": times,
        "same_results": same,
        "ray": ray.__version__,
    }
    print(
        f"{cells} cells on {args.workers} CPUs, median of {args.repeats}: "
        f"pool {pool_s:.2f} s, ray {ray_s:.2f} s (Ray started in {start_s:.1f} s, "
        f"not counted); ray/pool = {result['ratio']:.2f}; first Ray run with the start "
        f"{cold_s:.2f} s, ray/pool = {result['cold_ratio']:.2f}; "
        f"same results: {same}"
    )
    config = {"cells": cells, "workers": args.workers, "trials": args.trials,
              "questions": args.questions, "repeats": args.repeats}  # fmt: skip
    pool = f"process pool ({args.workers} workers)"
    rows = [
        Row(
            name=f"grid of {cells} cells, executor: ray, connected",
            config=config,
            measured=ray_s,
            unit="s",
            baseline=pool,
            baseline_measured=pool_s,
            notes=f"same results: {same}; Ray started in {start_s:.1f} s, not counted",
        ),
        Row(
            name=f"grid of {cells} cells, executor: ray, start + first run",
            config=config,
            measured=cold_s,
            unit="s",
            baseline=pool,
            baseline_measured=pool_s,
        ),
    ]
    return bench.finish(rows, result)


if __name__ == "__main__":
    main()
