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
import threading
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, ExitStack, suppress
from pathlib import Path
from typing import Any

from ragprivacy._postgres import PgPool, PgTransaction, create_schema, qmark, redact_url
from ragprivacy._sqlite import connect_wal
from ragprivacy._storage import map_backend_errors, read_retrying
from ragprivacy.errors import ConfigError

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
        conn = self._conn()
        with map_backend_errors(f"the Merkle log {self.name}"):
            conn.execute("BEGIN IMMEDIATE")

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

    An append's transaction holds one pooled connection from :meth:`begin` to
    :meth:`commit` or :meth:`rollback` (its reads run on it too, after the lock); reads
    outside an append take a connection from the pool for one statement. A service
    passes the pool of its state (one pool per process); a database URL opens a small
    pool of the storage's own, closed with it.

    Args:
        database: the state's :class:`ragprivacy._postgres.PgPool`, or a database URL
            (printed only without its password).
        ledger: the log's name (the service uses the window id).
    """

    def __init__(self, database: PgPool | str, ledger: str) -> None:
        self._owns_pool = not isinstance(database, PgPool)
        self._pool: PgPool | None = (
            database if isinstance(database, PgPool) else PgPool(database, max_size=2)
        )
        self.url = self._pool.url
        self.ledger = ledger
        self.name = f"{ledger!r} in {redact_url(self.url)}"
        self._store = f"the Merkle log {self.name}"
        self._held: ExitStack | None = None  # gives the open append's connection back
        self._tx: PgTransaction | None = None  # the open append's statements
        self._owner: int | None = None  # the thread that opened it
        self._sealed: int | None = None
        try:
            self._pool.retrying(
                lambda conn: create_schema(conn, _PG_SCHEMA, "ragprivacy/ledger-schema")
            )
            # idempotent, so it runs again on a fresh connection if its first was ended:
            # pg_terminate_backend takes effect when the backend next looks, so a pool's
            # check just before can still hand out a connection that is about to end
            self._pool.retrying(
                lambda conn: conn.execute(
                    qmark(
                        "INSERT INTO ledger_heads (ledger, sealed) VALUES (?, NULL) "
                        "ON CONFLICT (ledger) DO NOTHING"
                    ),
                    (ledger,),
                )
            )
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresLedgerStorage({self.name})"

    def _open_pool(self) -> PgPool:
        if self._pool is None:
            raise ConfigError(f"The Merkle log {self.name} is closed; reopen it.")
        return self._pool

    def _in_tx(self) -> bool:
        """Whether this thread has the log's append open (its reads then run in it)."""
        return self._tx is not None and self._owner == threading.get_ident()

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of one read: inside this thread's append on its connection, after
        the lock; outside, on a pooled connection (run once more on a fresh one if the
        first was lost)."""
        if self._tx is not None and self._in_tx():
            with self._mapped():
                return list(self._tx.execute(sql, params).fetchall())
        return self._open_pool().read(sql, params)

    def _mapped(self) -> AbstractContextManager[None]:
        pool = self._open_pool()
        return map_backend_errors(self._store, on_lost=pool.replace_lost)

    def leaves_from(self, start: int) -> list[LeafRow]:
        rows = self._read(
            "SELECT idx, data, hash FROM ledger_leaves WHERE ledger = ? AND idx >= ? ORDER BY idx",
            (self.ledger, start),
        )
        return [(int(i), bytes(d), bytes(h)) for i, d, h in rows]

    def nodes(self) -> list[NodeRow]:
        rows = self._read(
            "SELECT level, idx, hash FROM ledger_nodes WHERE ledger = ? ORDER BY level, idx",
            (self.ledger,),
        )
        return [(int(lv), int(i), bytes(h)) for lv, i, h in rows]

    def begin(self) -> None:
        pool = self._open_pool()

        def take() -> tuple[ExitStack, Any]:
            held = ExitStack()
            conn = held.enter_context(pool.connection())
            try:
                conn.execute("BEGIN")
            except BaseException:
                held.close()  # a broken connection leaves the pool
                raise
            return held, conn

        # a connection found dead at BEGIN is replaced once (BEGIN changes nothing)
        self._held, conn = read_retrying(take, self._store, on_lost=pool.replace_lost)
        self._tx, self._owner = PgTransaction(conn), threading.get_ident()
        try:
            # the window's head row is the log's write lock, held until COMMIT/ROLLBACK;
            # the statements after it see every append committed before (READ COMMITTED)
            with self._mapped():
                self._tx.execute(
                    "SELECT set_config('lock_timeout', ?, true)", (f"{int(_WAIT_S * 1000)}ms",)
                )
                row = self._tx.execute(
                    "SELECT sealed FROM ledger_heads WHERE ledger = ? FOR UPDATE", (self.ledger,)
                ).fetchone()
        except BaseException:
            self.rollback()
            raise
        self._sealed = None if row is None or row[0] is None else int(row[0])

    def _open_tx(self) -> PgTransaction:
        if self._tx is None:
            raise ConfigError(f"No append of the Merkle log {self.name} is open; begin() first.")
        return self._tx

    def sealed_size(self) -> int | None:
        if self._in_tx():
            return self._sealed
        rows = self._read("SELECT sealed FROM ledger_heads WHERE ledger = ?", (self.ledger,))
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def insert(self, leaves: list[LeafRow], nodes: list[NodeRow]) -> None:
        tx = self._open_tx()
        with self._mapped():
            tx.executemany(
                "INSERT INTO ledger_leaves (ledger, idx, data, hash) VALUES (?, ?, ?, ?)",
                [(self.ledger, i, d, h) for i, d, h in leaves],
            )
            tx.executemany(
                "INSERT INTO ledger_nodes (ledger, level, idx, hash) VALUES (?, ?, ?, ?)",
                [(self.ledger, lv, i, h) for lv, i, h in nodes],
            )

    def set_sealed(self, size: int) -> None:
        tx = self._open_tx()
        with self._mapped():
            tx.execute("UPDATE ledger_heads SET sealed = ? WHERE ledger = ?", (size, self.ledger))
        self._sealed = size

    def commit(self) -> None:
        tx = self._open_tx()
        try:
            with self._mapped():
                tx.execute("COMMIT")
        finally:
            self._release()

    def rollback(self) -> None:
        if self._tx is not None:
            with suppress(Exception):  # a broken connection rolled back already
                self._tx.execute("ROLLBACK")
        self._release()

    def _release(self) -> None:
        """Give the append's connection back to the pool (a broken one leaves it)."""
        held, self._held, self._tx, self._owner = self._held, None, None, None
        if held is not None:
            with suppress(Exception):
                held.close()

    def close(self) -> None:
        self.rollback()
        pool, self._pool = self._pool, None
        if pool is not None and self._owns_pool:
            pool.close()
