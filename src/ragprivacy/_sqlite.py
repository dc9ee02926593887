"""Opening the embedded SQLite stores safely when several processes share one file.

The generation cache, the budget store and the Merkle ledger are SQLite files in WAL
mode that the processes of a sweep or a service open at the same moment. Two
situations answer "database is locked" at once instead of waiting out the busy
timeout: turning a new file to WAL (it needs an exclusive lock) and a lock upgrade
that SQLite refuses to wait for because it could deadlock. Both clear within
milliseconds, so the right response is to retry until a deadline.

:class:`GroupCommit` lets the threads of one process share a durable commit (one
``synchronous=FULL`` transaction, hence one WAL sync, for many writes).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

from ragprivacy.errors import ConfigError, DataError

__all__ = ["CommitTicket", "GroupCommit", "connect_wal", "when_unlocked"]

T = TypeVar("T")
R = TypeVar("R")


def when_unlocked(step: Callable[[], T], wait_s: float) -> T:
    """Run ``step``, retrying while another connection holds the file locked.

    Raises the last ``sqlite3.OperationalError`` once ``wait_s`` seconds have passed,
    and any other error at once.
    """
    deadline = time.monotonic() + wait_s
    delay = 0.005
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            message = str(exc)
            if ("locked" not in message and "busy" not in message) or (
                time.monotonic() >= deadline
            ):
                raise
            time.sleep(delay)
            delay = min(2 * delay, 0.25)


def _use_wal(conn: sqlite3.Connection) -> None:
    # WAL is a property of the file: once set, later openers only read it.
    if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
        conn.execute("PRAGMA journal_mode=WAL")


def connect_wal(
    path: str | Path,
    *,
    timeout: float,
    synchronous: str = "NORMAL",
    schema: str | None = None,
    autocommit: bool = False,
    check_same_thread: bool = True,
) -> sqlite3.Connection:
    """A connection to ``path`` in WAL mode, with ``schema`` (a script) applied.

    Args:
        path: the database file (created if missing; its folder must exist).
        timeout: seconds to wait for another process's lock, here and in later calls.
        synchronous: SQLite's ``synchronous`` setting (``FULL`` for stores that must
            survive a power cut, ``NORMAL`` for caches).
        schema: ``CREATE ... IF NOT EXISTS`` statements run once the file is in WAL.
        autocommit: open with ``isolation_level=None`` (the caller issues BEGIN/COMMIT).
        check_same_thread: passed to ``sqlite3.connect``.
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{str(p)!r} is a directory; give the path of a SQLite file.")
    try:
        return _connect(p, timeout, synchronous, schema, autocommit, check_same_thread)
    except sqlite3.DatabaseError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise  # another writer outlasted the timeout: the caller's to report
        raise DataError(
            f"{str(p)!r} cannot be opened as a SQLite store ({exc}); give a new path or "
            "the store's own file."
        ) from None


def _connect(
    path: Path,
    timeout: float,
    synchronous: str,
    schema: str | None,
    autocommit: bool,
    check_same_thread: bool,
) -> sqlite3.Connection:
    conn = sqlite3.connect(
        str(path),
        timeout=timeout,
        isolation_level=None if autocommit else "DEFERRED",
        check_same_thread=check_same_thread,
    )
    try:
        when_unlocked(lambda: _use_wal(conn), timeout)
        conn.execute(f"PRAGMA synchronous={synchronous}")
        if schema is not None:
            when_unlocked(lambda: conn.executescript(schema), timeout)
    except BaseException:
        conn.close()
        raise
    return conn


