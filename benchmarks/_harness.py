"""What every benchmark script shares: a timer, one machine record, one row schema, one
results file, one Markdown table and one argument parser.

A script builds its parser with :func:`bench_parser` (every script gets ``--quick``,
``--json PATH`` and ``--repeats N``), adds its own arguments, and calls :func:`start`,
which parses them and notes the start of the run. It times with :func:`time_call`,
:func:`time_interleaved` or :func:`once` (all on :func:`time.perf_counter`), reports each
comparison as a :class:`Row` (a measured figure, its unit, the named baseline measured in
the same run and their ratio) and ends with :meth:`Session.finish`, which completes the
:class:`Machine` record, prints the rows as a Markdown table and writes the results file
with ``--json``. That file, the same for every script, is a JSON object::

    {"benchmark": "retrieval",   # the script: benchmarks/bench_retrieval.py
     "machine": {...},           # Machine.to_dict()
     "rows": [{...}, ...],       # Row.to_dict() of each row
     ...}                        # the script's own details, under its own keys

:func:`load_results` reads it back (validating every row), and :func:`markdown_table`
renders rows as the table of benchmarks/README.md::

    >>> row = Row(name="exact top-K", measured=96.4, unit="ms",
    ...           baseline="FAISS flat search", baseline_measured=123.0,
    ...           goal="≤ 1.3×", met=True)
    >>> print(markdown_table([row]))
    | row | measured | named baseline | ratio | goal | met? |
    |---|---|---|---|---|---|
    | exact top-K | 96.4 ms | FAISS flat search: 123 ms | 0.784× | ≤ 1.3× | yes |

Scripts import it as ``_harness`` with ``benchmarks/`` on ``sys.path`` (as it is when a
script runs as ``python benchmarks/bench_x.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import importlib.util
import inspect
import json
import math
import numbers
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = [
    "BenchParser",
    "Machine",
    "Results",
    "Row",
    "Session",
    "StageTimer",
    "Timing",
    "bench_parser",
    "format_number",
    "hnsw_index",
    "load_results",
    "markdown_table",
    "once",
    "results_document",
    "start",
    "time_call",
    "time_interleaved",
    "write_results",
]

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[1]
RESERVED = ("benchmark", "machine", "rows")  # the keys of a results file every script writes
# Distributions whose versions the machine record names, by the module they provide.
VERSIONED: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy",),
    "faiss": ("faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cu11", "faiss"),
    "torch": ("torch",),
}


# ---------------------------------------------------------------------------- baselines
#: where built baseline indices are kept between runs (``--cache`` of the scripts)
DEFAULT_CACHE = Path.home() / ".cache" / "ragprivacy-bench"


def hnsw_index(docs: np.ndarray, cache: Path | None = DEFAULT_CACHE, *, m: int = 32) -> Any:
    """A FAISS HNSW index (inner product, M = ``m``, efSearch 64) of float32 ``docs``: the
    baseline a user at scale would pick. Built with 2 FAISS threads (a one-thread build
    at 10^6 takes many minutes and is not what is compared), then set to search with
    one; kept under ``cache`` keyed by the shape and a digest of every 997th row, and
    read back from there by the next run over the same vectors."""
    import hashlib

    import faiss

    index: Any = None
    path = None
    if cache is not None:
        digest = hashlib.sha256(np.ascontiguousarray(docs[::997]).tobytes()).hexdigest()[:16]
        path = cache / f"hnsw-m{m}-{docs.shape[0]}x{docs.shape[1]}-{digest}.faiss"
        if path.exists():
            index = faiss.read_index(str(path))
    if index is None:
        faiss.omp_set_num_threads(2)
        index = faiss.IndexHNSWFlat(docs.shape[1], m, faiss.METRIC_INNER_PRODUCT)
        index.add(docs)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            faiss.write_index(index, str(path) + ".part")
            os.replace(str(path) + ".part", path)
    faiss.omp_set_num_threads(1)
    index.hnsw.efSearch = 64
    return index


# ---------------------------------------------------------------------------- timing
@dataclass(frozen=True, slots=True)
class Timing(Generic[T]):
    """Wall times (seconds) of the counted calls of one function, and the last call's
    return value; the warm-up calls are not among ``samples``."""

    samples: tuple[float, ...]
    value: T
    warmup: int = 0

    def __post_init__(self) -> None:
        if not self.samples:
            raise ValueError("A Timing needs at least one sample; got none.")

    @property
    def median(self) -> float:
        return float(statistics.median(self.samples))

    @property
    def seconds(self) -> float:
        """The median (the one sample of :func:`once`)."""
        return self.median

    @property
    def min(self) -> float:
        return float(min(self.samples))

    @property
    def max(self) -> float:
        return float(max(self.samples))

    @property
    def mean(self) -> float:
        return float(statistics.fmean(self.samples))

    @property
    def spread(self) -> float:
        """(max − min) / median: 0 for one sample; 0.3 means the samples span 30 % of
        the median."""
        median = self.median
        return (self.max - self.min) / median if median > 0 else 0.0


def _check_counts(repeats: int, warmup: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"The 'repeats' parameter must be an integer ≥ 1; got {repeats!r}.")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"The 'warmup' parameter must be an integer ≥ 0; got {warmup!r}.")


def time_call(
    fn: Callable[[], T],
    *,
    repeats: int,
    warmup: int = 1,
    setup: Callable[[], object] | None = None,
) -> Timing[T]:
    """``warmup`` untimed calls of ``fn``, then ``repeats`` timed ones.

    ``setup`` (untimed) runs before every call, warm-ups included: a fresh input or an
    emptied cache per repeat.

    >>> t = time_call(lambda: sum(range(100)), repeats=3)
    >>> len(t.samples), t.value, t.min <= t.median <= t.max
    (3, 4950, True)
    """
    _check_counts(repeats, warmup)
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    samples: list[float] = []
    for _ in range(repeats):
        if setup is not None:
            setup()
        start = time.perf_counter()
        value = fn()
        samples.append(time.perf_counter() - start)
    return Timing(tuple(samples), value, warmup)


def once(fn: Callable[[], T]) -> Timing[T]:
    """One timed call, no warm-up (a build, a load, a run too long to repeat)."""
    return time_call(fn, repeats=1, warmup=0)


def time_interleaved(
    fns: Mapping[str, Callable[[int], object]],
    *,
    repeats: int,
    warmup: int = 1,
    shuffle: np.random.Generator | None = None,
) -> dict[str, Timing[object]]:
    """Rounds of one call of every function in turn, so that a change of machine load
    hits each alike; ``warmup`` untimed rounds first, then ``repeats`` timed ones.

    Every call of round r gets r (warm-up rounds 0 … warmup − 1, then the timed rounds),
    e.g. to pick the round's query. ``shuffle``: the order within each timed round is
    drawn from this generator (warm-up rounds run in the given order).
    """
    _check_counts(repeats, warmup)
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    values: dict[str, object] = {}
    for r in range(warmup):
        for name in names:
            fns[name](r)
    for r in range(warmup, warmup + repeats):
        order = names if shuffle is None else [names[i] for i in shuffle.permutation(len(names))]
        for name in order:
            start = time.perf_counter()
            values[name] = fns[name](r)
            samples[name].append(time.perf_counter() - start)
    return {name: Timing(tuple(samples[name]), values[name], warmup) for name in names}


class StageTimer:
    """Exclusive wall time and call count per named stage: functions wrapped here add
    their time to their stage less the time of wrapped functions they call."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._stack: list[list[Any]] = []

    def reset(self) -> None:
        self.seconds, self.calls = {}, {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            frame: list[Any] = [time.perf_counter(), 0.0]
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                elapsed = time.perf_counter() - frame[0]
                self.seconds[name] = self.seconds.get(name, 0.0) + elapsed - frame[1]
                self.calls[name] = self.calls.get(name, 0) + 1
                if self._stack:
                    self._stack[-1][1] += elapsed

        timed.__name__ = getattr(fn, "__name__", name)
        timed.__doc__ = getattr(fn, "__doc__", None)
        return timed

    @contextmanager
    def patched(self, targets: Sequence[tuple[Any, str, str]]) -> Iterator[StageTimer]:
        """Within the block, ``owner.attr`` is timed as stage ``name`` for each
        ``(owner, attr, name)``: a class's function or static method, a module's
        function, or an object's (bound) method; restored afterwards."""
        saved: list[tuple[Any, str, Any, bool]] = []
        try:
            for owner, attr, name in targets:
                if isinstance(owner, type) or inspect.ismodule(owner):
                    raw = inspect.getattr_static(owner, attr)
                    saved.append((owner, attr, raw, attr in vars(owner)))
                    if isinstance(raw, staticmethod):
                        setattr(owner, attr, staticmethod(self.wrap(name, raw.__func__)))
                    else:
                        setattr(owner, attr, self.wrap(name, raw))
                else:
                    own = attr in vars(owner)
                    saved.append((owner, attr, vars(owner).get(attr), own))
                    setattr(owner, attr, self.wrap(name, getattr(owner, attr)))
            yield self
        finally:
            for owner, attr, raw, own in reversed(saved):
                if own:
                    setattr(owner, attr, raw)
                else:
                    delattr(owner, attr)


# ---------------------------------------------------------------------------- machine
@dataclass(frozen=True, slots=True, kw_only=True)
class Machine:
    """Where and how a run was measured, recorded the same way by every script.

    ``load_before`` / ``load_after``: the 1, 5 and 15-minute load averages at the start
    and the end of the run; ``versions``: numpy, faiss and torch where installed (the
    loaded module's version where the run imported it); ``blas``: the BLAS and OpenMP
    libraries loaded at the end of the run and their thread counts (threadpoolctl);
    ``git_dirty``: tracked files differ from ``git_commit``.
    """

    cores: int | None
    usable_cores: int | None
    cpu_model: str
    load_before: list[float] | None
    load_after: list[float] | None
    python: str
    platform: str
    versions: dict[str, str]
    blas: list[dict[str, Any]]
    git_commit: str | None
    git_dirty: bool | None
    started_utc: str
    seconds: float
    command: list[str]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Machine:
        names = {f.name for f in dataclasses.fields(cls)}
        if set(data) != names:
            raise ValueError(
                f"A machine record has the fields {sorted(names)}; got {sorted(data)}."
            )
        return cls(**data)

    def summary(self) -> str:
        """One line: cores, CPU, load, BLAS threads, versions, commit, time."""
        load = "?"
        if self.load_before is not None and self.load_after is not None:
            load = f"{self.load_before[0]:.2f} → {self.load_after[0]:.2f}"
        blas = ", ".join(
            f"{b.get('internal_api', '?')} {b.get('num_threads', '?')} threads" for b in self.blas
        )
        versions = ", ".join(f"{k} {v}" for k, v in self.versions.items())
        commit = (self.git_commit or "?")[:10] + (" (dirty)" if self.git_dirty else "")
        return (
            f"machine: {self.cores} cores ({self.cpu_model}), load average {load}, "
            f"BLAS: {blas or 'none loaded'}; Python {self.python}, {versions}; commit "
            f"{commit}; {self.seconds:.1f} s from {self.started_utc}"
        )


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for module, dists in VERSIONED.items():
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(getattr(loaded, "__version__", None), str):
            out[module] = loaded.__version__
            continue
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except (ImportError, ValueError):
            continue
        for dist in dists:
            try:
                out[module] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def _blas() -> list[dict[str, Any]]:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    keep = ("user_api", "internal_api", "num_threads", "version", "prefix")
    return [{k: pool.get(k) for k in keep} for pool in threadpool_info()]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


# ---------------------------------------------------------------------------- rows
def _real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"The {name!r} field must be a real number; got {value!r}.")
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"The {name!r} field must be finite; got {value!r}.")
    return out


