"""Run an experiment config: cells in a process pool (or as Ray tasks, with
``executor: ray``: :mod:`ragprivacy.eval.ray_executor`), checkpoints, results and report.

Each cell's result is written to ``OUT/cells/<key>.json`` as soon as it finishes, and
generator calls are cached in ``OUT/.cache/generations.sqlite``, so a rerun after a crash
redoes only unfinished cells. ``OUT/results.json`` records the settings, the root seed,
each cell's seed, package versions and every metric; ``OUT/report.md`` renders them with
PNG plots.

A run can be stopped: Ctrl-C (SIGINT) or SIGTERM ends it within seconds, keeps every
finished cell's checkpoint, terminates the worker processes (they ignore SIGINT, so a
Ctrl-C reaching the whole process group does not kill them half-way with a traceback
each) and raises :class:`~ragprivacy.errors.RunInterruptedError`; running the same
config into the same directory resumes with the unfinished cells.

A run that attacks a remote endpoint (system ``remote``) counts the endpoint's calls as
they happen (:mod:`ragprivacy.eval.calls`): the progress bar shows the calls so far —
new ones and those served from the call cache, failures, tokens and, with the config's
``price``, the estimated cost — and ``results.json`` (``endpoint_calls``) and the report
record this run's calls and those of every cell. A finished cell whose endpoint calls
failed (timeouts, errors) is kept in the results but run again by a rerun: its answered
calls come from the cache, the failed ones are retried.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import platform
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._resources import ResourceEstimate, check_resources
from ragprivacy.errors import DataError, RunInterruptedError
from ragprivacy.eval.cache import GenerationCache
from ragprivacy.eval.calls import CallTally, Price
from ragprivacy.eval.config import ExperimentConfig, RaySpec
from ragprivacy.eval.context import RunContext
from ragprivacy.eval.experiments.base import Experiment, create_experiment
from ragprivacy.eval.report import noise_summary, write_report

__all__ = ["RunResult", "package_versions", "run_config"]

_CONTEXTS: dict[str, RunContext] = {}


@dataclass(frozen=True, slots=True)
class RunResult:
    """Where a run wrote its outputs, and the results payload."""

    out_dir: Path
    results_path: Path
    report_path: Path
    results: dict[str, Any]


def package_versions() -> dict[str, str]:
    """Versions of Python and of the packages results depend on."""
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for pkg in (
        "ragprivacy",
        "numpy",
        "scipy",
        "scikit-learn",
        "dp-accounting",
        "faiss-cpu",
        "torch",
        "transformers",
        "sentence-transformers",
    ):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def _cell_key(config: dict[str, Any], exp_index: int, cell: dict[str, Any], spawn_key: Any) -> str:
    """A finished cell's checkpoint name: what its result depends on — the root seed,
    corpora, models, its own experiment's spec, its position and its seed — and nothing
    else, so editing one experiment (or ``workers``, or the run's name) keeps the others'
    finished cells."""
    parts = [
        config["seed"],
        config["corpora"],
        config["models"],
        config["experiments"][exp_index],
        exp_index,
        cell,
        list(spawn_key),
    ]
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _run_cell(
    config: ExperimentConfig,
    exp_index: int,
    cell: dict[str, Any],
    seed_entropy: int,
    seed_key: tuple[int, ...],
    cache_dir: str | None,
    *,
    units: Any = None,
    context: RunContext | None = None,
) -> dict[str, Any]:
    """Worker entry point: build (or reuse) this process's context and run one cell;
    ``units`` (a queue, or a callable in this process) receives the work units the cell
    reports as it goes. ``context`` (the Ray executor's) is used instead of this
    process's context for ``cache_dir``."""
    ctx = context
    if ctx is None:
        ctx_key = json.dumps([config.to_dict(), cache_dir], sort_keys=True, default=str)
        ctx = _CONTEXTS.get(ctx_key)
        if ctx is None:
            ctx = _CONTEXTS.setdefault(ctx_key, RunContext(config, cache_dir=cache_dir))
    experiment = create_experiment(config.experiments[exp_index], config, exp_index)
    rng = np.random.default_rng(np.random.SeedSequence(seed_entropy, spawn_key=seed_key))
    start = time.perf_counter()
    put = units if callable(units) or units is None else units.put
    cell_calls = CallTally()  # a remote endpoint's calls during this cell

    def calls(delta: CallTally) -> None:
        cell_calls.add(delta)
        if put is not None:
            put(delta.to_dict())

    ctx.progress, ctx.calls = put, calls
    try:
        result = experiment.run_cell(cell, ctx, rng)
    finally:
        ctx.progress = ctx.calls = None
    out = {"result": result, "seconds": time.perf_counter() - start}
    if cell_calls.calls:
        out["calls"] = cell_calls.to_dict()
    return out


def run_config(
    config: ExperimentConfig,
    out_dir: str | Path,
    *,
    workers: int | None = None,
    progress: bool = True,
    config_path: str | None = None,
    force: bool = False,
) -> RunResult:
    """Run every cell of ``config`` and write ``results.json`` and ``report.md``.

    Args:
        config: the validated experiment config.
        out_dir: output directory (created; finished cells found there are reused).
        workers: processes for independent cells (default ``config.workers``; 1 runs
            everything in this process); with ``executor: ray``, the local Ray
            instance's CPUs unless ``ray.num_cpus`` is set.
        progress: show a progress bar over cells (and over the targets within cells, for
            experiments that count them).
        config_path: recorded in the report's reproduce line.
        force: run even if the estimate of the config's big knobs (synthetic corpus
            sizes, collusion trials) says it will not fit in memory or takes over an hour
            (checked for this machine: not for a run on a Ray cluster).

    Raises:
        ConfigError: the estimate is too large and ``force`` is false (nothing was run).
        RunInterruptedError: the run was stopped by Ctrl-C or SIGTERM.
    """
    on_ray = (config.ray or RaySpec()) if config.executor == "ray" else None
    if on_ray is None or on_ray.address == "local":  # a cluster's memory is on its nodes
        parallel = workers or config.workers
        if on_ray is not None and on_ray.num_cpus is not None:
            parallel = max(1, int(on_ray.num_cpus / on_ray.cpus_per_cell))
        check_resources(
            _estimate(config, parallel),
            what=f"The config {config.name!r} (corpora and collusion sweeps)",
            knob="the corpora's 'n' or the sweeps' 'trials'",
            force=force,
        )
    out = Path(out_dir)
    # every experiment is built (and so checked) before anything is written: a config
    # refused here leaves no output directory behind
    experiments: list[Experiment] = [
        create_experiment(spec, config, i) for i, spec in enumerate(config.experiments)
    ]
    created = not out.exists()
    try:
        (out / "cells").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"Cannot create the output directory {str(out)!r}: {exc}.") from exc
    config_dict = config.to_dict()
    cells = [(i, cell) for i, exp in enumerate(experiments) for cell in exp.cells()]
    root = np.random.SeedSequence(config.seed)
    children = root.spawn(len(cells))
    cache_dir = str(out / ".cache") if config.cache else None
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()

    checkpoints = [
        out / "cells" / f"{_cell_key(config_dict, i, cell, children[n].spawn_key)}.json"
        for n, (i, cell) in enumerate(cells)
    ]
    done: dict[int, dict[str, Any]] = {}
    pending = []
    for n, path in enumerate(checkpoints):
        kept = json.loads(path.read_text()) if path.is_file() else None
        if kept is not None and not _failed_calls(kept):
            done[n] = kept
        else:  # unfinished, or its endpoint calls failed: run (again; answers are cached)
            pending.append(n)

    def finish(n: int, payload: dict[str, Any]) -> None:
        i, cell = cells[n]
        payload = {
            "experiment": i,
            "type": config.experiments[i].type,
            "cell": cell,
            "seed": {"entropy": root.entropy, "spawn_key": list(children[n].spawn_key)},
            **payload,
        }
        path = checkpoints[n]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload, default=_json_default))
        tmp.replace(path)
        done[n] = json.loads(path.read_text())

    n_workers = min(workers or config.workers, max(1, len(pending)))
    entropy = int(root.entropy)  # type: ignore[arg-type]  # an int: SeedSequence(int)
    args: dict[int, tuple[Any, ...]] = {
        n: (config, cells[n][0], cells[n][1], entropy, children[n].spawn_key, cache_dir)
        for n in pending
    }
    units = sum(experiments[cells[n][0]].cell_units(cells[n][1]) for n in pending)
    remote = any(
        s.name == "remote" for e in experiments for s in getattr(e, "systems", {}).values()
    )
    price = Price.parse(config.price) if config.price else None
    run_calls = CallTally()  # this run's endpoint calls
    try:
        with (
            _stop_on_sigterm(),
            _progress(progress, len(cells), len(done), units, calls=remote, price=price) as bar,
        ):
            advance, step, show_calls = bar

            def on_calls(delta: dict[str, int]) -> None:
                run_calls.add(delta)
                show_calls(run_calls)

            def sink(item: int | dict[str, int]) -> None:
                if isinstance(item, dict):
                    on_calls(item)
                else:
                    step(item)

            if on_ray is not None:
                from ragprivacy.eval.ray_executor import run_ray

                run_ray(
                    on_ray,
                    workers or config.workers,
                    pending,
                    args,
                    finish,
                    advance,
                    step if progress and units else None,
                    on_calls if remote else None,
                    GenerationCache(Path(cache_dir) / "generations.sqlite") if cache_dir else None,
                )
            elif n_workers <= 1:
                for n in pending:
                    finish(n, _run_cell(*args[n], units=sink if progress or remote else None))
                    advance()
            else:
                pool_step = step if progress and units else None
                _run_pool(
                    n_workers,
                    pending,
                    args,
                    finish,
                    advance,
                    pool_step,
                    on_calls if remote else None,
                )
    except Exception:
        if created:  # a run that failed before writing anything leaves no empty folder
            _remove_if_empty(out)
        raise
    except (KeyboardInterrupt, _Stopped) as exc:
        signum = exc.signum if isinstance(exc, _Stopped) else int(signal.SIGINT)
        kept = sum(path.is_file() for path in checkpoints)  # on disk, whatever the timing
        raise RunInterruptedError(
            f"Interrupted by {signal.Signals(signum).name}: {kept} of {len(cells)} "
            f"cells finished and are kept in {out / 'cells'}.",
            finished=kept,
            total=len(cells),
            signum=signum,
        ) from None

    ordered = [done[n] for n in range(len(cells))]
    results = {
        "name": config.name,
        "root_seed": config.seed,
        "started": started,
        "seconds": time.perf_counter() - t0,
        "settings": config_dict,
        "versions": package_versions(),
        "config_path": config_path,
        "noise": noise_summary(ordered),
        "cells": ordered,
    }
    if remote:
        over_cells = CallTally()
        for c in ordered:
            over_cells.add(c.get("calls") or {})
        results["endpoint_calls"] = {
            "this_run": run_calls.summary(price),
            "cells": over_cells.summary(price),
        }
    results_path = out / "results.json"
    results_path.write_text(json.dumps(results, indent=2, default=_json_default))
    report_path = write_report(experiments, results, out)
    return RunResult(out, results_path, report_path, results)