class CommitTicket(Generic[T, R]):
    """One write queued in a :class:`GroupCommit`; :meth:`result` waits until it is
    durable (or refused) and returns its outcome."""

    __slots__ = ("_done", "_error", "_group", "_item", "_lead", "_value", "_wake")

    def __init__(self, group: GroupCommit[T, R], item: T) -> None:
        self._group = group
        self._item = item
        self._done = False
        self._lead = False  # handed the leadership by the previous leader
        self._value: R | None = None
        self._error: BaseException | None = None
        self._wake = threading.Event()

    def result(self) -> R:
        """The write's result once its commit returned; raises what refused it, or the
        error of the commit it shared (then nothing of it was written)."""
        group = self._group
        while True:
            with group._mutex:
                if self._done:
                    break
                if self._lead or not group._busy:
                    self._lead = False
                    group._busy = True  # this caller leads the next commit
                    batch = group._queue[: group.max_batch]
                    del group._queue[: group.max_batch]
                else:
                    self._wake.clear()
                    batch = []
            if batch:
                group._run(batch)
            else:
                self._wake.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set with _done when no error


class GroupCommit(Generic[T, R]):
    """Leader/follower group commit: concurrent writers of one process share one commit.

    Every writer queues its item (:meth:`submit`) and waits for it (:meth:`CommitTicket.result`).
    A writer that finds no commit in flight becomes the *leader*: it takes up to
    ``max_batch`` queued items, oldest first, and hands them to ``commit(items)`` in one
    call — one transaction, so one sync of the disk for all of them. ``commit`` returns
    one outcome per item, in order: the item's result, or an exception that refused that
    item alone (it wrote nothing of it). If ``commit`` raises, every item of the batch
    gets that error (the transaction was rolled back: nothing of any of them is durable).
    The leader then wakes the writers of its batch and passes the leadership to the
    oldest writer still queued (those that queued while it waited on the disk), which
    commits them together; only those threads wake. A lone writer leads at once: one
    commit, no wait.

    Queue order is commit order: items submitted one after another by one thread (or
    under one lock) are committed in that order. Every submitted ticket must be waited
    for (its ``result()``) right after: a queued writer may be handed the next commit.

    Args:
        commit: writes a batch durably (see above); called by one thread at a time.
        max_batch: the most items one commit takes (bounds a commit's size and latency).
    """

    def __init__(
        self, commit: Callable[[list[T]], Sequence[R | BaseException]], *, max_batch: int = 256
    ) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ConfigError(
                f"The 'max_batch' parameter must be a positive integer; got {max_batch!r}."
            )
        self.max_batch = max_batch
        self._commit = commit
        self._mutex = threading.Lock()
        self._queue: list[CommitTicket[T, R]] = []
        self._busy = False
        self.commits = 0  # how many commits ran (batches), for tests and benchmarks

    def submit(self, item: T) -> CommitTicket[T, R]:
        """Queue ``item``; it is written by the next commit that takes it."""
        ticket = CommitTicket(self, item)
        with self._mutex:
            self._queue.append(ticket)
        return ticket

    def run(self, item: T) -> R:
        """Queue ``item`` and wait until it is durable; returns its result."""
        return self.submit(item).result()

    @property
    def queued(self) -> int:
        """Items waiting for a commit (not counting a commit in flight)."""
        with self._mutex:
            return len(self._queue)

    def _run(self, batch: list[CommitTicket[T, R]]) -> None:
        outcomes: Sequence[R | BaseException] = ()
        failure: BaseException | None = None
        try:
            outcomes = self._commit([t._item for t in batch])
            if len(outcomes) != len(batch):
                raise RuntimeError(
                    f"A group commit returned {len(outcomes)} outcomes for {len(batch)} items."
                )
        except BaseException as exc:  # the whole batch failed: every writer learns it
            failure = exc
        with self._mutex:
            self.commits += 1
            for i, ticket in enumerate(batch):
                if failure is not None:
                    ticket._error = failure
                else:
                    outcome = outcomes[i]
                    if isinstance(outcome, BaseException):
                        ticket._error = outcome
                    else:
                        ticket._value = outcome
                ticket._done = True
                ticket._wake.set()
            if self._queue:  # pass the leadership on: the oldest queued writer commits next
                self._queue[0]._lead = True
                self._queue[0]._wake.set()
            else:
                self._busy = False
