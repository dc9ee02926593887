"""Stopping ``ragprivacy run``: Ctrl-C and SIGTERM end a pooled run within seconds, keep
the finished cells, say how to resume, leave no process behind, and the resumed run
gives the results of an uninterrupted one."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests._load import slowdown

from ragprivacy.cli import main
from ragprivacy.eval import parse_config, run_config

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").is_file() or sys.platform != "linux",
    reason="finds the run's child processes through /proc",
)

# six cells (one per eps_acc row) of about half a second each on one core, in two
# workers: long enough that a signal sent when the first cell is written finds four or
# more still to run, short enough that the reference run and the resumed cells are cheap
GRID = """
name: stoppable
seed: 3
workers: 2
corpora: {}
models: {embedder: lsa, index: exact, generator: reference}
experiments:
  - type: collusion
    mechanism: scalar
    eps_acc: [1, 2, 3, 4, 5, 6]
    coalition_sizes: [1, 2]
    n: 1000
    trials: 200000
"""


def _results(cells: list[dict[str, Any]]) -> dict[float, Any]:
    """Each cell's metrics by its eps_acc row (a sweep's wall time is not a result)."""
    return {
        c["cell"]["eps_acc"]: {k: v for k, v in c["result"].items() if k != "seconds"}
        for c in cells
    }


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[float, Any]:
    out = tmp_path_factory.mktemp("whole")
    result = run_config(parse_config(_grid()), out, workers=1, progress=False)
    return _results(result.results["cells"])


def _grid() -> dict[str, Any]:
    import yaml

    loaded: dict[str, Any] = yaml.safe_load(GRID)
    return loaded


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a live process, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0]


def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            parents[int(entry.name)] = st[0]
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _alive(pids: set[int]) -> set[int]:
    return {pid for pid in pids if (st := _stat(pid)) is not None and st[1] != "Z"}


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _start_run(tmp_path: Path, out: Path) -> subprocess.Popen[str]:
    """``ragprivacy run`` of :data:`GRID` in its own process group, as a terminal's
    foreground job."""
    config = tmp_path / "grid.yaml"
    config.write_text(GRID)
    return subprocess.Popen(
        [sys.executable, "-m", "ragprivacy", "run", str(config), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-to-the-process-group", "sigterm-to-the-process"],
)
def test_a_stopped_run_keeps_its_cells_and_resumes(
    signum: signal.Signals,
    to_group: bool,
    uninterrupted: dict[float, Any],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    children: set[int] = set()
    proc = _start_run(tmp_path, out)
    try:
        deadline = time.monotonic() + 240
        while not list(out.glob("cells/*.json")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no cell finished in 240 s"
            time.sleep(0.05)
        children = _descendants(proc.pid)
        assert len(children) >= 2  # the pool's workers (and multiprocessing's helpers)
        sent = time.monotonic()
        if to_group:  # what Ctrl-C in a terminal does
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        _stdout, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        request.addfinalizer(lambda: _kill(_alive(children)))  # if the test fails

    assert proc.returncode == 128 + signum, stderr
    assert took < 5 * slowdown(), f"took {took:.1f} s to stop"
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert f"Interrupted by {signum.name}" in stderr
    gone_by = time.monotonic() + 5
    while _alive(children) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not _alive(children), "processes of the stopped run are still running"

    kept = {p.name: p.read_text() for p in out.glob("cells/*.json")}
    assert 1 <= len(kept) < 6 and f"{len(kept)} of 6 cells finished" in stderr
    assert not (out / "results.json").exists()

    # the hint is a command that resumes the run (here in this process, on one worker)
    hint = stderr.split("Resume with: ", 1)[1].strip()
    argv = shlex.split(hint)
    assert argv[:2] == ["ragprivacy", "run"]
    assert main([*argv[1:], "--workers", "1", "--no-progress"]) == 0, capsys.readouterr().err
    for name, text in kept.items():  # finished cells were reused, not recomputed
        assert (out / "cells" / name).read_text() == text
    resumed = json.loads((out / "results.json").read_text())
    assert _results(resumed["cells"]) == uninterrupted


def _workers(root: int) -> set[int]:
    """The run's spawned pool workers (by their command line), once they have started."""
    found = set()
    for pid in _descendants(root):
        with contextlib.suppress(OSError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
    return found


def test_ctrl_c_while_the_workers_are_starting_is_one_clean_line(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A worker that is still importing when Ctrl-C reaches the process group prints no
    traceback of its own (it starts with SIGINT ignored); the run stops cleanly."""
    workers: set[int] = set()
    proc = _start_run(tmp_path, tmp_path / "out")
    try:
        deadline = time.monotonic() + 120
        while len(workers := _workers(proc.pid)) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the pool's workers did not start in 120 s"
            time.sleep(0.01)
        # past the parent's few milliseconds of starting them, well inside the seconds a
        # worker spends importing
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        _stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        request.addfinalizer(lambda: _kill(_alive(workers)))

    assert proc.returncode == 128 + signal.SIGINT, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert "Interrupted by SIGINT" in stderr
    gone_by = time.monotonic() + 5
    while _alive(workers) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not _alive(workers)