def _remove_if_empty(out: Path) -> None:
    """Remove ``out`` if it holds no file at all (only the empty folders a run made)."""
    if out.is_dir() and not any(p.is_file() for p in out.rglob("*")):
        shutil.rmtree(out, ignore_errors=True)


def _estimate(config: ExperimentConfig, workers: int) -> ResourceEstimate:
    """The big knobs of a config: every worker builds (and keeps) the synthetic corpora
    and background texts, one after the other; the collusion sweeps' cells share the
    workers, each holding its largest cell."""
    from ragprivacy.corpus import synthesis_estimate
    from ragprivacy.eval.experiments import CollusionExperiment, sweep_estimate

    workers = max(1, workers)
    corpora = [ResourceEstimate(memory=0, seconds=0)]
    for spec in config.corpora.values():
        if spec.synthetic is not None:
            for n in (spec.n, config.models.background_n):
                corpora.append(synthesis_estimate(spec.synthetic, n) or corpora[0])
    sweeps = [ResourceEstimate(memory=0, seconds=0)]
    for i, exp in enumerate(config.experiments):
        if exp.type == CollusionExperiment.type:
            o = CollusionExperiment(exp, config, i).options
            sweeps.append(
                sweep_estimate(
                    mechanism=o.mechanism,
                    rows=len(o.eps_acc),
                    ks=o.coalition_sizes,
                    n=o.n,
                    trials=o.trials,
                    mode=o.mode,
                )
            )
    return ResourceEstimate(
        memory=workers * (sum(e.memory for e in corpora) + max(e.memory for e in sweeps)),
        seconds=sum(e.seconds for e in corpora) + sum(e.seconds for e in sweeps) / workers,
    )


