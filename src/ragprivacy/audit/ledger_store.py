"""Where a durable Merkle log keeps its leaves: one SQLite file, or PostgreSQL rows.

:class:`ragprivacy.audit.MerkleLog` holds the tree in memory and writes every append
through a :class:`LedgerStorage`: leaves (index, data, leaf hash), the complete subtree
hashes (level, index, hash) and the seal. A write takes the log's *exclusive* write lock
first — across threads, processes and, with PostgreSQL, machines — so the appends of
one log are ordered and each append's guard (the account's rate limit) decides on the
log with every earlier append in it (the collusion paper's ledger, §5.3 G2: one append
order per window). An append is visible to readers only once its transaction committed.

* :class:`SqliteLedgerStorage`: one file in WAL mode with ``synchronous=FULL``; the
  write lock is ``BEGIN IMMEDIATE``.
* :class:`PostgresLedgerStorage`: the rows of one window in shared tables; the write
  lock is ``SELECT ... FOR UPDATE`` on the window's row in ``ledger_heads`` (which also
  holds the seal), so two replicas appending to one window take turns while other
  windows' appends do not wait. PostgreSQL's commit is durable (``fsync``,
  ``synchronous_commit=on`` by default). A connection the server dropped (a restart, a
  failover, ``pg_terminate_backend``) is replaced: a read runs once more on a new
  connection, and an append that lost its connection fails with ``BackendError`` (the
  server rolled it back, or — a loss during ``COMMIT`` — committed it; the log catches
  up from the rows either way, so nothing is counted twice or lost) and the next append
  reconnects.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from contextlib import suppress
from pathlib import Path
from typing import Any

from ragprivacy._postgres import connect, connection_lost, create_schema, redact_url
from ragprivacy._sqlite import connect_wal
from ragprivacy.errors import BackendError, ConfigError

__all__ = ["LedgerStorage", "PostgresLedgerStorage", "SqliteLedgerStorage"]

LeafRow = tuple[int, bytes, bytes]
NodeRow = tuple[int, int, bytes]

_WAIT_S = 30.0  # another process (a verifier reading the file) holding a lock; one writer
_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS leaves (idx INTEGER PRIMARY KEY, data BLOB NOT NULL,
                                   hash BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (level INTEGER NOT NULL, idx INTEGER NOT NULL,
                                  hash BLOB NOT NULL, PRIMARY KEY (level, idx));
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS ledger_heads (
    ledger TEXT PRIMARY KEY, sealed BIGINT);
CREATE TABLE IF NOT EXISTS ledger_leaves (
    ledger TEXT NOT NULL, idx BIGINT NOT NULL, data BYTEA NOT NULL, hash BYTEA NOT NULL,
    PRIMARY KEY (ledger, idx));
CREATE TABLE IF NOT EXISTS ledger_nodes (
    ledger TEXT NOT NULL, level INTEGER NOT NULL, idx BIGINT NOT NULL, hash BYTEA NOT NULL,
    PRIMARY KEY (ledger, level, idx))
"""


class LedgerStorage(ABC):
    """The durable side of one Merkle log (one writer at a time between :meth:`begin`
    and :meth:`commit` / :meth:`rollback`; reads outside need no lock)."""

    #: how messages name the log (never holds a secret)
    name: str

    @abstractmethod
    def leaves_from(self, start: int) -> list[LeafRow]:
        """The stored leaves with index ≥ ``start``, in order."""

    @abstractmethod
    def nodes(self) -> list[NodeRow]:
        """Every stored subtree hash, ordered by (level, index)."""

    @abstractmethod
    def begin(self) -> None:
        """Start a transaction holding the log's exclusive write lock (``BackendError``
        if another writer keeps it past the wait)."""

    @abstractmethod
    def sealed_size(self) -> int | None:
        """The size the log was sealed at, or ``None``."""

    @abstractmethod
    def insert(self, leaves: list[LeafRow], nodes: list[NodeRow]) -> None:
        """Write new leaves and nodes (inside :meth:`begin`)."""

    @abstractmethod
    def set_sealed(self, size: int) -> None:
        """Record the seal (inside :meth:`begin`)."""

    @abstractmethod
    def commit(self) -> None: ...

    @abstractmethod
    def rollback(self) -> None:
        """Roll back the open transaction, if any."""

    @abstractmethod
    def close(self) -> None: ...


