"""Where the service's state is stored: a SQLite directory or one PostgreSQL database.

:class:`ragprivacy.service.ServiceState` speaks to a :class:`StateBackend`, which gives
it what differs between the two: reads, write transactions (one writer at a time, so
every check-then-write of the state — an account's voted-answer count, a window's
opening — is atomic), the Merkle ledger of a window, the per-document budget store of a
tenant, and where the provider's identity key lives.

* :class:`SqliteBackend` (``--state DIR``): ``DIR/state.sqlite`` (WAL,
  ``synchronous=FULL``; ``BEGIN IMMEDIATE`` is the write lock), ``DIR/ledgers/<window>``
  and ``DIR/filters/<tenant>`` SQLite files, ``DIR/identity.key``. One machine; several
  processes on it.
* :class:`PostgresBackend` (``--state postgresql://...``): the same tables in one
  database (schema ``ragprivacy``) that several replicas on several machines share. A
  state write is one transaction that first takes the advisory lock
  ``ragprivacy/state`` (``pg_advisory_xact_lock``), the counterpart of SQLite's
  ``BEGIN IMMEDIATE``: writers take turns and each sees every earlier commit. A window's
  ledger appends lock the window's head row (:class:`ragprivacy.audit.PostgresLedgerStorage`),
  a tenant's document budgets its store's row
  (:class:`ragprivacy.dp.PostgresBudgetStore`). The identity key is a file the operator
  names (``--identity-key FILE``, created with mode 0600 at first use, the same file on
  every replica): a signing key belongs with the machines that sign, not in a database
  that backups and read replicas copy. A tenant's document embeddings live in a
  pgvector table of its own (:meth:`PostgresBackend.vector_table`, with an HNSW index),
  read by the audited provider through :class:`PgvectorTenantVectors` instead of being
  held in every replica's memory; every statement on those tables is in
  :mod:`ragprivacy.service.tenant_vectors`. The state, its ledgers and its budget stores
  share one connection pool per process (:attr:`PostgresBackend.pool`).

**One pgvector table per tenant**, not one shared table with a tenant column: a
tenant's queries read its own table only (the collusion paper's per-tenant index,
eq. 2.1), its HNSW graph holds only its own documents — pgvector filters a shared
graph *after* the scan, so a small tenant's approximate search in a shared table loses
recall unless ``ef_search`` grows with the other tenants' size — and a tenant's table
is dropped, re-indexed or vacuumed alone. The table is ``ragprivacy.tenant_vectors_<h>``
with ``h`` the first 20 hex digits of SHA-256(tenant) (tenant ids may hold ``-`` and
``.``; every replica derives the same name), laid out as
:class:`ragprivacy.index.PgvectorIndex` lays out its tables (``pos``, ``id``,
``embedding vector(d)``, HNSW ``<table>_hnsw`` over ``vector_ip_ops``), so that index
opens it for approximate search (for vectors of at most 2,000 dimensions; wider ones,
up to 4,000 — the default ``hashing`` embedder's 2,048 — get an HNSW index over their
``halfvec`` cast, which pgvector's ``halfvec_ip_ops`` searches, where pgvector is 0.7 or
newer, and none before — the audited retrieval's exact scores need no graph; the stored
rows stay float32). A state whose database lacks the ``vector`` extension
(and may not create it) keeps embeddings in ``documents.vector`` as SQLite does.

**Reconnects.** Every pooled connection is checked when it is taken from the pool
(``psycopg_pool``'s ``check_connection``): a connection the server dropped — a restart,
a failover, ``pg_terminate_backend`` — is replaced before a request uses it. A read
that loses its connection mid-statement is retried once on a fresh one; a write
transaction that loses it is rolled back by the server, and the request fails with a
``BackendError`` (HTTP 502) having committed nothing. The window's ledger
(:class:`ragprivacy.audit.PostgresLedgerStorage`) and the budget stores take their
connections from the same pool, so they reconnect the same way; every such failure is
mapped to its one-line ``BackendError`` in one place
(:func:`ragprivacy._storage.map_backend_errors`).

Neither backend's repr or messages hold a secret: a URL is printed without its password.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._postgres import PgPool, create_schema, is_postgres_url, redact_url
from ragprivacy._sqlite import connect_wal
from ragprivacy._storage import postgres_schema
from ragprivacy.audit import EmbeddingSource, MerkleLog, PostgresLedgerStorage
from ragprivacy.dp import BudgetStore, PostgresBudgetStore, SqliteBudgetStore
from ragprivacy.errors import ConfigError
from ragprivacy.service import tenant_vectors
from ragprivacy.service.tenant_vectors import PgvectorTenantVectors

__all__ = [
    "PgvectorTenantVectors",
    "PostgresBackend",
    "SqliteBackend",
    "StateBackend",
    "open_backend",
]

_WAIT_S = 30.0

# The state's tables in SQLite's dialect; PostgreSQL's are derived from it
# (ragprivacy._storage.postgres_schema, as every store's are) so that the two never drift
# apart.
SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (
    tenant TEXT PRIMARY KEY, mode TEXT NOT NULL, k INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    tenant TEXT NOT NULL, pos INTEGER NOT NULL, doc_id TEXT NOT NULL, text TEXT NOT NULL,
    vector BLOB NOT NULL, PRIMARY KEY (tenant, pos), UNIQUE (tenant, doc_id));
CREATE TABLE IF NOT EXISTS accounts (
    account TEXT PRIMARY KEY, tenant TEXT NOT NULL, epsilon REAL NOT NULL,
    delta REAL NOT NULL, rate_limit INTEGER NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, account TEXT NOT NULL, salt BLOB NOT NULL, hash BLOB NOT NULL,
    created REAL NOT NULL, revoked REAL);
CREATE TABLE IF NOT EXISTS windows (
    window_id TEXT PRIMARY KEY, number INTEGER NOT NULL UNIQUE, status TEXT NOT NULL,
    seed BLOB NOT NULL, opened REAL NOT NULL, closed REAL, snapshot TEXT NOT NULL,
    commitments TEXT NOT NULL, coalition TEXT, tree_head TEXT);
CREATE TABLE IF NOT EXISTS tenant_options (tenant TEXT PRIMARY KEY, options TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS failures (
    window_id TEXT NOT NULL, account TEXT NOT NULL, charged INTEGER NOT NULL,
    free INTEGER NOT NULL, PRIMARY KEY (window_id, account)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS idempotency (
    account TEXT NOT NULL, key TEXT NOT NULL, fingerprint TEXT NOT NULL, created REAL NOT NULL,
    response TEXT, PRIMARY KEY (account, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS removals (
    tenant TEXT NOT NULL, doc_id TEXT NOT NULL, requested REAL NOT NULL,
    PRIMARY KEY (tenant, doc_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deletions (tenant TEXT PRIMARY KEY, requested REAL NOT NULL);
CREATE TABLE IF NOT EXISTS witnesses (
    window_id TEXT NOT NULL, proof TEXT NOT NULL, witness TEXT NOT NULL,
    PRIMARY KEY (window_id, proof)) WITHOUT ROWID;
"""


