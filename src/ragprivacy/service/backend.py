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
  held in every replica's memory.

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
(:class:`ragprivacy.audit.PostgresLedgerStorage`) reconnects the same way.

Neither backend's repr or messages hold a secret: a URL is printed without its password.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._postgres import (
    SCHEMA as PG_SCHEMA,
)
from ragprivacy._postgres import (
    PgPool,
    connection_lost,
    create_schema,
    is_postgres_url,
    redact_url,
)
from ragprivacy._sqlite import connect_wal
from ragprivacy._typing import FloatArray
from ragprivacy.audit import EmbeddingSource, MerkleLog, PostgresLedgerStorage
from ragprivacy.dp import BudgetStore, PostgresBudgetStore, SqliteBudgetStore
from ragprivacy.errors import BackendError, ConfigError

__all__ = [
    "PgvectorTenantVectors",
    "PostgresBackend",
    "SqliteBackend",
    "StateBackend",
    "open_backend",
]

#: pgvector's HNSW index takes vectors of at most this width (type ``vector``), and
#: half-precision ones (``halfvec``, pgvector ≥ 0.7) of at most the second
_HNSW_MAX_DIM, _HNSW_MAX_HALF_DIM = 2000, 4000
#: HNSW graph settings of a tenant table (pgvector's defaults)
_HNSW_M, _HNSW_EF_CONSTRUCTION = 16, 64
_COPY_MAGIC = b"PGCOPY\n\xff\r\n\x00"
_COPY_HEADER = 19  # magic, int32 flags, int32 header-extension length (0)

_WAIT_S = 30.0

# The state's tables in SQLite's dialect; PostgreSQL's are derived from it (BLOB → BYTEA,
# REAL → DOUBLE PRECISION, no WITHOUT ROWID) so that the two never drift apart.
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
CREATE TABLE IF NOT EXISTS answers (
    window_id TEXT NOT NULL, account TEXT NOT NULL, used INTEGER NOT NULL,
    PRIMARY KEY (window_id, account)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS failures (
    window_id TEXT NOT NULL, account TEXT NOT NULL, charged INTEGER NOT NULL,
    free INTEGER NOT NULL, PRIMARY KEY (window_id, account)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS witnesses (
    window_id TEXT NOT NULL, proof TEXT NOT NULL, witness TEXT NOT NULL,
    PRIMARY KEY (window_id, proof)) WITHOUT ROWID;
"""


def _postgres_schema(schema: str) -> str:
    return (schema.replace(" BLOB", " BYTEA").replace(" REAL", " DOUBLE PRECISION")).replace(
        " WITHOUT ROWID", ""
    )


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

    def index_vectors(self, tenant: str) -> None:
        """Build ``tenant``'s approximate-search index after an upload, if it has one."""

    def embeddings(self, tenant: str, count: int, dim: int) -> EmbeddingSource | None:
        """``tenant``'s first ``count`` embeddings as a source read where they are stored,
        or ``None`` when they are blobs (read them with the documents)."""
        return None

    def close(self) -> None:
        """Give back connections this process holds."""


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
        self._conn()
        (self.directory / "state.sqlite").chmod(0o600)

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

    def ledger_path(self, window_id: str) -> Path:
        return self.directory / "ledgers" / f"{window_id}.sqlite"

    def ledger(self, window_id: str) -> MerkleLog:
        return MerkleLog(self.ledger_path(window_id))

    def budget_store(self, tenant: str, capacity: float) -> BudgetStore:
        path = self.directory / "filters" / f"{tenant}.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return SqliteBudgetStore(path, capacity=capacity)


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
        with self.pool.connection() as conn:
            create_schema(conn, _postgres_schema(SCHEMA), "ragprivacy/state-schema")
        self._pgvector: bool | None = None
        self._tables: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"PostgresBackend({self.name!r})"

    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.pool.read(sql, params)

    def write(self) -> Any:
        return self.pool.transaction(lock="ragprivacy/state")

    def ledger(self, window_id: str) -> MerkleLog:
        return MerkleLog(storage=PostgresLedgerStorage(self.url, window_id))

    def budget_store(self, tenant: str, capacity: float) -> BudgetStore:
        return PostgresBudgetStore(self.pool, tenant, capacity=capacity)

    # ------------------------------------------------------------------ tenant vectors
    def _has_pgvector(self) -> bool:
        """Whether the database has the ``vector`` extension (created if this role may)."""
        if self._pgvector is None:
            with self.pool.connection() as conn:
                found = conn.execute(
                    "SELECT 1 FROM pg_extension WHERE extname = 'vector'"
                ).fetchone()
                if found is None:
                    try:
                        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                        found = (1,)
                    except Exception:  # not installed, or no privilege: blobs it is
                        found = None
            self._pgvector = found is not None
        return self._pgvector

    @staticmethod
    def table_name(tenant: str) -> str:
        """``tenant_vectors_<h>``, h = the first 20 hex digits of SHA-256(tenant)."""
        return "tenant_vectors_" + hashlib.sha256(tenant.encode()).hexdigest()[:20]

    def create_vector_table(self, conn: Any, tenant: str, dim: int, *, required: bool) -> None:
        if not self._has_pgvector():
            if required:
                raise ConfigError(
                    f"The database {self.name} has no pgvector extension (and this role may "
                    "not create it); install pgvector, or keep the embeddings in the rows."
                )
            return
        table = self.table_name(tenant)
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {PG_SCHEMA}.{table} (pos bigint PRIMARY KEY, "
            f"id text NOT NULL UNIQUE, embedding vector({int(dim)}) NOT NULL)"
        )
        self._tables[tenant] = table

    def vector_table(self, tenant: str) -> str | None:
        if tenant not in self._tables:
            table = self.table_name(tenant)
            row = self.pool.read("SELECT to_regclass(?)", (f"{PG_SCHEMA}.{table}",))
            if not row or row[0][0] is None:
                return None  # a tenant made before, or without pgvector: blobs
            self._tables[tenant] = table
        return self._tables[tenant]

    def index_vectors(self, tenant: str) -> None:
        table = self.vector_table(tenant)
        if table is None:
            return
        with self.pool.connection() as conn:
            width = conn.execute(
                "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attname = 'embedding'",
                (f"{PG_SCHEMA}.{table}",),
            ).fetchone()
            dim = 0 if width is None else int(width[0])
            if 0 < dim <= _HNSW_MAX_DIM:
                column = "embedding vector_ip_ops"
            elif (
                _HNSW_MAX_DIM < dim <= _HNSW_MAX_HALF_DIM
                and conn.execute("SELECT to_regtype('halfvec')").fetchone()[0] is not None
            ):
                # wider rows: pgvector's HNSW takes them as half precision (an index
                # for approximate search only; exact scores read the float32 rows)
                column = f"(embedding::halfvec({dim})) halfvec_ip_ops"
            else:
                return  # exact scoring needs no graph (pgvector < 0.7 has no halfvec)
            # one builder at a time (two admins uploading at once would race on the name)
            with conn.transaction():
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"ragprivacy/hnsw/{table}",),
                )
                conn.execute(
                    f"CREATE INDEX IF NOT EXISTS {table}_hnsw ON {PG_SCHEMA}.{table} USING hnsw "
                    f"({column}) WITH (m = {_HNSW_M}, ef_construction = {_HNSW_EF_CONSTRUCTION})"
                )

    def embeddings(self, tenant: str, count: int, dim: int) -> EmbeddingSource | None:
        table = self.vector_table(tenant)
        if table is None:
            return None
        return PgvectorTenantVectors(self.pool, f"{PG_SCHEMA}.{table}", size=count, dim=dim)

    def close(self) -> None:
        self.pool.close()