class SqliteLedgerStorage(LedgerStorage):
    """A log in one SQLite file (WAL, ``synchronous=FULL``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db: sqlite3.Connection | None = connect_wal(
            self.path,
            timeout=_WAIT_S,
            synchronous="FULL",
            schema=_SQLITE_SCHEMA,
            autocommit=True,
            check_same_thread=False,
        )

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise ConfigError(f"The Merkle log {self.name} is closed; reopen it.")
        return self._db

    def leaves_from(self, start: int) -> list[LeafRow]:
        rows = self._conn().execute(
            "SELECT idx, data, hash FROM leaves WHERE idx >= ? ORDER BY idx", (start,)
        )
        return [(int(i), bytes(d), bytes(h)) for i, d, h in rows]

    def nodes(self) -> list[NodeRow]:
        rows = self._conn().execute("SELECT level, idx, hash FROM nodes ORDER BY level, idx")
        return [(int(lv), int(i), bytes(h)) for lv, i, h in rows]

    def begin(self) -> None:
        try:
            self._conn().execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            raise BackendError(
                f"The Merkle log {self.name} stayed locked by another writer for {_WAIT_S:g} s; "
                "nothing was written. Retry when the other process is done, or stop it."
            ) from None

    def sealed_size(self) -> int | None:
        row = self._conn().execute("SELECT value FROM meta WHERE key = 'sealed'").fetchone()
        return None if row is None else int(row[0])

    def insert(self, leaves: list[LeafRow], nodes: list[NodeRow]) -> None:
        db = self._conn()
        db.executemany("INSERT INTO leaves (idx, data, hash) VALUES (?, ?, ?)", leaves)
        db.executemany("INSERT INTO nodes (level, idx, hash) VALUES (?, ?, ?)", nodes)

    def set_sealed(self, size: int) -> None:
        self._conn().execute("INSERT INTO meta VALUES ('sealed', ?)", (str(size),))

    def commit(self) -> None:
        self._conn().execute("COMMIT")

    def rollback(self) -> None:
        if self._db is not None and self._db.in_transaction:
            self._db.execute("ROLLBACK")

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class PostgresLedgerStorage(LedgerStorage):
    """A log as the rows of ``ledger`` in a PostgreSQL database shared by replicas.

    Args:
        url: the database URL (printed only without its password).
        ledger: the log's name (the service uses the window id).
    """

    def __init__(self, url: str, ledger: str) -> None:
        self.url = url
        self.ledger = ledger
        self.name = f"{ledger!r} in {redact_url(url)}"
        self._db: Any = connect(url)
        create_schema(self._db, _PG_SCHEMA, "ragprivacy/ledger-schema")
        self._db.execute(
            "INSERT INTO ledger_heads (ledger, sealed) VALUES (%s, NULL) "
            "ON CONFLICT (ledger) DO NOTHING",
            (ledger,),
        )
        self._in_tx = False
        self._sealed: int | None = None

    def __repr__(self) -> str:
        return f"PostgresLedgerStorage({self.name})"

    def _conn(self) -> Any:
        if self._db is None:
            raise ConfigError(f"The Merkle log {self.name} is closed; reopen it.")
        if self._db.closed or self._db.broken:
            with suppress(Exception):
                self._db.close()
            if self._in_tx:  # never carry a transaction's statements to a new connection
                self._in_tx = False
                raise BackendError(
                    f"The Merkle log {self.name} lost its database connection inside an "
                    "append; the server rolled it back. Retry: the next one reconnects."
                )
            self._db = connect(self.url)  # BackendError naming the database if it is down
        return self._db

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of one read; outside a transaction, a lost connection is replaced
        and the read runs once more (inside one, the caller's transaction is gone)."""
        for attempt in (0, 1):
            try:
                return list(self._conn().execute(sql, params).fetchall())
            except Exception as exc:
                if not connection_lost(exc):
                    raise
                if attempt or self._in_tx:
                    raise self._lost(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _lost(self, exc: BaseException) -> BackendError:
        self._in_tx = False
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return BackendError(
            f"The Merkle log {self.name} lost its database connection ({first}); nothing "
            "of the append was kept unless it had committed. Retry: the next one reconnects."
        )

    def leaves_from(self, start: int) -> list[LeafRow]:
        rows = self._read(
            "SELECT idx, data, hash FROM ledger_leaves WHERE ledger = %s AND idx >= %s "
            "ORDER BY idx",
            (self.ledger, start),
        )
        return [(int(i), bytes(d), bytes(h)) for i, d, h in rows]

    def nodes(self) -> list[NodeRow]:
        rows = self._read(
            "SELECT level, idx, hash FROM ledger_nodes WHERE ledger = %s ORDER BY level, idx",
            (self.ledger,),
        )
        return [(int(lv), int(i), bytes(h)) for lv, i, h in rows]

    def begin(self) -> None:
        for attempt in (0, 1):  # a connection found dead at BEGIN is replaced once
            db = self._conn()
            try:
                db.execute("BEGIN")
                break
            except Exception as exc:
                if attempt or not connection_lost(exc):
                    raise self._lost(exc) if connection_lost(exc) else exc from None
        self._in_tx = True
        try:
            # the window's head row is the log's write lock, held until COMMIT/ROLLBACK;
            # the statements after it see every append committed before (READ COMMITTED)
            db.execute("SELECT set_config('lock_timeout', %s, true)", (f"{int(_WAIT_S * 1000)}ms",))
            row = db.execute(
                "SELECT sealed FROM ledger_heads WHERE ledger = %s FOR UPDATE", (self.ledger,)
            ).fetchone()
        except Exception as exc:
            self.rollback()
            if "lock timeout" in str(exc).lower():
                raise BackendError(
                    f"The Merkle log {self.name} stayed locked by another writer for "
                    f"{_WAIT_S:g} s; nothing was written. Retry later."
                ) from None
            if connection_lost(exc):
                raise self._lost(exc) from None
            raise
        self._sealed = None if row is None or row[0] is None else int(row[0])

    def sealed_size(self) -> int | None:
        if self._in_tx:
            return self._sealed
        rows = self._read("SELECT sealed FROM ledger_heads WHERE ledger = %s", (self.ledger,))
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def insert(self, leaves: list[LeafRow], nodes: list[NodeRow]) -> None:
        try:
            with self._conn().cursor() as cur:
                if leaves:
                    cur.executemany(
                        "INSERT INTO ledger_leaves (ledger, idx, data, hash) "
                        "VALUES (%s, %s, %s, %s)",
                        [(self.ledger, i, d, h) for i, d, h in leaves],
                    )
                if nodes:
                    cur.executemany(
                        "INSERT INTO ledger_nodes (ledger, level, idx, hash) "
                        "VALUES (%s, %s, %s, %s)",
                        [(self.ledger, lv, i, h) for lv, i, h in nodes],
                    )
        except Exception as exc:
            if connection_lost(exc):
                raise self._lost(exc) from None
            raise

    def set_sealed(self, size: int) -> None:
        try:
            self._conn().execute(
                "UPDATE ledger_heads SET sealed = %s WHERE ledger = %s", (size, self.ledger)
            )
        except Exception as exc:
            if connection_lost(exc):
                raise self._lost(exc) from None
            raise
        self._sealed = size

    def commit(self) -> None:
        try:
            self._conn().execute("COMMIT")
        except Exception as exc:
            if connection_lost(exc):
                raise self._lost(exc) from None
            raise
        self._in_tx = False

    def rollback(self) -> None:
        if self._db is not None and self._in_tx:
            self._in_tx = False
            with suppress(Exception):  # a broken connection rolled back already
                self._db.execute("ROLLBACK")

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
