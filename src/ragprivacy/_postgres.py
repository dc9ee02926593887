"""Connecting to PostgreSQL for the stores that several machines share.

The service's state, its Merkle ledgers and the per-document budget stores can live in
one PostgreSQL database instead of SQLite files, so that several service replicas share
them. This module holds what those stores have in common: recognising a database URL,
printing it without its password, opening connections (psycopg 3, the ``postgres``
extra) and a connection pool, creating a schema once when several processes start at
the same moment, and running ``?``-placeholder SQL (the SQLite stores' dialect) on
PostgreSQL.

Every error and repr names the database by :func:`redact_url`: a URL's password never
reaches a message or a log.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from ragprivacy._storage import connection_lost, map_backend_errors, read_retrying
from ragprivacy.errors import BackendError, ConfigError

__all__ = [
    "PgPool",
    "PgTransaction",
    "connect",
    "connection_lost",
    "create_schema",
    "is_postgres_url",
    "qmark",
    "redact_url",
]

T = TypeVar("T")

_SCHEMES = ("postgresql://", "postgres://")
#: every table of ours lives in this schema (``public`` stays on the path for extensions)
SCHEMA = "ragprivacy"
_OPTIONS = f"-c search_path={SCHEMA},public"
_QMARK = re.compile(r"\?")


def is_postgres_url(location: object) -> bool:
    """Whether ``location`` is a PostgreSQL URL (``postgresql://`` or ``postgres://``)."""
    return isinstance(location, str) and location.lower().startswith(_SCHEMES)


def redact_url(url: str) -> str:
    """``url`` with its password (and any ``password=`` query value) replaced by ``***``.

    >>> redact_url("postgresql://app:s3cret@db:5432/rag?password=x&sslmode=require")
    'postgresql://app:***@db:5432/rag?password=***&sslmode=require'
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://***"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = re.sub(r"(?i)(^|&)(password=)[^&]*", r"\1\2***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def qmark(sql: str) -> str:
    """SQLite's ``?`` placeholders as psycopg's ``%s`` (our SQL holds no literal ``?``
    or ``%``)."""
    return _QMARK.sub("%s", sql)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ConfigError(
            "A PostgreSQL URL needs psycopg; install the extra: pip install 'ragprivacy[postgres]'."
        ) from None
    return psycopg


def _unreachable(url: str, exc: BaseException) -> BackendError:
    # The driver's message may quote the connection string; keep only its first line and
    # take any password out of it.
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    first = re.sub(r"(?i)password\S*", "password=***", first)
    return BackendError(
        f"Could not connect to the PostgreSQL database {redact_url(url)}: {first}. Check that "
        "the server runs and the URL is right."
    )


def connect(url: str, *, autocommit: bool = True) -> Any:
    """A psycopg connection to ``url`` (``BackendError`` naming the redacted URL if the
    server cannot be reached)."""
    psycopg = _psycopg()
    try:
        return psycopg.connect(url, autocommit=autocommit, options=_OPTIONS)
    except psycopg.OperationalError as exc:
        raise _unreachable(url, exc) from None


def create_schema(conn: Any, schema: str, name: str) -> None:
    """Run the ``CREATE ... IF NOT EXISTS`` statements of ``schema`` once, in one
    transaction under an advisory lock named ``name``, in the schema ``ragprivacy``:
    processes that start together would otherwise race on PostgreSQL's catalog (a unique
    violation on ``pg_type``)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (name,))
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        for statement in schema.split(";"):
            if statement.strip():
                conn.execute(statement)


class PgPool:
    """A small pool of autocommit connections to one database, shared by threads.

    ``read`` runs one statement and returns its rows; ``transaction`` yields a
    :class:`PgTransaction` inside ``BEGIN ... COMMIT`` (rolled back on an error).

    Reconnects: a statement that finds its connection lost has every idle connection of
    the pool tested and the dropped ones replaced (``ConnectionPool.check``: a restart
    or ``pg_terminate_backend`` ends them all at once); a ``read`` then runs once more
    on a fresh connection, and a transaction raises
    :class:`~ragprivacy.errors.BackendError` (the server rolled it back, unless the loss
    hit the ``COMMIT`` itself). The broken connection leaves the pool.

    Args:
        url: the database URL (its password is never printed).
        max_size: the most connections this process holds (PostgreSQL allows 100 by
            default across every client; replicas × max_size must stay below it).
    """

    def __init__(self, url: str, *, max_size: int = 8) -> None:
        psycopg = _psycopg()
        try:
            from psycopg_pool import ConnectionPool
        except ImportError:
            raise ConfigError(
                "A PostgreSQL URL needs psycopg_pool; install the extra: "
                "pip install 'ragprivacy[postgres]'."
            ) from None
        self.url = url
        #: how messages name the database (its password never printed)
        self.name = f"the PostgreSQL database {redact_url(url)}"
        self._closed = False
        self._lock = threading.Lock()
        connect(url).close()  # fail fast, naming the database, if it cannot be reached
        try:
            self._pool = ConnectionPool(
                url,
                min_size=1,
                max_size=max_size,
                kwargs={"autocommit": True, "options": _OPTIONS},
                open=True,
                timeout=60.0,
                name="ragprivacy",
            )
            self._pool.wait(timeout=30.0)
        except (psycopg.OperationalError, Exception) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise _unreachable(url, exc) from None

    def __repr__(self) -> str:
        return f"PgPool({redact_url(self.url)!r})"

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection (autocommit), given back when the block ends. A lost
        connection is a :class:`~ragprivacy.errors.BackendError` (the broken one leaves
        the pool and the idle ones are tested), never the driver's error."""
        with (
            map_backend_errors(self.name, undone="nothing was done", on_lost=self.replace_lost),
            self._pool.connection() as conn,
        ):
            yield conn

    def retrying(self, step: Callable[[Any], T]) -> T:
        """``step(conn)`` on a pooled connection, run once more on a fresh one if the
        first was lost: only for work that may safely run twice (a read, a schema's
        ``CREATE ... IF NOT EXISTS``)."""

        def once() -> T:
            with self._pool.connection() as conn:
                return step(conn)

        return read_retrying(once, self.name, on_lost=self.replace_lost)

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one ``?``-placeholder query (run once more on a fresh connection
        if the first one was lost: a read changes nothing)."""
        return self.retrying(lambda conn: list(conn.execute(qmark(sql), tuple(params)).fetchall()))

    def replace_lost(self) -> None:
        """One connection was lost: test every idle one and replace those the server
        dropped too (a restart or ``pg_terminate_backend`` ends them all at once), so the
        next statements do not each find a dead connection first."""
        with suppress(Exception):
            self._pool.check()

    @contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[PgTransaction]:
        """One transaction on one pooled connection; with ``lock``, first take the
        transaction-scoped advisory lock of that name (writers of one lock name then run
        one at a time, across every process and machine that shares the database). A
        lost connection is a :class:`~ragprivacy.errors.BackendError`."""
        with (
            map_backend_errors(self.name, undone="nothing was done", on_lost=self.replace_lost),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            if lock is not None:
                conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (lock,))
            yield PgTransaction(conn)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.close()


class PgTransaction:
    """The statements of one open transaction, in SQLite's ``?`` dialect (the subset of
    :class:`sqlite3.Connection` the stores use: ``execute`` and ``executemany``)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self._conn.execute(qmark(sql), tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        rows = [tuple(r) for r in rows]
        if rows:
            with self._conn.cursor() as cur:
                cur.executemany(qmark(sql), rows)