class PgvectorTenantVectors(EmbeddingSource):
    """A tenant's first ``size`` embeddings in its pgvector table, read through a pool.

    Rows are read in pgvector's binary form — the float32 values themselves, so a row
    comes back bit for bit as it was stored, which the committed fixed point and the
    verifier's integer scores need (pgvector's own ``<#>`` sums in float32 and can differ
    from the exact score in the last bits: the database fetches, numpy scores).
    :meth:`chunks` streams the rows in position order with binary ``COPY`` (one
    statement; no more than ``rows`` rows are held at once), :meth:`vectors_at` fetches
    positions through the primary key with the positions a bound parameter, never in the
    statement's text.

    Args:
        pool: the state's connection pool.
        table: the schema-qualified table (trusted: made by :class:`PostgresBackend`).
        size: how many rows (positions 0 .. size − 1) belong to the committed index.
        dim: the vector width.
    """

    def __init__(self, pool: PgPool, table: str, *, size: int, dim: int) -> None:
        self._pool = pool
        self.table = table
        self.size = int(size)
        self.dim = int(dim)
        self._row = np.dtype(
            [
                ("fields", ">i2"),
                ("l_pos", ">i4"),
                ("pos", ">i8"),
                ("l_vec", ">i4"),
                ("dim", ">i2"),
                ("unused", ">i2"),
                ("x", ">f4", (self.dim,)),
            ]
        )

    def __repr__(self) -> str:
        return f"PgvectorTenantVectors({self.table!r}, size={self.size})"

    def _rows(self, data: bytes | bytearray, expect: Sequence[int] | None) -> np.ndarray:
        got = np.frombuffer(bytes(data), dtype=self._row)
        if (got["fields"] != 2).any() or (got["dim"] != self.dim).any():
            raise BackendError(f"The table {self.table} sent rows of another shape.")
        if expect is not None and not np.array_equal(got["pos"], np.asarray(expect)):
            raise BackendError(
                f"The table {self.table} lacks committed rows (or holds others); it was "
                "changed since the window opened."
            )
        out: np.ndarray = got["x"].astype(np.float32)
        return out

    def _statement(self, where: str) -> str:
        return (
            f"COPY (SELECT pos, embedding FROM {self.table} WHERE {where}) "
            "TO STDOUT (FORMAT BINARY)"
        )

    def vectors_at(self, positions: Sequence[int]) -> FloatArray:
        """The rows at ``positions`` (in the order asked), bit for bit as stored.

        Which positions a query reads is chosen by its noise, so they never enter the
        statement's text (what the server's statement log and ``pg_stat_activity.query``
        show): the statement is always ``SELECT pos, embedding FROM <table> WHERE pos =
        ANY($1) ORDER BY pos``, the positions one ``int8[]`` parameter bound by the
        server (sent in binary), the rows returned in binary — per value the bytes binary
        ``COPY`` sends (both are the type's send function), so the same float32 values.
        (psycopg's ``copy(query, params)`` merges parameters into the text on the client,
        and ``COPY`` takes no bound parameter.) The server still receives the positions,
        and its log shows a bound parameter's value wherever it logs the statement unless
        ``log_parameter_max_length = 0`` (docs/pgvector.md).
        """
        pos = [int(p) for p in positions]
        if not pos:
            return np.zeros((0, self.dim), dtype=np.float32)
        from psycopg.types.numeric import Int8

        order = sorted(set(pos))
        statement = f"SELECT pos, embedding FROM {self.table} WHERE pos = ANY(%b) ORDER BY pos"
        param = [Int8(p) for p in order]
        for attempt in (0, 1):  # a read is retried once on a fresh connection
            try:
                with self._pool.connection() as conn, conn.cursor(binary=True) as cur:
                    cur.execute(statement, (param,))
                    data = self._selected(cur.pgresult)
                break
            except BackendError:
                raise
            except Exception as exc:
                if attempt or not connection_lost(exc):
                    raise BackendError(f"Reading {self.table} failed: {_first_line(exc)}") from None
        rows = self._rows(data, order)
        where = {p: i for i, p in enumerate(order)}
        return rows[[where[p] for p in pos]]

    def _selected(self, result: Any) -> bytes:
        """The binary ``(pos, embedding)`` rows of a result, laid out as binary ``COPY``
        lays out a tuple (field count, then each field's length and bytes), for
        :meth:`_rows`."""
        if result is None or result.nfields != 2:
            raise BackendError(f"The table {self.table} sent a malformed result.")
        out = bytearray()
        for i in range(result.ntuples):
            pos, vec = result.get_value(i, 0), result.get_value(i, 1)
            if pos is None or vec is None or len(pos) != 8 or len(vec) != 4 + 4 * self.dim:
                raise BackendError(f"The table {self.table} sent rows of another shape.")
            out += b"\x00\x02\x00\x00\x00\x08" + bytes(pos)
            out += len(vec).to_bytes(4, "big") + bytes(vec)
        return bytes(out)

    def chunks(self, rows: int) -> Iterator[FloatArray]:
        if self.size == 0:
            return
        width = self._row.itemsize
        step = max(int(rows), 1) * width
        done = 0
        buf = bytearray()
        header = False
        try:
            statement = self._statement(f"pos < {self.size} ORDER BY pos")
            with (
                self._pool.connection() as conn,
                conn.cursor() as cur,
                cur.copy(statement) as copy,
            ):
                for block in copy:
                    buf += block
                    if not header:
                        if len(buf) < _COPY_HEADER:
                            continue
                        if bytes(buf[: len(_COPY_MAGIC)]) != _COPY_MAGIC:
                            raise BackendError(
                                f"The table {self.table} sent a malformed COPY stream."
                            )
                        del buf[:_COPY_HEADER]
                        header = True
                    while len(buf) >= step + 2:  # a whole block (and not the trailer)
                        yield self._rows(buf[:step], range(done, done + rows))
                        done += rows
                        del buf[:step]
            tail = len(buf) - 2
            if tail < 0 or tail % width or bytes(buf[tail:]) != b"\xff\xff":
                raise BackendError(f"The table {self.table} sent a malformed COPY stream.")
            if tail:
                n = tail // width
                yield self._rows(buf[:tail], range(done, done + n))
                done += n
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"Reading {self.table} failed: {_first_line(exc)}") from None
        if done != self.size:
            raise BackendError(
                f"The table {self.table} holds {done} of the {self.size} committed rows; it "
                "was changed since the window opened."
            )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


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
