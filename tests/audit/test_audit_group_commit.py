"""Group commit of the durable ledger: concurrent appends share one transaction, each
returns only once durable, and a failed commit fails (and writes nothing of) every append
it held.

The tests force a shared commit deterministically: the first commit is held inside its
transaction until every other writer has queued behind it, so the next commit must take
them all. No assertion depends on timing.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ragprivacy._sqlite import GroupCommit
from ragprivacy.audit import (
    AuditPolicy,
    AuditWindow,
    MerkleLog,
    QueryRecord,
    Verifier,
    verify_inclusion,
)
from ragprivacy.audit.merkle import leaf_hash, root_from_leaf_hashes
from ragprivacy.errors import ConfigError

_DEADLINE_S = 60.0  # a hang guard only: never reached unless the group commit deadlocks


def _wait_until(cond: Callable[[], bool]) -> None:
    end = time.monotonic() + _DEADLINE_S
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("the writers never queued behind the held commit")
        time.sleep(0.001)


class _HoldFirstCommit:
    """A before-commit hook: the first commit says it is inside (``entered``) and waits
    until ``others`` writers queued behind it; every commit then calls
    ``then(commit_number)`` (which may raise to fail it)."""

    def __init__(self, queued: Callable[[], int], others: int, then: Callable[[int], None]) -> None:
        self.queued, self.others, self.then = queued, others, then
        self.calls = 0
        self.entered = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            _wait_until(lambda: self.queued() >= self.others)
        self.then(self.calls)


def _threads(
    n: int, work: Callable[[int], Any], first_inside: threading.Event | None = None
) -> list[Any]:
    """Run ``work(i)`` in n threads; the others start once the first is inside its
    commit (``first_inside``), so that it leads the first commit alone."""
    out: list[Any] = [None] * n

    def run(i: int) -> None:
        try:
            out[i] = work(i)
        except BaseException as exc:  # collected: the test checks each outcome
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    threads[0].start()  # the first leads and is held; the others queue behind it
    if first_inside is not None:
        assert first_inside.wait(_DEADLINE_S)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join()
    return out


def test_group_commit_takes_everything_queued_meanwhile_in_order_and_bounded() -> None:
    batches: list[list[int]] = []
    started = threading.Event()
    group: GroupCommit[int, int] | None = None

    def commit(items: list[int]) -> list[int]:
        assert group is not None
        if not batches:
            started.set()
            _wait_until(lambda: group.queued >= 9)
        batches.append(items)
        return [10 * x for x in items]

    group = GroupCommit(commit, max_batch=4)
    first = threading.Thread(target=lambda: group.run(0))
    first.start()
    started.wait(_DEADLINE_S)
    got = _threads(9, lambda i: group.run(i + 1))
    first.join()
    assert got == [10 * (i + 1) for i in range(9)]  # each writer its own outcome
    assert batches[0] == [0]
    assert [len(b) for b in batches[1:]] == [4, 4, 1]  # bounded by max_batch
    assert sorted(x for b in batches[1:] for x in b) == list(range(1, 10))
    assert group.commits == 4
    with pytest.raises(ConfigError, match="max_batch"):
        GroupCommit(commit, max_batch=0)


def test_concurrent_appends_share_a_commit_and_guards_see_the_batch(tmp_path) -> None:
    """24 threads append under a capacity guard (at most 10 leaves): the guards run in
    turn on the batch so far, so exactly 10 are appended, each writer gets its own index,
    and the ledger holds exactly their records and verifies."""
    path = tmp_path / "ledger.sqlite"
    log = MerkleLog(path)
    assert log._group is not None
    n, cap = 24, 10
    hold = _HoldFirstCommit(lambda: log._group.queued, n - 1, lambda _: None)
    log._before_commit = hold

    class Full(Exception):
        pass

    def guard(current: MerkleLog) -> None:
        if current.size >= cap:
            raise Full

    got = _threads(n, lambda i: log.append(f"record-{i}".encode(), guard=guard), hold.entered)
    ok = {i: g for i, g in enumerate(got) if isinstance(g, int)}
    assert len(ok) == cap and all(isinstance(g, Full) for g in got if not isinstance(g, int))
    assert sorted(ok.values()) == list(range(cap))  # every index once
    for i, pos in ok.items():
        assert log.leaf(pos) == f"record-{i}".encode()  # its own record at its index
    assert log._group.commits == 2  # the 23 queued writers shared the second commit
    log.verify_storage()
    root = log.root()
    assert root == root_from_leaf_hashes([leaf_hash(log.leaf(p)) for p in range(cap)])
    for p in range(cap):
        assert verify_inclusion(log.leaf(p), p, cap, log.inclusion_proof(p, cap), root)
    log.close()
    with MerkleLog(path) as reopened:  # what returned is what is on disk
        assert reopened.size == cap and reopened.root() == root


def test_a_failed_commit_fails_every_waiting_append_and_writes_none(tmp_path) -> None:
    path = tmp_path / "ledger.sqlite"
    log = MerkleLog(path)
    assert log._group is not None
    n = 12

    def fail_second(commit: int) -> None:
        if commit == 2:
            raise OSError("disk full")

    hold = _HoldFirstCommit(lambda: log._group.queued, n - 1, fail_second)
    log._before_commit = hold
    got = _threads(n, lambda i: log.append(f"r{i}".encode()), hold.entered)
    assert got[0] == 0  # the held commit succeeded
    assert all(isinstance(g, OSError) and "disk full" in str(g) for g in got[1:])
    assert log.size == 1 and log.leaf(0) == b"r0"
    log._before_commit = None
    assert log.append(b"next") == 1  # the rolled-back tree continues from the commit
    log.verify_storage()
    log.close()
    with MerkleLog(path) as reopened:
        assert [reopened.leaf(i) for i in range(reopened.size)] == [b"r0", b"next"]


def test_the_per_append_baseline_still_commits_each_alone(tmp_path) -> None:
    log = MerkleLog(tmp_path / "ledger.sqlite", group_commit=False)
    assert log._group is None
    got = _threads(8, lambda i: log.append(f"r{i}".encode()))
    assert sorted(got) == list(range(8))
    log.verify_storage()
    log.close()


def _provider(tmp_path, accounts: int, rate_limit: int) -> AuditWindow:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((40, 16))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    policy = AuditPolicy(
        epsilon_acc=4.0,
        delta_acc=1e-6,
        rate_limit=rate_limit,
        k_max=2,
        delta_policy=3e-6,
        window_id="w",
        window_start=0,
        window_end=2**62,
        top_k=3,
    )
    provider = AuditWindow(
        policy=policy,
        tenants={"t": ([f"d{i}" for i in range(40)], vectors)},
        accounts={f"a{i}": "t" for i in range(accounts)},
        seed=bytes(range(1, 33)),
        ledger_path=tmp_path / "ledger.sqlite",
    )
    provider.commit(published_at=0)
    return provider


def _query(provider: AuditWindow, account: str, j: int):  # type: ignore[no-untyped-def]
    q = np.random.default_rng([int(account[1:]), j]).standard_normal(16)
    return provider.query(account, vector=q)


def test_concurrent_queries_all_get_receipts_and_the_window_verifies(tmp_path) -> None:
    """16 accounts query 3 times each from their own threads (provider-stamped times):
    every query gets its receipt, the ledger holds exactly those 48 records with each
    account's numbers 1..3 and timestamps that never decrease, and the verifier passes."""
    n, r = 16, 3
    provider = _provider(tmp_path, n, r)
    group = provider.ledger._group
    assert group is not None
    hold = _HoldFirstCommit(lambda: group.queued, n - 1, lambda _: None)
    provider.ledger._before_commit = hold
    got = _threads(n, lambda i: [_query(provider, f"a{i}", j) for j in range(r)], hold.entered)
    answers = [a for per in got for a in per]
    assert len(answers) == n * r
    assert sorted(a.receipt.position for a in answers) == list(range(n * r))
    assert group.commits < n * r  # appends shared commits
    records = [QueryRecord.from_bytes(provider.ledger.leaf(i)) for i in range(n * r)]
    for i in range(n):
        assert [x.seq for x in records if x.account == provider.account_id(f"a{i}")] == [1, 2, 3]
        assert provider.used(f"a{i}") == r
    assert all(a.ts <= b.ts for a, b in itertools.pairwise(records))
    for a in answers:  # each receipt names its own record
        assert records[a.receipt.position].account == a.receipt.account
    v = Verifier().verify(
        provider.transcript(), [a.receipt for a in answers], provider.auditor_package()
    )
    assert v.passed, v.failures
    provider.ledger.close()