def _plain(value: Any) -> Any:
    """JSON's own types: numpy scalars as Python numbers, tuples as lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One measured figure against a named baseline measured in the same run.

    ``name``: what was measured, as the table shows it (with its key sizes, e.g.
    "exact noisy top-K, float, n = 1,000,000"); ``config``: the parameters it was
    measured at; ``measured`` and ``baseline_measured``: both in ``unit``;
    ``ratio`` = measured / baseline_measured (derived, never given); ``goal``: the
    target, if one was set, and ``met`` whether this run reached it; ``notes``: free
    text (the table shows it beside the measured figure).
    """

    name: str
    config: dict[str, Any] = field(default_factory=dict)
    measured: float
    unit: str
    baseline: str
    baseline_measured: float
    ratio: float = field(init=False)
    goal: str | None = None
    met: bool | None = None
    notes: str = ""

    def __post_init__(self) -> None:
        for key in ("name", "unit", "baseline"):
            value = getattr(self, key)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"A row's {key!r} must be a non-empty string; got {value!r}.")
        measured = _real("measured", self.measured)
        baseline = _real("baseline_measured", self.baseline_measured)
        if baseline == 0:
            raise ValueError(
                f"Row {self.name!r}: the baseline measured 0 {self.unit}, so there is no "
                "ratio; report a baseline that was measured."
            )
        if not isinstance(self.config, Mapping):
            raise ValueError(f"A row's 'config' must be a mapping; got {self.config!r}.")
        if self.goal is not None and not isinstance(self.goal, str):
            raise ValueError(f"A row's 'goal' must be a string or None; got {self.goal!r}.")
        if self.met is not None and (self.goal is None or not isinstance(self.met, bool)):
            raise ValueError(
                f"Row {self.name!r}: 'met' is True, False or None, and needs a 'goal'; "
                f"got met={self.met!r}, goal={self.goal!r}."
            )
        if not isinstance(self.notes, str):
            raise ValueError(f"A row's 'notes' must be a string; got {self.notes!r}.")
        object.__setattr__(self, "measured", measured)
        object.__setattr__(self, "baseline_measured", baseline)
        object.__setattr__(self, "config", _plain(self.config))
        object.__setattr__(self, "ratio", measured / baseline)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Row:
        """The row a :meth:`to_dict` wrote; its stored ratio must be measured / baseline."""
        names = {f.name for f in dataclasses.fields(cls)}
        if set(data) != names:
            raise ValueError(f"A row has the fields {sorted(names)}; got {sorted(data)}.")
        row = cls(**{k: v for k, v in data.items() if k != "ratio"})
        stored = data["ratio"]
        if not isinstance(stored, numbers.Real) or not math.isclose(
            float(stored), row.ratio, rel_tol=1e-12
        ):
            raise ValueError(
                f"Row {row.name!r}: the stored ratio {stored!r} is not measured / "
                f"baseline_measured = {row.ratio!r}."
            )
        return row


