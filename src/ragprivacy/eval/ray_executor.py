"""``executor: ray``: a run's cells as Ray tasks on a cluster (the ``cluster`` extra).

The machine that starts the run (the *driver*) does what it does with the process pool:
it works out the cells and their seeds, skips the finished ones, writes each finished
cell's checkpoint in the run's directory, shows the progress bar and writes the results.
Only the running of a cell moves: each pending cell becomes one task
(``ray.remote``, ``ray.cpus_per_cell`` CPUs) that runs the same worker entry point as
the pool with the same arguments — the config, the cell, the root seed's entropy and the
cell's spawn key — so a seeded cell gives the same result, bit for bit, on either
executor and on any node. Cells are independent; Ray schedules them over the cluster's
CPUs.

The generation cache stays where the pool keeps it, ``OUT/.cache/generations.sqlite``
on the driver, keyed as with the pool, and the driver is its only writer (the nodes
share no file system, and SQLite over a network file system is not safe):

- When the run starts, the driver takes one snapshot of the file (a serialized SQLite
  database, :meth:`GenerationCache.snapshot`; nothing when it is empty, as on a fresh
  run) and puts it in Ray's object store once. Each worker process answers from an
  in-memory copy of it (:meth:`GenerationCache.in_memory`), to which it also adds its
  own new entries, so a rerun cell finds the answers of its earlier attempts and the
  cells one process runs share their calls, as in the pool. (The copy costs each worker
  process the snapshot's size in memory.)
- Every new entry goes back to the driver with the cell's progress reports, at least
  once a second and before the task ends, and the driver stores it in the file before
  it writes that cell's checkpoint. So the file holds every call of every finished cell,
  and, as with the pool, the calls a stopped cell made in all but its last second.
  What one worker process adds during a run is not seen by the others until the next
  run (a call two of them need is made twice, with the same key; for a stochastic
  generator the file keeps the draw stored last).

Progress (cells, the targets within cells, a remote endpoint's calls) travels through
one :class:`ray.util.queue.Queue`; Ctrl-C or SIGTERM cancels the unfinished tasks
(``ray.cancel(force=True)``), keeps the finished cells and ends with the runner's
one-line message. A batch LLM endpoint (the ``openai:MODEL@URL`` generator) is called by
every worker directly: an OpenAI-compatible server reachable from the nodes serves them
all (docs/scale.md).
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from ragprivacy.errors import ConfigError
from ragprivacy.eval.cache import GenerationCache
from ragprivacy.eval.calls import CallTally
from ragprivacy.eval.config import ExperimentConfig, RaySpec
from ragprivacy.eval.context import RunContext

__all__ = ["run_ray"]

_FLUSH_S = 1.0
"""A worker sends its buffered progress and cache entries at least this often."""

# per worker process: the run's context (corpora, knowledge bases, generators and the
# in-memory cache), built by its first cell and reused by the later ones of that run
_CONTEXTS: dict[str, RunContext] = {}


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "executor: ray needs Ray: install the 'cluster' extra "
            "(pip install 'ragprivacy[cluster]')."
        ) from None
    return ray


class _Outbox:
    """A worker's reports for the driver — work units, a remote endpoint's calls, new
    cache entries — gathered and sent through the queue at most every
    :data:`_FLUSH_S` seconds, and on :meth:`flush`."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self.units = 0
        self.calls = CallTally()
        self.entries: dict[str, Any] = {}
        self.sent = time.monotonic()

    def report(self, item: int | dict[str, int]) -> None:
        if isinstance(item, dict):
            self.calls.add(item)
        else:
            self.units += int(item)
        self._maybe_flush()

    def cache(self, items: dict[str, Any]) -> None:
        self.entries.update(items)
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if time.monotonic() - self.sent >= _FLUSH_S:
            self.flush()

    def flush(self) -> None:
        self.sent = time.monotonic()
        if not (self.units or self.calls.calls or self.entries):
            return
        message = {
            "units": self.units,
            "calls": self.calls.to_dict() if self.calls.calls else None,
            "cache": self.entries,
        }
        self.units, self.calls, self.entries = 0, CallTally(), {}
        self.queue.put(message)


