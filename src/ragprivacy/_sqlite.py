"""Opening the embedded SQLite stores safely when several processes share one file.

The generation cache, the budget store and the Merkle ledger are SQLite files in WAL
mode that the processes of a sweep or a service open at the same moment. Two
situations answer "database is locked" at once instead of waiting out the busy
timeout: turning a new file to WAL (it needs an exclusive lock) and a lock upgrade
that SQLite refuses to wait for because it could deadlock. Both clear within
milliseconds, so the right response is to retry until a deadline.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ragprivacy.errors import ConfigError, DataError

__all__ = ["connect_wal", "when_unlocked"]

T = TypeVar("T")


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