def _run_pool(
    n_workers: int,
    pending: list[int],
    args: dict[int, tuple[Any, ...]],
    finish: Any,
    advance: Any,
    step: Any,
    on_calls: Any = None,
) -> None:
    """Run the ``pending`` cells in a pool of ``n_workers`` spawned processes.

    ``step`` (None: no progress within cells) receives the work units workers report
    through a manager queue, ``on_calls`` (None: not counted) the remote endpoint's
    calls. Whatever ends the loop early (an error, Ctrl-C, SIGTERM)
    terminates the workers rather than waiting for the cells they are running, so a
    stop takes seconds and leaves no process behind; finished cells are already on disk.
    """
    # children start with SIGINT ignored (:class:`_QuietSpawnContext`): a Ctrl-C that
    # reaches the process group while a child is still importing must not print its
    # traceback, and this process ignores it only while it launches one
    ctx = _QuietSpawnContext()
    manager = ctx.Manager() if step is not None or on_calls is not None else None
    queue = manager.Queue() if manager is not None else None
    # the pool's workers are the children that appear from here on (a public way to
    # find them; the manager, started above, is shut down on its own)
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx, initializer=_worker_init)
    try:
        futures = {pool.submit(_run_cell, *args[n], units=queue): n for n in pending}
        left = set(futures)
        while left:
            finished, left = wait(left, timeout=0.25, return_when=FIRST_COMPLETED)
            _drain(queue, step, on_calls)
            for fut in finished:
                finish(futures[fut], fut.result())
                advance()
    except BaseException:
        _stop_workers(pool, before)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        if manager is not None:
            manager.shutdown()