def _ray_cell(
    config: ExperimentConfig,
    exp_index: int,
    cell: dict[str, Any],
    seed_entropy: int,
    seed_key: tuple[int, ...],
    run_id: str,
    snapshot: bytes | None,
    queue: Any,
) -> dict[str, Any]:
    """The Ray task: one cell, through the pool's worker entry point, with this worker
    process's context of the run (its in-memory cache from ``snapshot``)."""
    from ragprivacy.eval.runner import _run_cell

    ctx = _CONTEXTS.get(run_id)
    if ctx is None:
        _CONTEXTS.clear()  # an earlier run's context: free its corpora and cache
        cache = GenerationCache.in_memory(snapshot) if config.cache else None
        ctx = _CONTEXTS.setdefault(run_id, RunContext(config, cache=cache))
    outbox = _Outbox(queue)
    if ctx.cache is not None:
        ctx.cache.on_put = outbox.cache
    try:
        return _run_cell(
            config, exp_index, cell, seed_entropy, seed_key, None, units=outbox.report, context=ctx
        )
    finally:
        if ctx.cache is not None:
            ctx.cache.on_put = None
        outbox.flush()


def _connect(ray: Any, spec: RaySpec, workers: int) -> bool:
    """Connect this process to the cluster of ``spec`` unless it is connected already;
    True when this call connected (and so the run disconnects at its end)."""
    if ray.is_initialized():
        return False
    import logging

    options: dict[str, Any] = {
        "logging_level": logging.WARNING,
        "log_to_driver": False,  # the bar owns the terminal; workers' logs stay in Ray's
    }
    if spec.address.startswith("ray://"):
        options = {}  # Ray Client forwards init options to the server's own ray.init
    elif spec.address == "local":
        options.update(num_cpus=spec.num_cpus or workers, include_dashboard=False)
    # ray.init may install its own SIGTERM handler (which exits the process); the
    # runner's, which stops the run in order, is put back
    saved = signal.getsignal(signal.SIGTERM) if _in_main_thread() else None
    try:
        ray.init(address=spec.address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"Cannot connect to the Ray cluster at {spec.address!r}: {first}"
        ) from None
    finally:
        if saved is not None:
            signal.signal(signal.SIGTERM, saved)
    return True


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """SIGINT held back while Ray connects, then delivered.

    Interrupted half-way, ``ray.init`` can leave a local instance's processes running;
    ignoring the signal instead would lose the user's Ctrl-C. So SIGINT is blocked in
    this thread (the threads and processes Ray starts meanwhile inherit the mask, as
    Ray's own children block it), and one that reaches another thread is only noted; on
    leaving, the mask and the handler are restored and a Ctrl-C that came is raised
    again, through the handler it was meant for, once the connection can be closed."""
    if not _in_main_thread():
        yield
        return
    came: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: came.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending SIGINT is noted now
        if previous is not None:  # None: set outside Python, cannot be restored
            signal.signal(signal.SIGINT, previous)
        if came:
            signal.raise_signal(signal.SIGINT)


