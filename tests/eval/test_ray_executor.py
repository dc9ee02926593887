"""``executor: ray``: cells as Ray tasks on a local Ray instance give the process pool's
results bit for bit, resume like it, read and fill the run's generation cache, stop on
Ctrl-C keeping the finished cells, and refuse bad settings in one line."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from ragprivacy.errors import ConfigError, RunInterruptedError
from ragprivacy.eval import GenerationCache, RaySpec, parse_config, run_config

# Ray 2.40 (the lowest version allowed) leaves its session log files open when it starts
# a local instance and lets go of its processes' handles before they exit when it stops
# it; later versions do neither
pytestmark = [
    pytest.mark.filterwarnings(
        r"ignore:unclosed file <_io.TextIOWrapper name='[^']*/logs/:ResourceWarning"
    ),
    pytest.mark.filterwarnings(r"ignore:subprocess \d+ is still running:ResourceWarning"),
]

QA = {
    "name": "ray-test",
    "seed": 9,
    "workers": 2,
    "corpora": {"k": {"synthetic": "knowledge", "n": 30}},
    "models": {"background_n": 20},
    "experiments": [
        {"type": "qa", "corpus": "k", "systems": ["non-rag", "rag"], "k": 3, "questions": 8},
        {"type": "qa", "corpus": "k", "systems": ["rag"], "k": 2, "questions": 6, "hops": [2]},
    ],
}

# six collusion cells of about a second each: slow enough to stop half-way
GRID = {
    "name": "stoppable",
    "seed": 3,
    "workers": 2,
    "corpora": {},
    "experiments": [
        {
            "type": "collusion",
            "mechanism": "scalar",
            "eps_acc": [1, 2, 3, 4, 5, 6],
            "coalition_sizes": [1, 2],
            "n": 1000,
            "trials": 200000,
        }
    ],
}


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """One local Ray instance for the module, every file of it in a short temporary
    directory (unix socket paths are limited to 107 bytes), token authentication off
    (it would write ~/.ray), no usage statistics, no dashboard; stopped and removed
    afterwards."""
    temp = tempfile.mkdtemp(prefix="r")
    settings = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            _temp_dir=temp,
            log_to_driver=False,
            logging_level="WARNING",
        )
        yield
    finally:
        ray.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(temp, ignore_errors=True)


def _on_ray(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, "executor": "ray"}


def _cells(out: Path) -> dict[str, Any]:
    """Each checkpoint's cell, seed and result, by file name (wall time dropped)."""
    found = {}
    for path in sorted((out / "cells").glob("*.json")):
        payload = json.loads(path.read_text())
        found[path.name] = {k: v for k, v in payload.items() if k != "seconds"}
    return found


def _results(out: Path) -> list[Any]:
    saved = json.loads((out / "results.json").read_text())
    return [{k: v for k, v in c.items() if k != "seconds"} for c in saved["cells"]]