class StateBackend(ABC):
    """The storage under a :class:`ragprivacy.service.ServiceState`.

    SQL is written in SQLite's dialect with ``?`` placeholders and standard upserts
    (``INSERT ... ON CONFLICT``), which both backends run."""

    #: how messages and reprs name the state (no secret in it)
    name: str
    #: the provider's Ed25519 identity key file
    identity_path: Path

    @abstractmethod
    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one query (sees every committed write)."""

    def read_blocks(
        self, sql: str, params: Sequence[Any] = (), rows: int = 4096
    ) -> Iterator[list[tuple[Any, ...]]]:
        """The rows of one read, ``rows`` at a time, from one snapshot of the state (here:
        read whole, then cut; a backend that can stream them holds one block at a time)."""
        result = self.read(sql, params)
        for start in range(0, len(result), rows):
            yield result[start : start + rows]

    @abstractmethod
    def write(self) -> Any:
        """A context manager: one transaction, the only writer of the state while it
        runs; yields an object with ``execute`` and ``executemany``."""

    @abstractmethod
    def ledger(self, window_id: str) -> MerkleLog:
        """The durable Merkle ledger of ``window_id`` (opened anew; the caller closes it)."""

    @abstractmethod
    def budget_store(self, tenant: str, capacity: float) -> BudgetStore:
        """The lifetime per-document budgets of a MURAG/-ADA tenant (they outlive windows)."""

    def create_vector_table(self, conn: Any, tenant: str, dim: int, *, required: bool) -> None:
        """Inside ``conn``'s write transaction: the table a new tenant's embeddings go to,
        where this backend keeps them apart from ``documents``; ``required``: refuse
        (``ConfigError``) where it cannot."""
        if required:
            raise ConfigError(
                f"A state directory keeps embeddings in its documents' rows; a pgvector "
                f"table needs a PostgreSQL state (state {self.name})."
            )

    def vector_table(self, tenant: str) -> str | None:
        """The table that holds ``tenant``'s embeddings, or ``None`` when they are the
        ``documents.vector`` blobs."""
        return None

    def insert_vectors(
        self, conn: Any, tenant: str, rows: Sequence[tuple[int, str, np.ndarray]]
    ) -> None:
        """Inside ``conn``'s write transaction: store (position, document id, float32
        vector) rows in :meth:`vector_table` (only where it is not ``None``)."""
        raise ConfigError(
            f"A state directory keeps embeddings in its documents' rows (state {self.name})."
        )

    def index_vectors(self, tenant: str) -> None:
        """Build ``tenant``'s approximate-search index after an upload, if it has one."""

    def erase(self, conn: Any) -> None:
        """Inside ``conn``'s write transaction, before rows are deleted for erasure: make
        the deleted content unreadable where the backend can (SQLite overwrites freed
        pages with zeros; PostgreSQL keeps dead rows until VACUUM)."""

    def erased(self) -> None:
        """After an erasure committed: drop what still holds the old rows elsewhere."""

    def compact_vectors(
        self, conn: Any, tenant: str, removed: Sequence[str], moves: Sequence[tuple[int, int]]
    ) -> None:
        """Inside ``conn``'s write transaction: drop the ``removed`` ids' embeddings from
        :meth:`vector_table` and move the others' positions ((old, new)), where the
        embeddings are not in the documents' rows."""

    def drop_tenant(self, conn: Any, tenant: str) -> None:
        """Inside ``conn``'s write transaction: what a deleted tenant kept outside the
        state's tables (its pgvector table)."""

    def embeddings(self, tenant: str, count: int, dim: int) -> EmbeddingSource | None:
        """``tenant``'s first ``count`` embeddings as a source read where they are stored,
        or ``None`` when they are blobs (read them with the documents)."""
        return None

    def close(self) -> None:
        """Give back connections this process holds."""

    def backup(self, dest: Path) -> list[str]:
        """Copy the whole state into the new directory ``dest`` while it serves; the
        names of the files copied. A database state is backed up by the database's own
        tools, which say how."""
        raise ConfigError(
            f"The state {self.name} is a database: back it up with its own tools (pg_dump "
            "for PostgreSQL), and copy its identity key file beside the dump."
        )