def run_ray(
    spec: RaySpec,
    workers: int,
    pending: list[int],
    args: dict[int, tuple[Any, ...]],
    finish: Callable[[int, dict[str, Any]], None],
    advance: Callable[[], None],
    step: Callable[[int], None] | None,
    on_calls: Callable[[dict[str, int]], None] | None,
    cache: GenerationCache | None,
) -> None:
    """Run the ``pending`` cells as Ray tasks; the driver's side.

    Args:
        spec: the config's ``ray`` settings.
        workers: the local instance's CPUs when ``spec.num_cpus`` is not set.
        pending: the cells to run (indices into ``args``).
        args: each cell's worker arguments, as for the pool:
            ``(config, exp_index, cell, entropy, spawn_key, cache_dir)``.
        finish: writes a finished cell's checkpoint (called with its index and result).
        advance: one cell done (the bar).
        step: work units done within cells (``None``: not shown).
        on_calls: a remote endpoint's calls (``None``: not counted).
        cache: the run's generation cache (``None``: no cache).

    Whatever ends the loop early (an error in a cell, Ctrl-C, SIGTERM) cancels the
    unfinished tasks and disconnects before it propagates; finished cells are on disk.
    """
    ray = _import_ray()
    from ray.util.queue import Queue

    connected = False
    queue = None
    refs: dict[Any, int] = {}

    def drain(*, report: bool = True) -> None:
        for message in _take_all(queue):
            if cache is not None and message["cache"]:
                cache.put_many(message["cache"])
            if not report:
                continue
            if step is not None and message["units"]:
                step(message["units"])
            if on_calls is not None and message["calls"]:
                on_calls(message["calls"])

    try:
        with _sigint_deferred():  # a Ctrl-C during the connection stops the run after it
            connected = _connect(ray, spec, workers)
        queue = Queue(actor_options={"num_cpus": 0})
        snapshot = cache.snapshot() if cache is not None else None
        shared = ray.put(snapshot)
        config_ref = ray.put(args[pending[0]][0]) if pending else None
        run_id = uuid.uuid4().hex
        task = ray.remote(_ray_cell).options(num_cpus=spec.cpus_per_cell)
        for n in pending:
            _config, exp_index, cell, entropy, key, _cache_dir = args[n]
            ref = task.remote(config_ref, exp_index, cell, entropy, key, run_id, shared, queue)
            refs[ref] = n

        left = list(refs)
        while left:
            ready, left = _wait(ray, left)
            drain()  # before the checkpoints: a finished cell's entries are in the file
            for ref in ready:
                finish(refs[ref], _result(ray, ref))
                advance()
    except BaseException:
        with _signals_ignored():  # a second Ctrl-C must not leave tasks running
            for ref in refs:
                with suppress(Exception):
                    ray.cancel(ref, force=True)
            if queue is not None:  # what the stopped cells sent: their calls so far
                with suppress(Exception):
                    drain(report=False)
            _close(ray, queue, connected)
        raise
    else:
        _close(ray, queue, connected)


def _wait(ray: Any, refs: list[Any]) -> tuple[list[Any], list[Any]]:
    """The tasks of ``refs`` that finish within a quarter of a second, and the others.

    A stop signal's handler that raises while Ray's compiled ``wait`` runs comes out as a
    ``SystemError`` chained to what it raised: that is raised instead, so SIGTERM stops
    the run like Ctrl-C does.
    """
    try:
        ready, left = ray.wait(refs, num_returns=len(refs), timeout=0.25)
    except SystemError as exc:
        cause = exc.__cause__ or exc.__context__
        if cause is not None and not isinstance(cause, Exception):  # KeyboardInterrupt, ...
            raise cause from None
        raise
    return list(ready), list(left)


def _signals_ignored() -> Any:
    from ragprivacy.eval.runner import _signals_ignored as ignored

    return ignored()


def _take_all(queue: Any) -> list[dict[str, Any]]:
    size = queue.qsize()
    return list(queue.get_nowait_batch(size)) if size else []


def _result(ray: Any, ref: Any) -> dict[str, Any]:
    """A finished task's result; a cell's own error is raised as itself (one line), not
    as Ray's wrapper with the worker's traceback."""
    from ray.exceptions import RayTaskError

    try:
        out: dict[str, Any] = ray.get(ref)
    except RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            raise cause from None
        raise
    return out


def _close(ray: Any, queue: Any, connected: bool) -> None:
    """Free the progress queue and, when this run connected, disconnect (which stops
    a local instance)."""
    if queue is not None:
        with suppress(Exception):
            ray.kill(queue.actor)
    if connected:
        ray.shutdown()
