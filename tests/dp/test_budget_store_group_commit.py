"""Group commit of the SQLite budget store: concurrent charges share one transaction,
each checked as if it had committed alone (never an overspend), each durable when it
returns; a failed commit charges none of the batch.

A shared commit is forced deterministically: the first commit is held inside its
transaction until the other charges have queued behind it, so the next commit takes them
all. No assertion depends on timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragprivacy.dp import DocumentBudgetExhaustedError, SqliteBudgetStore
from ragprivacy.errors import ConfigError

_DEADLINE_S = 60.0  # a hang guard only


def _wait_until(cond: Callable[[], bool]) -> None:
    end = time.monotonic() + _DEADLINE_S
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("the charges never queued behind the held commit")
        time.sleep(0.001)


def _held(
    store: SqliteBudgetStore, others: int, fail_second: bool = False
) -> tuple[list[int], threading.Event]:
    """Hold the first commit until ``others`` charges queue; return the commits counted
    and an event set once the first commit is being held."""
    calls: list[int] = []
    group = store._group
    assert group is not None

    def hook() -> None:
        calls.append(1)
        if len(calls) == 1:
            entered.set()
            _wait_until(lambda: group.queued >= others)
        elif len(calls) == 2 and fail_second:
            raise OSError("disk full")

    entered = threading.Event()
    store._before_commit = hook
    return calls, entered


def _charge_all(
    store: SqliteBudgetStore, jobs: list[dict[str, Any]], entered: threading.Event
) -> list[Any]:
    """Run one charge per thread: the first alone; the rest queue behind its held commit
    one at a time, in the order given (queue order is commit order)."""
    out: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            out[i] = store.charge(**jobs[i])
        except Exception as exc:  # the outcome under test
            out[i] = exc

    first = threading.Thread(target=run, args=(0,))
    first.start()
    group = store._group
    assert group is not None
    _wait_until(lambda: entered.is_set() or not first.is_alive())
    assert entered.is_set(), f"the first charge ended before its commit: {out[0]!r}"
    rest = [threading.Thread(target=run, args=(i,)) for i in range(1, len(jobs))]
    for i, t in enumerate(rest, start=1):
        t.start()
        # (once the held commit is released, all have queued, and the next commit may
        # already have taken them: commits counts it before the queue empties)
        _wait_until(lambda i=i: group.queued >= i or group.commits >= 1)
    for t in [first, *rest]:
        t.join(_DEADLINE_S)
    return out


def test_queued_charges_share_one_commit_and_never_overspend(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.sqlite", capacity=[1.0, 2.0])
    n = 24
    calls, entered = _held(store, n - 1)
    # every charge asks document "d" for 0.1 in both orders: 10 fit (capacity 1.0)
    jobs = [{"doc_ids": ["d", f"own{i}"], "amount": [0.1, 0.1]} for i in range(n)]
    out = _charge_all(store, jobs, entered)

    assert len(calls) == 2  # the held commit, then one for all 23 that queued
    ok = [r for r in out if not isinstance(r, BaseException)]
    refused = [r for r in out if isinstance(r, DocumentBudgetExhaustedError)]
    assert len(ok) == 10 and len(refused) == n - 10
    assert all(r.exhausted == ("d",) for r in refused)  # their own documents could pay
    reopened = SqliteBudgetStore(tmp_path / "b.sqlite")  # what is durable
    np.testing.assert_allclose(reopened.spent(["d"]), [[1.0, 1.0]])
    own = reopened.spent([f"own{i}" for i in range(n)]).sum(axis=0)
    np.testing.assert_allclose(own, [1.0, 1.0])  # refused charges left nothing
    assert sorted(r.charge_id for r in reopened.charges()) == sorted(r.charge_id for r in ok)


def test_a_retry_in_the_same_batch_is_a_replay_and_a_changed_retry_is_refused(
    tmp_path: Path,
) -> None:
    store = SqliteBudgetStore(tmp_path / "b.sqlite", capacity=1.0)
    _, entered = _held(store, 3)
    jobs = [
        {"doc_ids": ["x"], "amount": 0.1},
        {"doc_ids": ["a", "b"], "amount": 0.5, "charge_id": "c1"},
        {"doc_ids": ["a", "b"], "amount": 0.5, "charge_id": "c1"},
        {"doc_ids": ["a"], "amount": 0.5, "charge_id": "c1"},
    ]
    out = _charge_all(store, jobs, entered)
    assert out[1].replayed is False and out[2].replayed is True
    assert out[2].charge_id == out[1].charge_id == "c1"
    assert isinstance(out[3], ConfigError)  # the same id for a different request
    np.testing.assert_allclose(store.spent(["a", "b"]), [[0.5], [0.5]])  # charged once


def test_a_failed_shared_commit_charges_none_of_its_batch(tmp_path: Path) -> None:
    store = SqliteBudgetStore(tmp_path / "b.sqlite", capacity=1.0)
    _, entered = _held(store, 5, fail_second=True)
    jobs = [{"doc_ids": [f"d{i}"], "amount": 0.25} for i in range(6)]
    out = _charge_all(store, jobs, entered)
    assert not isinstance(out[0], BaseException)  # the held commit went through
    assert all(isinstance(r, OSError) for r in out[1:])
    reopened = SqliteBudgetStore(tmp_path / "b.sqlite")
    assert reopened.spent([f"d{i}" for i in range(6)]).ravel().tolist() == [0.25] + [0.0] * 5
    assert [r.charge_id for r in reopened.charges()] == [out[0].charge_id]


@pytest.mark.parametrize("group_commit", [True, False])
def test_many_threads_on_one_document_get_exactly_its_capacity(
    tmp_path: Path, group_commit: bool
) -> None:
    store = SqliteBudgetStore(tmp_path / "b.sqlite", capacity=5.0, group_commit=group_commit)
    results: list[bool] = []
    lock = threading.Lock()

    def run() -> None:
        for _ in range(4):
            try:
                store.charge(["shared"], 0.5)
                ok = True
            except DocumentBudgetExhaustedError:
                ok = False
            with lock:
                results.append(ok)

    threads = [threading.Thread(target=run) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(_DEADLINE_S)
    assert len(results) == 64 and sum(results) == 10
    assert store.spent(["shared"])[0, 0] == pytest.approx(5.0)