def test_a_failed_commit_answers_no_query_of_it_and_spends_nothing(tmp_path) -> None:
    """The commit holding 11 queued queries fails: each of them gets the error, none of
    their records is in the ledger, none of their accounts spent anything, and each
    account's next query is its first (number 1) and the window still verifies."""
    n = 12
    provider = _provider(tmp_path, n, 2)
    group = provider.ledger._group
    assert group is not None

    def fail_second(commit: int) -> None:
        if commit == 2:
            raise OSError("disk full")

    hold = _HoldFirstCommit(lambda: group.queued, n - 1, fail_second)
    provider.ledger._before_commit = hold
    got = _threads(n, lambda i: _query(provider, f"a{i}", 0), hold.entered)
    assert not isinstance(got[0], BaseException)  # the held (first) commit succeeded
    assert all(isinstance(g, OSError) for g in got[1:])
    assert provider.ledger.size == 1
    assert [provider.used(f"a{i}") for i in range(n)] == [1] + [0] * (n - 1)
    provider.ledger._before_commit = None
    again = [_query(provider, f"a{i}", 1) for i in range(1, n)]
    records = [QueryRecord.from_bytes(provider.ledger.leaf(i)) for i in range(n)]
    assert [x.seq for x in records[1:]] == [1] * (n - 1)  # nothing was spent before
    v = Verifier().verify(
        provider.transcript(), [got[0].receipt] + [a.receipt for a in again],
        provider.auditor_package(),
    )  # fmt: skip
    assert v.passed, v.failures
    provider.ledger.close()