def _cache_rows(out: Path) -> dict[str, str]:
    with sqlite3.connect(out / ".cache" / "generations.sqlite") as conn:
        return dict(conn.execute("SELECT key, value FROM calls"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The QA grid run once with the pool and once as Ray tasks (tests copy them)."""
    base = tmp_path_factory.mktemp("runs")
    run_config(parse_config(QA), base / "pool", workers=2, progress=False)
    run_config(parse_config(_on_ray(QA)), base / "ray", progress=True)
    return {"pool": base / "pool", "ray": base / "ray"}


def _mtimes(out: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}


def test_ray_tasks_give_the_pools_results_bit_for_bit(runs: dict[str, Path]) -> None:
    saved = json.loads((runs["ray"] / "results.json").read_text())
    assert saved["settings"]["executor"] == "ray"
    assert len(saved["cells"]) == 3
    # the same checkpoints (names, seeds, every metric) and the same results.json cells
    assert _cells(runs["ray"]) == _cells(runs["pool"])
    assert _results(runs["ray"]) == _results(runs["pool"])
    # every generator call the workers made came back into the run's own cache file
    assert _cache_rows(runs["ray"]) == _cache_rows(runs["pool"])
    assert len(_cache_rows(runs["ray"])) > 0


def test_resume_runs_only_the_unfinished_cells(runs: dict[str, Path], tmp_path: Path) -> None:
    """A partial run (here the pool's, one cell short) resumed on Ray runs that cell
    only, and the results are the uninterrupted run's; a finished run makes no cell."""
    out = tmp_path / "run"
    shutil.copytree(runs["pool"], out)
    files = sorted((out / "cells").glob("*.json"))
    assert len(files) == 3
    files[1].unlink()  # as if the run had been stopped before this cell finished
    kept = _mtimes(out)
    cfg = parse_config(_on_ray(QA))
    run_config(cfg, out, progress=False)
    after = _mtimes(out)
    assert set(after) == {p.name for p in files}
    assert all(after[name] == t for name, t in kept.items())  # none rewritten
    assert _results(out) == _results(runs["pool"])
    run_config(cfg, out, progress=False)
    assert _mtimes(out) == after


def _plant(value: str) -> str:
    entry = json.loads(value)
    if isinstance(entry, dict) and "text" in entry:  # a completion
        entry = {**entry, "text": "planted"}
    return json.dumps(entry)


def test_workers_answer_from_the_runs_cache(runs: dict[str, Path], tmp_path: Path) -> None:
    """A rerun cell's generator calls come from the run's cache file (shipped to the
    workers), not from the generator: answers planted in the file reach its results."""
    out = tmp_path / "run"
    shutil.copytree(runs["ray"], out)
    with sqlite3.connect(out / ".cache" / "generations.sqlite") as conn:
        rows = list(conn.execute("SELECT key, value FROM calls"))
        planted = {k: _plant(v) for k, v in rows}
        conn.executemany(
            "UPDATE calls SET value = ? WHERE key = ?", [(v, k) for k, v in planted.items()]
        )
    for p in (out / "cells").glob("*.json"):
        p.unlink()
    rerun = run_config(parse_config(_on_ray(QA)), out, progress=False).results["cells"]
    assert [c["result"] for c in rerun] != [c["result"] for c in _results(runs["ray"])]
    after = _cache_rows(out)
    assert {k: after[k] for k in planted} == planted  # answered from the file, not redone


def test_a_generation_cache_snapshot_round_trips(tmp_path: Path) -> None:
    cache = GenerationCache(tmp_path / "g.sqlite")
    assert cache.snapshot() is None
    cache.put_many({"a": {"text": "x"}, "b": [1, 2]})
    copy = GenerationCache.in_memory(cache.snapshot())
    assert copy.get_many(["a", "b", "c"]) == {"a": {"text": "x"}, "b": [1, 2]}
    sent: list[dict[str, Any]] = []
    copy.on_put = sent.append
    copy.put_many({"c": 3})
    assert sent == [{"c": 3}] and len(copy) == 3 and len(cache) == 2
    assert not list(tmp_path.glob("*memory*"))  # the copy wrote no file


def test_ctrl_c_cancels_the_tasks_and_keeps_finished_cells(tmp_path: Path) -> None:
    # cells of a few seconds each: after the first two, two more rounds of cells are
    # left, time enough for the signal to land while the run is still running them (a
    # busy machine only makes the cells slower, and the margin wider)
    slow = {**GRID["experiments"][0], "trials": 600_000}
    cfg = parse_config(_on_ray({**GRID, "experiments": [slow]}))
    cells = tmp_path / "cells"

    def interrupt_after_two_cells() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(list(cells.glob("*.json"))) < 2:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    # The SIGINT must land while run_config runs: one landing after it returned would
    # raise KeyboardInterrupt in pytest itself and end the whole session. So the test's
    # handler raises only while the run is in progress, and records a late signal.
    inside, late = threading.Event(), []

    def handler(signum: int, frame: Any) -> None:
        if inside.is_set():
            raise KeyboardInterrupt
        late.append(signum)

    previous = signal.signal(signal.SIGINT, handler)
    stopper = threading.Thread(target=interrupt_after_two_cells, daemon=True)
    caught: BaseException | None = None
    try:
        inside.set()
        stopper.start()
        try:
            run_config(cfg, tmp_path, progress=False)
        except (RunInterruptedError, KeyboardInterrupt) as exc:
            caught = exc
        finally:
            inside.clear()
        stopper.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert isinstance(caught, RunInterruptedError), f"not stopped by the runner: {caught!r}"
    assert re.match(r"Interrupted by SIGINT: \d of 6 cells", str(caught)), caught
    assert "\n" not in str(caught)
    kept = {p.name: p.stat().st_mtime_ns for p in cells.glob("*.json")}
    assert 2 <= len(kept) < 6 and caught.finished == len(kept)
    # Ray is still usable (the test's connection stays open) and resuming finishes
    # the run without redoing the kept cells
    resumed = run_config(cfg, tmp_path, progress=False)
    assert len(resumed.results["cells"]) == 6
    assert all((cells / name).stat().st_mtime_ns == t for name, t in kept.items())


def _with_env(marker: str) -> set[int]:
    """Live processes whose environment holds ``marker`` (Ray rewrites its workers'
    command lines, not their environment)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def _cmdline(pid: int) -> str:
    """A process's command line, for a failure message."""
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "(gone)"


class _SlowConnect:
    """A stand-in for the ``ray`` module whose connection takes a while and meets the
    user's Ctrl-C half-way."""

    def __init__(self) -> None:
        self.connected = self.shut = False

    def is_initialized(self) -> bool:
        return self.connected

    def init(self, address: str, **_options: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the instance starts
        time.sleep(0.3)
        self.connected = True  # the connection was made in full

    def shutdown(self) -> None:
        self.shut = True


def test_a_ctrl_c_while_ray_connects_stops_the_run_once_connected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The signal is neither lost (the run would go on) nor raised inside ``ray.init``
    (which would leave a half-started instance): it stops the run right after the
    connection, which is then closed."""
    from ray.util import queue

    from ragprivacy.eval import ray_executor

    fake = _SlowConnect()
    monkeypatch.setattr(ray_executor, "_import_ray", lambda: fake)

    def no_queue(*_a: Any, **_k: Any) -> None:
        raise AssertionError("the run went on after the Ctrl-C")

    monkeypatch.setattr(queue, "Queue", no_queue)
    inside, late = threading.Event(), []

    def handler(signum: int, frame: Any) -> None:  # raise only inside the run (see above)
        if inside.is_set():
            raise KeyboardInterrupt
        late.append(signum)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        inside.set()
        with pytest.raises(KeyboardInterrupt):
            ray_executor.run_ray(
                RaySpec(address="local"), 1, [], {}, print, print, None, None, None
            )
        inside.clear()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert fake.connected and fake.shut and not late
    assert signal.getsignal(signal.SIGINT) is previous
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_ctrl_c_stops_a_cli_run_on_the_instance_it_started(tmp_path: Path) -> None:
    """``ragprivacy run`` with ``address: local`` starts Ray for the run: Ctrl-C to the
    process group ends it with the runner's one line, keeps the finished cells and leaves
    no Ray process behind."""
    temp = tempfile.mkdtemp(prefix="r")
    marker = f"RAY_TMPDIR={temp}"
    config = tmp_path / "grid.yaml"
    settings = {"executor": "ray", "ray": {"address": "local", "num_cpus": 2}}
    config.write_text(json.dumps({**GRID, **settings}))  # YAML reads JSON
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # the module's Ray
    env["RAY_TMPDIR"] = temp
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragprivacy", "run", str(config), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    left: set[int] = set()
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            if len(list((out / "cells").glob("*.json"))) >= 2:
                break
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        # Ray's shutdown stops its own processes at once; a worker the raylet was still
        # starting finds its node gone only when it connects, which Ray retries for up to
        # a minute (its GCS reconnect timeout) — on a loaded machine that is when it exits
        deadline = time.monotonic() + 90
        while (left := _with_env(marker)) and time.monotonic() < deadline:
            time.sleep(0.2)
        lingering = {p: _cmdline(p) for p in left}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in _with_env(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 130, err
    assert err.startswith("stopped: Interrupted by SIGINT: ") and err.count("\n") == 1, err
    kept = len(list((out / "cells").glob("*.json")))
    assert 2 <= kept < 6 and f"{kept} of 6 cells finished" in err
    assert not left, lingering


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"executor": "dask"}, "The 'executor' must be one of 'process', 'ray'; got 'dask'"),
        ({"ray": {"address": "auto"}}, "apply to executor: ray only"),
        ({"executor": "ray", "ray": {"address": "head"}}, "'HOST:PORT' or 'ray://HOST:PORT'"),
        ({"executor": "ray", "ray": {"address": "ray://head:port"}}, "got 'ray://head:port'"),
        ({"executor": "ray", "ray": {"address": "auto", "num_cpus": 4}}, "has its own"),
        ({"executor": "ray", "ray": {"num_cpus": 0}}, "'num_cpus' parameter must be"),
        ({"executor": "ray", "ray": {"cpus_per_cell": -1}}, "'cpus_per_cell' parameter"),
        ({"executor": "ray", "ray": {"adress": "auto"}}, "did you mean 'address'"),
    ],
)
def test_a_bad_executor_setting_is_one_line(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as err:
        parse_config({**QA, **settings})
    assert "\n" not in str(err.value)


def test_cluster_addresses_are_accepted() -> None:
    for address in ("local", "auto", "10.0.0.5:6379", "ray://head.example:10001"):
        assert RaySpec(address=address).address == address


def test_bench_ray_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Smoke run of ``benchmarks/bench_ray.py --quick`` (on this module's Ray)."""
    import importlib.util

    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_ray.py"
    spec = importlib.util.spec_from_file_location("ragprivacy_bench_ray", bench)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "ray.json"
    result = module.main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert result["same_results"] is True and result["cells"] == 4
    assert result["pool_s"] > 0 and result["ray_s"] > 0
    assert "same results: True" in capsys.readouterr().out
