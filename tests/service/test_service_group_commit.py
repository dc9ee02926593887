"""The service's witness store group-commits concurrent puts: each put returns once its
witness is durable in the state database, and a failed shared commit fails every put of
it and stores none of them (so no record is ever appended without its witness)."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import Any

from ragprivacy.audit import RecordWitness
from ragprivacy.service import ServiceState
from ragprivacy.service.state import StateWitnessStore


def _witness(i: int) -> RecordWitness:
    return RecordWitness(
        query_text=f"query {i}",
        query_fixed="00000000",
        scored_tenant="t",
        noise_digest=f"{i:064x}",
        positions=(i,),
        ids=(f"d{i}",),
        contents=("",),
        openings=((i, "00", (), "00"),),
        salt=f"{i:064x}",
    )


def _put_all(store: StateWitnessStore, n: int, held: threading.Event) -> list[Any]:
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            store.put(f"proof-{i}", _witness(i))
        except BaseException as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    threads[0].start()
    assert held.wait(60)  # the first put is inside its commit: the others queue behind it
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join()
    return out


def _hold_first(store: StateWitnessStore, others: int, fail_second: bool) -> threading.Event:
    """Wrap the store's batch commit: the first waits until ``others`` puts queued; the
    second fails before writing (``fail_second``) as a disk error would."""
    group = store._group
    commit = group._commit
    held = threading.Event()
    calls = [0]

    def wrapped(items: list[Any]) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            held.set()
            end = time.monotonic() + 60  # a hang guard, not a timing assertion
            while group.queued < others:
                assert time.monotonic() < end, "the puts never queued"
                time.sleep(0.001)
        elif calls[0] == 2 and fail_second:
            raise sqlite3.OperationalError("disk I/O error")
        return commit(items)

    group._commit = wrapped
    return held


def test_concurrent_witness_puts_share_a_commit_and_are_all_stored(tmp_path) -> None:
    state = ServiceState(tmp_path / "state")
    store = StateWitnessStore(state, "W1")
    n = 16
    got = _put_all(store, n, _hold_first(store, n - 1, fail_second=False))
    assert got == [None] * n
    assert store._group.commits == 2
    again = StateWitnessStore(ServiceState(tmp_path / "state", create=False), "W1")
    for i in range(n):  # durable: read back through another connection
        assert again.get(f"proof-{i}") == _witness(i)


def test_a_failed_shared_commit_fails_every_put_of_it_and_stores_none(tmp_path) -> None:
    state = ServiceState(tmp_path / "state")
    store = StateWitnessStore(state, "W1")
    n = 10
    got = _put_all(store, n, _hold_first(store, n - 1, fail_second=True))
    assert got[0] is None
    assert all(isinstance(g, sqlite3.OperationalError) for g in got[1:])
    assert store.get("proof-0") == _witness(0)
    assert all(store.get(f"proof-{i}") is None for i in range(1, n))
    store.put("proof-1", _witness(1))  # the store goes on after the failure
    assert store.get("proof-1") == _witness(1)