class _QuietSpawnProcess(multiprocessing.context.SpawnProcess):
    """A spawned process that starts with SIGINT ignored (an ignored signal survives
    exec, and Python then installs no KeyboardInterrupt handler). The parent ignores
    SIGINT only for the launch itself (fork, exec, the start-up data written), not while
    it waits for the child to come up — a manager's handshake, a worker's imports take
    seconds on a busy machine — so a Ctrl-C that arrives meanwhile still stops the run."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        with _sigint_ignored():
            return multiprocessing.context.SpawnProcess._Popen(process_obj)


class _QuietSpawnContext(multiprocessing.context.SpawnContext):
    """The spawn context whose processes are :class:`_QuietSpawnProcess` (the pool's
    workers and the progress manager)."""

    Process = _QuietSpawnProcess


def _worker_init() -> None:
    """Workers ignore SIGINT: Ctrl-C reaches the whole process group, and the parent
    decides (it checkpoints what finished and terminates the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_workers(pool: ProcessPoolExecutor, before: set[Any]) -> None:
    """Cancel the queued cells and terminate (then kill, if need be) the workers.

    Then wait (bounded) for the pool's manager thread to finish its own clean-up. On
    Python 3.11 the interpreter's exit hook wakes every live manager thread without the
    pool's lock; a manager thread still closing its wake-up pipe at that moment makes the
    hook write to a closed descriptor and print an ``OSError`` traceback after the
    run's one-line message. A finished manager thread has closed the pipe, and the hook
    skips a closed one. (``shutdown`` forgets the thread, so it is taken beforehand.)
    """
    manager_thread = getattr(pool, "_executor_manager_thread", None)
    with _signals_ignored():  # a second Ctrl-C must not leave workers behind
        pool.shutdown(wait=False, cancel_futures=True)
        workers = [p for p in multiprocessing.active_children() if p not in before]
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=1)
        if isinstance(manager_thread, threading.Thread) and manager_thread.is_alive():
            manager_thread.join(timeout=5)


