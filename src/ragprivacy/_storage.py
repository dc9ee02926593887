"""What the SQLite and PostgreSQL stores share: one SQL dialect and one error mapping.

Every durable store (the service's state, the Merkle ledgers, the per-document budget
stores) writes its SQL once, in SQLite's dialect with ``?`` placeholders and standard
upserts (``INSERT ... ON CONFLICT``), which both databases run. What still differs is
derived here, so that the two backends never drift apart: the PostgreSQL schema from
the SQLite one (:func:`postgres_schema`), and the few words of a statement that differ
(:class:`Dialect`: the row-locking clause, the two-argument maximum). The placeholders
are translated where PostgreSQL statements run (:func:`ragprivacy._postgres.qmark`).

A storage failure that is no fault of the request — another writer held the lock past
the wait, the pool had no free connection, the server dropped the connection — reaches
the caller as one :class:`~ragprivacy.errors.BackendError` (HTTP 502), made in one place
(:func:`map_backend_errors`): the message names the store and the kind of failure, with
at most the driver's first line (passwords taken out), never a statement's parameters,
so no document id, account or secret reaches a log or a caller through it.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, TypeVar

from ragprivacy.errors import BackendError, RagPrivacyError

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "connection_lost",
    "map_backend_errors",
    "postgres_schema",
    "read_retrying",
]

T = TypeVar("T")
Failure = Literal["locked", "busy", "lost"]

_LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL's SQLSTATE for a lock_timeout that expired


def postgres_schema(schema: str) -> str:
    """PostgreSQL's ``CREATE`` statements for a schema written in SQLite's dialect:
    ``BLOB`` → ``BYTEA``, ``REAL`` → ``DOUBLE PRECISION`` (SQLite's REAL is a double),
    no ``WITHOUT ROWID`` (PostgreSQL tables have no rowid to drop)."""
    return (schema.replace(" BLOB", " BYTEA").replace(" REAL", " DOUBLE PRECISION")).replace(
        " WITHOUT ROWID", ""
    )


@dataclass(frozen=True, slots=True)
class Dialect:
    """The words a statement spells differently in SQLite and PostgreSQL.

    Attributes:
        name: ``"sqlite"`` or ``"postgres"``.
        for_update: appended to a ``SELECT`` that must lock the rows it reads until the
            transaction ends (PostgreSQL's ``FOR UPDATE``; SQLite has no row locks, its
            ``BEGIN IMMEDIATE`` already holds the whole file's write lock).
        greatest: the two-argument maximum (SQLite's scalar ``MAX``, PostgreSQL's
            ``GREATEST``).
    """

    name: str
    for_update: str
    greatest: str

    def schema(self, sqlite_schema: str) -> str:
        """``sqlite_schema`` in this dialect (:func:`postgres_schema` for PostgreSQL)."""
        return sqlite_schema if self is SQLITE else postgres_schema(sqlite_schema)


SQLITE = Dialect("sqlite", for_update="", greatest="MAX")
POSTGRES = Dialect("postgres", for_update=" FOR UPDATE", greatest="GREATEST")


class _LostConnection(BackendError):
    """The ``BackendError`` of a lost connection, so that a caller above the block that
    mapped it can still tell that a fresh connection may succeed."""


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection to the PostgreSQL server is gone (the server
    restarted, failed over, or ended the backend with ``pg_terminate_backend``), so that
    a fresh connection may succeed: the driver's error, or the ``BackendError`` that
    :func:`map_backend_errors` made of it."""
    return isinstance(exc, _LostConnection) or _failure(exc) == "lost"


def _failure(exc: BaseException) -> Failure | None:
    """Which storage failure ``exc`` is, or ``None`` for any other error."""
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        return "locked" if "locked" in text or "busy" in text else None
    if type(exc).__name__ == "PoolTimeout":  # every pooled connection busy: none was lost
        return "busy"
    try:
        import psycopg
    except ImportError:  # without the postgres extra no psycopg error can occur
        return None
    if not isinstance(exc, psycopg.OperationalError):
        return None
    if getattr(exc, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
        return "locked"
    return "lost"


def _detail(exc: BaseException) -> str:
    """The driver's first line, without any password (a connection error may quote the
    connection string), for the operator to tell one failure from another."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return re.sub(r"(?i)password\S*", "password=***", first)[:200]


def _error(failure: Failure | None, exc: BaseException, store: str, undone: str) -> BackendError:
    if failure == "locked":
        return BackendError(
            f"Could not lock {store}: it stayed locked by another writer past the wait; "
            f"{undone}. Retry once the other writer is done."
        )
    if failure == "busy":
        return BackendError(
            f"Every pooled connection to {store} stayed busy past the wait; {undone}. "
            "Retry, or lower the load on this replica."
        )
    if failure == "lost":
        return _LostConnection(
            f"Lost the connection to {store} ({_detail(exc)}); the server rolled back what "
            "had not committed. Retry: the next request reconnects."
        )
    return BackendError(f"Reading {store} failed: {_detail(exc)}.")


@contextmanager
def map_backend_errors(
    store: str,
    *,
    undone: str = "nothing was written",
    on_lost: Callable[[], None] | None = None,
    reading: bool = False,
) -> Iterator[None]:
    """Turn a storage failure raised in the block into one :class:`BackendError`.

    A lock held past the wait (SQLite's "database is locked", PostgreSQL's
    ``lock_timeout``), a pool with no free connection and a lost connection each become
    a one-line ``BackendError`` naming ``store``; any other error passes unchanged (a
    :class:`~ragprivacy.errors.RagPrivacyError` always does: it is already the answer).
    The driver's exception is not chained (``from None``): its text may hold what the
    message leaves out.

    Args:
        store: how the message names the store (``"the budget store /x/b.sqlite"``);
            never a secret (print URLs with :func:`ragprivacy._postgres.redact_url`).
        undone: what the failure left undone, for the lock and pool messages.
        on_lost: called before raising for a lost connection (a pool replaces the
            connections the server dropped with it).
        reading: the block only reads, and every database error in it is the backend's
            (a damaged or missing table), so any other error becomes a ``BackendError``
            too, rather than an internal error.
    """
    try:
        yield
    except RagPrivacyError:
        raise
    except Exception as exc:
        failure = _failure(exc)
        if failure is None and not reading:
            raise
        if failure == "lost" and on_lost is not None:
            on_lost()
        raise _error(failure, exc, store, undone) from None


def read_retrying(
    step: Callable[[], T],
    store: str,
    *,
    on_lost: Callable[[], None] | None = None,
    reading: bool = False,
) -> T:
    """``step()``, a read, run once more on a fresh connection if the first run lost its
    connection (a read changes nothing, so running it twice is safe); failures map as in
    :func:`map_backend_errors`."""
    with map_backend_errors(store, on_lost=on_lost, reading=reading):
        try:
            return step()
        except Exception as exc:
            if not connection_lost(exc):
                raise
            if on_lost is not None:
                on_lost()
        return step()