class SqliteBackend(StateBackend):
    """The state directory (see the module docstring)."""

    def __init__(self, directory: str | Path, *, create: bool) -> None:
        self.directory = Path(directory)
        self.name = str(self.directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ConfigError(f"The state directory {self.directory} is a file; give a directory.")
        if not self.directory.exists():
            if not create:
                raise ConfigError(
                    f"No service state in {self.directory}; create it with 'ragprivacy admin "
                    f"--state {self.directory} tenant create ...'."
                )
            self.directory.mkdir(parents=True, mode=0o700)
        (self.directory / "ledgers").mkdir(exist_ok=True, mode=0o700)
        self.identity_path = self.directory / "identity.key"
        self._local = threading.local()
        # the database (and so its -wal and -shm files, which SQLite gives its mode) is
        # created 0600 before SQLite opens it, never narrowed after: the directory may
        # be one someone else made, open to other users
        with suppress(FileExistsError):
            os.close(os.open(self.directory / "state.sqlite", os.O_CREAT | os.O_EXCL, 0o600))
        self._conn()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect_wal(
                self.directory / "state.sqlite",
                timeout=_WAIT_S,
                synchronous="FULL",
                schema=SCHEMA,
                autocommit=True,
            )
            self._local.conn = conn
        return conn

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self._conn().execute(sql, tuple(params)).fetchall())

    def read_blocks(
        self, sql: str, params: Sequence[Any] = (), rows: int = 4096
    ) -> Iterator[list[tuple[Any, ...]]]:
        # one statement: one read snapshot (WAL) while its cursor is read
        cursor = self._conn().execute(sql, tuple(params))
        try:
            while block := cursor.fetchmany(rows):
                yield block
        finally:
            cursor.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def erase(self, conn: Any) -> None:
        conn.execute("PRAGMA secure_delete = ON")  # this connection's deletes: zeroed

    def erased(self) -> None:
        # the write-ahead log still holds the pages as they were before the erasure
        # (and as they were written): copy it into the (zeroed) database and empty it
        self._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def drop_tenant(self, conn: Any, tenant: str) -> None:
        for suffix in ("", "-wal", "-shm"):  # its MURAG filters' budgets
            (self.directory / "filters" / f"{tenant}.sqlite{suffix}").unlink(missing_ok=True)

    def ledger_path(self, window_id: str) -> Path:
        return self.directory / "ledgers" / f"{window_id}.sqlite"

    def ledger(self, window_id: str) -> MerkleLog:
        return MerkleLog(self.ledger_path(window_id))

    def budget_store(self, tenant: str, capacity: float) -> BudgetStore:
        path = self.directory / "filters" / f"{tenant}.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return SqliteBudgetStore(path, capacity=capacity)

    def backup(self, dest: Path) -> list[str]:
        """A copy of the directory in ``dest`` (created mode 0700, files 0600), taken
        while the service runs: each SQLite file through SQLite's online backup (a
        consistent snapshot of that file; a plain copy of a WAL database being written
        is not one), the identity key as it is.

        The ledgers are copied before ``state.sqlite``: a record's witness is stored
        before its record is appended, so every record in the copied ledgers has its
        witness in the copied state (a witness of a later record is harmless). The copy
        is built beside ``dest`` and renamed into place once complete, so an interrupted
        backup leaves no ``dest``."""
        if dest.exists():
            raise ConfigError(f"The backup directory {dest} exists; name a new one.")
        names = [
            *(f"ledgers/{p.name}" for p in sorted((self.directory / "ledgers").glob("*.sqlite"))),
            *(f"filters/{p.name}" for p in sorted((self.directory / "filters").glob("*.sqlite"))),
            "state.sqlite",
        ]
        work = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
        try:
            for sub in ("", "ledgers", "filters"):
                (work / sub).mkdir(parents=True, mode=0o700)
            for name in names:
                _copy_database(self.directory / name, work / name)
            if self.identity_path.exists():
                _write_secret(work / "identity.key", self.identity_path.read_bytes())
                names.append("identity.key")
            work.rename(dest)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        return names


