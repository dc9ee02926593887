"""The benchmark smoke tests' loader: ``load_bench(name)`` imports
``benchmarks/bench_<name>.py`` as a module, and ``run_quick(name, tmp_path)`` runs it with
``--quick --json`` (in this process, or as a command) and returns its results file read
back, every row checked against the harness's schema."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
if str(BENCHMARKS) not in sys.path:  # the scripts import ``_harness`` from there
    sys.path.insert(0, str(BENCHMARKS))

import _harness as harness  # noqa: E402
from _harness import Results, Row, load_results  # noqa: E402

__all__ = ["BENCHMARKS", "check_rows", "harness", "load_bench", "run_quick"]


def load_bench(name: str) -> ModuleType:
    """``benchmarks/bench_<name>.py`` as a module, loaded once per session."""
    key = f"ragprivacy_bench_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, BENCHMARKS / f"bench_{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module  # dataclasses resolve their module by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module


def check_rows(rows: Sequence[Row]) -> None:
    """Rows as the schema has them: a name, a unit, a named baseline measured in the
    same run, the ratio measured / baseline, and ``met`` only beside a goal."""
    assert rows, "a benchmark reports at least one row"
    for row in rows:
        assert row.name.strip() and row.unit.strip() and row.baseline.strip(), row
        assert row.ratio == pytest.approx(row.measured / row.baseline_measured, rel=1e-9)
        assert row.met is None or row.goal, row
        assert Row.from_dict(json.loads(json.dumps(row.to_dict()))) == row


def run_quick(
    name: str,
    tmp_path: Path,
    *args: str,
    command: bool = False,
    timeout: float = 900,
) -> Results:
    """``bench_<name>.py --quick --json PATH *args``, in this process (its ``main``) or,
    with ``command``, as ``python benchmarks/bench_<name>.py ...``; the results file read
    back (``load_results``) after checking its rows and, in process, that it holds what
    ``main`` returned."""
    path = tmp_path / f"{name}.json"
    argv = ["--quick", "--json", str(path), *args]
    if command:
        done = subprocess.run(
            [sys.executable, str(BENCHMARKS / f"bench_{name}.py"), *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    else:
        document = load_bench(name).main(argv)
        assert json.loads(path.read_text()) == json.loads(json.dumps(document))
    results = load_results(path)
    assert results.benchmark == name
    assert results.machine.command[0] == f"benchmarks/bench_{name}.py"
    assert "--quick" in results.machine.command
    check_rows(results.rows)
    return results