class _Stopped(BaseException):
    """Raised in the main thread by the SIGTERM handler of :func:`_stop_on_sigterm`
    (a BaseException, like KeyboardInterrupt, so no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """While a run is in progress, SIGTERM raises :class:`_Stopped` in the main thread
    (SIGINT already raises KeyboardInterrupt), so both stop it the same orderly way.
    A handler the caller installed (or SIG_IGN) is left alone, and so is any thread but
    the main one, where Python cannot install handlers."""
    if not _in_main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise _Stopped(signum)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored while child processes are started (SIGTERM is left alone: the
    workers must still die of :meth:`Process.terminate`)."""
    if not _in_main_thread():
        yield
        return
    saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if saved is not None:  # None: set outside Python, cannot be restored
            signal.signal(signal.SIGINT, saved)


@contextmanager
def _signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for the (bounded) time of a cleanup."""
    if not _in_main_thread():
        yield
        return
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:  # None: set outside Python, cannot be restored
                signal.signal(s, handler)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def _failed_calls(payload: dict[str, Any]) -> int:
    """The failed endpoint calls a cell's checkpoint records (0 for our own systems)."""
    return int((payload.get("calls") or {}).get("failed", 0))


def _drain(queue: Any, step: Any, on_calls: Any = None) -> None:
    """Move what workers reported from ``queue``: work units (ints) to the bar's
    ``step``, endpoint calls (a :class:`~ragprivacy.eval.calls.CallTally` as a dict) to
    ``on_calls``."""
    if queue is None:
        return
    got = 0
    calls = CallTally()
    while True:
        try:
            item = queue.get_nowait()
        except Exception:  # queue.Empty (a manager proxy raises it by value)
            break
        if isinstance(item, dict):
            calls.add(item)
        else:
            got += int(item)
    if got and step is not None:
        step(got)
    if calls.calls and on_calls is not None:
        on_calls(calls.to_dict())


class _progress:
    """A rich progress bar over cells, over the work units (targets) within cells when
    experiments report them, and, with ``calls``, a line of a remote endpoint's calls so
    far (new and cached, failures, tokens, the cost at ``price``); a no-op when disabled.

    Entering gives ``(advance, step, show_calls)``: one cell done, ``n`` units done, the
    run's :class:`~ragprivacy.eval.calls.CallTally` so far."""

    def __init__(
        self,
        show: bool,
        total: int,
        completed: int,
        units: int = 0,
        *,
        calls: bool = False,
        price: Price | None = None,
    ) -> None:
        self.show, self.total, self.completed, self.units = show, total, completed, units
        self.calls, self.price = calls, price

    def __enter__(self) -> Any:
        if not self.show:
            return (lambda: None), (lambda n: None), (lambda tally: None)
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            transient=True,
        )
        self._bar.start()
        task = self._add("cells", self.total, self.completed)
        inner = self._add("targets", self.units, 0) if self.units else None
        calls = None
        if self.calls:
            start = "endpoint calls: " + CallTally().line(self.price)
            calls = self._bar.add_task(start, total=None, count="")

        def step(n: int) -> None:
            if inner is not None:
                self._advance(inner, n)

        def show_calls(tally: CallTally) -> None:
            if calls is not None:
                line = "endpoint calls: " + tally.line(self.price)
                self._bar.update(calls, description=line)

        return (lambda: self._advance(task, 1)), step, show_calls

    def _add(self, name: str, total: int, completed: int) -> Any:
        return self._bar.add_task(
            name, total=total, completed=completed, count=f"{completed}/{total}"
        )

    def _advance(self, task: Any, n: int) -> None:
        self._bar.advance(task, n)
        t = next(x for x in self._bar.tasks if x.id == task)
        self._bar.update(task, count=f"{int(t.completed)}/{int(t.total or 0)}")

    def __exit__(self, *exc: Any) -> None:
        if self.show:
            self._bar.stop()