def _copy_database(source: Path, target: Path) -> None:
    """``source``'s consistent snapshot into the new file ``target`` (mode 0600 from its
    creation), through SQLite's online backup."""
    os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    # read-only: a file removed since it was listed (a deleted tenant's filters) is an
    # error, not a new empty database in the live directory
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=_WAIT_S)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
    finally:
        src.close()


def _write_secret(target: Path, data: bytes) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class PostgresBackend(StateBackend):
    """The state in one PostgreSQL database (see the module docstring).

    Args:
        url: ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB[?...]`` (printed only redacted).
        identity_key: the identity key file (created with mode 0600 at first use).
        pool_size: connections this process keeps (replicas × workers × pool_size must
            stay below the server's ``max_connections``).
    """

    def __init__(self, url: str, *, identity_key: str | Path | None, pool_size: int = 8) -> None:
        if identity_key is None:
            raise ConfigError(
                "A PostgreSQL state needs --identity-key FILE: the provider's signing key "
                "stays a file on the machines that sign (created with mode 0600 at first "
                "use; give every replica the same file)."
            )
        self.url = url
        self.name = redact_url(url)
        self.identity_path = Path(identity_key)
        if self.identity_path.is_dir():
            raise ConfigError(
                f"--identity-key {self.identity_path} is a directory; give a file path."
            )
        self.pool = PgPool(url, max_size=pool_size)
        self.pool.retrying(
            lambda conn: create_schema(conn, postgres_schema(SCHEMA), "ragprivacy/state-schema")
        )
        self._pgvector: bool | None = None
        self._tables: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"PostgresBackend({self.name!r})"

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.pool.read(sql, params)

    def write(self) -> Any:
        return self.pool.transaction(lock="ragprivacy/state")

    def ledger(self, window_id: str) -> MerkleLog:
        return MerkleLog(storage=PostgresLedgerStorage(self.pool, window_id))

    def budget_store(self, tenant: str, capacity: float) -> BudgetStore:
        return PostgresBudgetStore(self.pool, tenant, capacity=capacity)

    # ------------------------------------------------------------------ tenant vectors
    @staticmethod
    def table_name(tenant: str) -> str:
        """``tenant``'s pgvector table (:func:`ragprivacy.service.tenant_vectors.table_name`)."""
        return tenant_vectors.table_name(tenant)

    def create_vector_table(self, conn: Any, tenant: str, dim: int, *, required: bool) -> None:
        if self._pgvector is None:
            self._pgvector = tenant_vectors.has_pgvector(self.pool)
        if not self._pgvector:
            if required:
                raise ConfigError(
                    f"The database {self.name} has no pgvector extension (and this role may "
                    "not create it); install pgvector, or keep the embeddings in the rows."
                )
            return
        table = tenant_vectors.table_name(tenant)
        tenant_vectors.create_table(conn, table, dim)
        self._tables[tenant] = table

    def vector_table(self, tenant: str) -> str | None:
        if tenant not in self._tables:
            table = tenant_vectors.table_name(tenant)
            if not tenant_vectors.table_exists(self.pool, table):
                return None  # a tenant made before, or without pgvector: blobs
            self._tables[tenant] = table
        return self._tables[tenant]

    def insert_vectors(
        self, conn: Any, tenant: str, rows: Sequence[tuple[int, str, np.ndarray]]
    ) -> None:
        table = self.vector_table(tenant)
        if table is None:
            raise ConfigError(f"Tenant {tenant!r} keeps its embeddings in its documents' rows.")
        tenant_vectors.insert_rows(conn, table, rows)

    def index_vectors(self, tenant: str) -> None:
        table = self.vector_table(tenant)
        if table is not None:
            tenant_vectors.build_index(self.pool, table)

    def compact_vectors(
        self, conn: Any, tenant: str, removed: Sequence[str], moves: Sequence[tuple[int, int]]
    ) -> None:
        table = self.vector_table(tenant)
        if table is not None:
            tenant_vectors.compact_rows(conn, table, removed, moves)

    def drop_tenant(self, conn: Any, tenant: str) -> None:
        table = self.vector_table(tenant)
        if table is not None:
            tenant_vectors.drop_table(conn, table)
            self._tables.pop(tenant, None)

    def embeddings(self, tenant: str, count: int, dim: int) -> EmbeddingSource | None:
        table = self.vector_table(tenant)
        if table is None:
            return None
        return PgvectorTenantVectors(
            self.pool, tenant_vectors.qualified(table), size=count, dim=dim
        )

    def close(self) -> None:
        self.pool.close()


def open_backend(
    location: str | Path, *, create: bool, identity_key: str | Path | None = None
) -> StateBackend:
    """The backend a ``--state`` value names: a PostgreSQL URL or a directory."""
    if is_postgres_url(location):
        return PostgresBackend(str(location), identity_key=identity_key)
    if identity_key is not None:
        raise ConfigError(
            "--identity-key is for a PostgreSQL state; a state directory keeps its key in "
            "DIR/identity.key."
        )
    return SqliteBackend(location, create=create)