def format_number(value: float) -> str:
    """Three significant figures below 1,000, whole numbers with separators above.

    >>> [format_number(x) for x in (96.43, 0.3614, 152.2, 22846.4, 5, 0.000012)]
    ['96.4', '0.361', '152', '22,846', '5', '1.2e-05']
    """
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    text = f"{value:.3g}"
    if "e" in text and abs(value) >= 1:
        return f"{value:,.0f}"
    return text


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Row]) -> str:
    """The rows as the Markdown table of benchmarks/README.md: row, measured (with the
    notes), named baseline with its figure, ratio, goal, met?"""
    lines = [
        "| row | measured | named baseline | ratio | goal | met? |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        measured = f"{format_number(r.measured)} {r.unit}"
        if r.notes:
            measured += f" ({r.notes})"
        baseline = f"{r.baseline}: {format_number(r.baseline_measured)} {r.unit}"
        met = {True: "yes", False: "no", None: "—"}[r.met]
        cells = (r.name, measured, baseline, f"{r.ratio:.3g}×", r.goal or "—", met)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class Results:
    """A results file read back: the script's name, its machine record, its rows and
    its own details (every other key)."""

    benchmark: str
    machine: Machine
    rows: tuple[Row, ...]
    details: dict[str, Any]


def results_document(
    benchmark: str,
    machine: Machine,
    rows: Sequence[Row],
    details: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON object of a results file (the same keys for every script)."""
    details = dict(details or {})
    clash = sorted(set(details) & set(RESERVED))
    if clash:
        raise ValueError(f"The details of a results file cannot use the keys {clash}.")
    return {
        "benchmark": benchmark,
        "machine": machine.to_dict(),
        "rows": [r.to_dict() for r in rows],
        **_plain(details),
    }


def write_results(path: Path | str, document: Mapping[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def load_results(path: Path | str) -> Results:
    """A results file as :class:`Results` (every row checked against the schema)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not set(RESERVED) <= set(data):
        raise ValueError(f"{path} is not a benchmark results file (keys {list(RESERVED)}).")
    return Results(
        benchmark=str(data["benchmark"]),
        machine=Machine.from_dict(data["machine"]),
        rows=tuple(Row.from_dict(r) for r in data["rows"]),
        details={k: v for k, v in data.items() if k not in RESERVED},
    )


# ---------------------------------------------------------------------------- runs
class BenchParser(argparse.ArgumentParser):
    """An argument parser with the flags every benchmark script has; see
    :func:`bench_parser`."""

    def __init__(
        self,
        description: str | None,
        *,
        repeats: int | None,
        quick_repeats: int | None,
        repeats_help: str,
        repeats_aliases: Sequence[str],
    ) -> None:
        super().__init__(
            description=description, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        self.full_repeats = repeats
        self.quick_repeats = repeats if quick_repeats is None else quick_repeats
        self.add_argument(
            "--quick", action="store_true", help="small sizes, seconds (what the tests run)"
        )
        self.add_argument(
            "--json",
            type=Path,
            default=None,
            metavar="PATH",
            help="write the rows, the machine record and the details here",
        )
        default = "" if repeats is None else f" (default {repeats})"
        if self.quick_repeats != repeats:
            default = f" (default {repeats}; {self.quick_repeats} with --quick)"
        self.add_argument(
            "--repeats",
            *repeats_aliases,
            dest="repeats",
            type=int,
            default=None,
            metavar="N",
            help=repeats_help + default,
        )

    def parse(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        """``parse_args``, with ``repeats`` set from ``--quick`` where not given."""
        args = self.parse_args(argv)
        if args.repeats is None:
            args.repeats = self.quick_repeats if args.quick else self.full_repeats
        if args.repeats is not None and args.repeats < 1:
            self.error(f"--repeats must be at least 1; got {args.repeats}")
        return args


def bench_parser(
    description: str | None,
    *,
    repeats: int | None,
    quick_repeats: int | None = None,
    repeats_help: str = "timed repeats of each measurement",
    repeats_aliases: Sequence[str] = (),
) -> BenchParser:
    """A parser with ``--quick``, ``--json PATH`` and ``--repeats N`` (default
    ``repeats``, or ``quick_repeats`` with ``--quick``; None: not set unless given;
    ``repeats_aliases`` are other spellings a script kept, e.g. ``--rounds``). The script
    adds its own arguments."""
    return BenchParser(
        description,
        repeats=repeats,
        quick_repeats=quick_repeats,
        repeats_help=repeats_help,
        repeats_aliases=repeats_aliases,
    )


class Session:
    """One run of a benchmark script, from :func:`start` to :meth:`finish`."""

    def __init__(self, benchmark: str, args: argparse.Namespace, command: list[str]) -> None:
        self.benchmark = benchmark
        self.args = args
        self.command = command
        self.started_utc = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        self.load_before = _load_average()
        self._start = time.perf_counter()

    @property
    def quick(self) -> bool:
        return bool(self.args.quick)

    @property
    def repeats(self) -> int:
        return int(self.args.repeats)

    def machine(self) -> Machine:
        """The machine record as of now (the run's end)."""
        status = _git("status", "--porcelain", "--untracked-files=no")
        commit = _git("rev-parse", "HEAD")
        try:
            usable: int | None = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            usable = None
        return Machine(
            cores=os.cpu_count(),
            usable_cores=usable,
            cpu_model=_cpu_model(),
            load_before=self.load_before,
            load_after=_load_average(),
            python=platform.python_version(),
            platform=platform.platform(),
            versions=_versions(),
            blas=_blas(),
            git_commit=commit.strip() if commit else None,
            git_dirty=None if status is None else bool(status.strip()),
            started_utc=self.started_utc,
            seconds=round(time.perf_counter() - self._start, 3),
            command=list(self.command),
        )

    def finish(
        self,
        rows: Sequence[Row],
        details: Mapping[str, Any] | None = None,
        *,
        table: bool = True,
    ) -> dict[str, Any]:
        """Completes the machine record, prints the rows as a Markdown table (``table``)
        and the machine's summary, writes the results file with ``--json``, and returns
        its JSON object."""
        machine = self.machine()
        document = results_document(self.benchmark, machine, rows, details)
        if table and rows:
            print("\n" + markdown_table(rows))
        print(machine.summary(), flush=True)
        if self.args.json is not None:
            write_results(self.args.json, document)
        return document


def start(benchmark: str, parser: BenchParser, argv: Sequence[str] | None = None) -> Session:
    """Parses ``argv`` (the command line's by default) and notes the run's start: the
    UTC time, the load average and the command (``benchmarks/bench_<benchmark>.py``
    and its arguments)."""
    args = parser.parse(argv)
    given = list(sys.argv[1:] if argv is None else argv)
    return Session(benchmark, args, [f"benchmarks/bench_{benchmark}.py", *given])
