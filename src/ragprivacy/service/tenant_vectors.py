"""A tenant's embeddings in a pgvector table of its own: every statement on those tables.

A PostgreSQL state keeps each tenant's document embeddings in ``ragprivacy.<table>``,
``<table>`` = :func:`table_name` (why one table per tenant: :mod:`ragprivacy.service.backend`),
laid out as :class:`ragprivacy.index.PgvectorIndex` lays out its tables (``pos``, ``id``,
``embedding vector(d)``, HNSW ``<table>_hnsw`` over ``vector_ip_ops``, or over the
``halfvec`` cast for 2,001 to 4,000 dimensions where pgvector has it). This module writes
the rows (:func:`insert_rows`, in the upload's transaction), builds the graph
(:func:`build_index`) and reads the rows back bit for bit (:class:`PgvectorTenantVectors`),
so that the state and its backend hold no pgvector SQL of their own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ragprivacy._postgres import SCHEMA, PgPool
from ragprivacy._storage import connection_lost, map_backend_errors, read_retrying
from ragprivacy._typing import FloatArray
from ragprivacy.audit import EmbeddingSource
from ragprivacy.errors import BackendError

__all__ = [
    "PgvectorTenantVectors",
    "build_index",
    "create_table",
    "has_pgvector",
    "insert_rows",
    "qualified",
    "table_exists",
    "table_name",
]

#: pgvector's HNSW index takes vectors of at most this width (type ``vector``), and
#: half-precision ones (``halfvec``, pgvector ≥ 0.7) of at most the second
_HNSW_MAX_DIM, _HNSW_MAX_HALF_DIM = 2000, 4000
#: HNSW graph settings of a tenant table (pgvector's defaults)
_HNSW_M, _HNSW_EF_CONSTRUCTION = 16, 64
_COPY_MAGIC = b"PGCOPY\n\xff\r\n\x00"
_COPY_HEADER = 19  # magic, int32 flags, int32 header-extension length (0)


def table_name(tenant: str) -> str:
    """``tenant_vectors_<h>``, h = the first 20 hex digits of SHA-256(tenant) (tenant ids
    may hold ``-`` and ``.``; every replica derives the same name)."""
    return "tenant_vectors_" + hashlib.sha256(tenant.encode()).hexdigest()[:20]


def qualified(table: str) -> str:
    """``table`` in the schema of every table of ours."""
    return f"{SCHEMA}.{table}"


def has_pgvector(pool: PgPool) -> bool:
    """Whether the database has the ``vector`` extension (created if this role may)."""

    def look(conn: Any) -> bool:
        if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
            return True
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except Exception as exc:  # not installed, or no privilege: the embeddings stay blobs
            if connection_lost(exc):  # no answer yet: the caller must not cache "no"
                raise
            return False
        return True

    return pool.retrying(look)


def table_exists(pool: PgPool, table: str) -> bool:
    """Whether ``table`` exists (a tenant made before pgvector, or without it, has none)."""
    row = pool.read("SELECT to_regclass(?)", (qualified(table),))
    return bool(row) and row[0][0] is not None


def create_table(conn: Any, table: str, dim: int) -> None:
    """Inside ``conn``'s transaction: the empty table of a tenant's ``dim``-wide rows."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {qualified(table)} (pos bigint PRIMARY KEY, "
        f"id text NOT NULL UNIQUE, embedding vector({int(dim)}) NOT NULL)"
    )


def insert_rows(conn: Any, table: str, rows: Sequence[tuple[int, str, np.ndarray]]) -> None:
    """Inside ``conn``'s transaction (``?`` placeholders): the rows (position, document
    id, float32 vector), stored bit for bit."""
    if rows:
        conn.executemany(
            f"INSERT INTO {qualified(table)} (pos, id, embedding) VALUES (?, ?, ?::vector)",
            [(pos, doc_id, _vector_text(v)) for pos, doc_id, v in rows],
        )


def compact_rows(
    conn: Any, table: str, removed: Sequence[str], moves: Sequence[tuple[int, int]]
) -> None:
    """Inside ``conn``'s transaction: delete the rows of the ``removed`` ids and move the
    others to their new positions ((old, new), through negative ones so that no two rows
    ever hold one position)."""
    name = qualified(table)
    if removed:
        conn.executemany(f"DELETE FROM {name} WHERE id = ?", [(i,) for i in removed])
    conn.executemany(f"UPDATE {name} SET pos = ? WHERE pos = ?", [(-1 - n, o) for o, n in moves])
    conn.executemany(f"UPDATE {name} SET pos = ? WHERE pos = ?", [(n, -1 - n) for _, n in moves])


def drop_table(conn: Any, table: str) -> None:
    """Inside ``conn``'s transaction: a deleted tenant's table, gone."""
    conn.execute(f"DROP TABLE IF EXISTS {qualified(table)}")


def _vector_text(v: np.ndarray) -> str:
    """pgvector's text form of a float32 row: ``repr`` of each value (as a double)
    is the shortest decimal that parses back, through the server's ``strtof``, to the
    same float32 (a float32 is exactly a double, and the decimal lies within half a
    double's ulp of it), so the table holds the embedder's values bit for bit."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(v, dtype=np.float32)) + "]"


def build_index(pool: PgPool, table: str) -> None:
    """Build ``table``'s HNSW graph after an upload if it has none (the first upload
    builds it in one pass; later rows are inserted into it by the server)."""
    with pool.connection() as conn:
        width = conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass "
            "AND attname = 'embedding'",
            (qualified(table),),
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
                f"CREATE INDEX IF NOT EXISTS {table}_hnsw ON {qualified(table)} USING hnsw "
                f"({column}) WITH (m = {_HNSW_M}, ef_construction = {_HNSW_EF_CONSTRUCTION})"
            )


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
        table: the schema-qualified table (trusted: named by :func:`table_name`).
        size: how many rows (positions 0 .. size − 1) belong to the committed index.
        dim: the vector width.
    """

    def __init__(self, pool: PgPool, table: str, *, size: int, dim: int) -> None:
        self._pool = pool
        self.table = table
        self._store = f"the table {table}"
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

        def once() -> bytes:
            with self._pool.connection() as conn, conn.cursor(binary=True) as cur:
                cur.execute(statement, (param,))
                return self._selected(cur.pgresult)

        data = read_retrying(once, self._store, on_lost=self._pool.replace_lost, reading=True)
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
        with map_backend_errors(self._store, on_lost=self._pool.replace_lost, reading=True):
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
        if done != self.size:
            raise BackendError(
                f"The table {self.table} holds {done} of the {self.size} committed rows; it "
                "was changed since the window opened."
            )
