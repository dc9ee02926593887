"""``PgvectorIndex``: vectors in a PostgreSQL table with a pgvector HNSW index.

One index is one table ``(pos bigint primary key, id text unique, embedding vector(dim))``
in a PostgreSQL database with the ``vector`` extension (pgvector); a multi-tenant service
keeps one table per tenant (one :class:`~ragprivacy.retrieval.KnowledgeBase` each), so a
tenant's queries are scored against its own table only (collusion paper §2.1, eq. 2.1).

* :meth:`search` is pgvector's approximate HNSW search, ``ORDER BY embedding <#> q LIMIT
  k`` (``vector_ip_ops``; with ``metric="cosine"``, ``ORDER BY embedding <=> q`` over
  ``vector_cosine_ops``, the same order for the unit vectors an index stores) with
  ``hnsw.ef_search = max(ef_search, k)``. pgvector 0.6 returns at most ``ef_search``
  (≤ 1000) rows from an HNSW scan, so for ``k > 1000`` the search is an exact scan.
* :meth:`scores` is *exact* for every stored vector — what full noise-then-select must
  noise — by a sequential scan in the database (``SELECT pos, embedding <#> q``), read
  back with binary ``COPY``; :meth:`scores_at` scores chosen positions through the
  primary key (the lazy noise-then-select's non-candidates).
* Scores are computed by pgvector in float32 and returned as inner products (pgvector's
  ``<#>`` is the *negative* inner product).

The HNSW index is built by ``CREATE INDEX`` the first time it is needed (a search or
:meth:`build`), after the bulk load — far faster than growing the graph row by row; rows
added later are inserted into the existing graph. Rows are loaded with binary ``COPY``.

The table is the index's storage: constructing an index on a table that exists opens it
(its rows and positions as stored); :meth:`save` writes a snapshot (ids, vectors and the
settings, without any password) and :func:`~ragprivacy.index.load_index` reopens the
table it names, checking it still holds exactly the saved rows (or refills it from the
snapshot when the table is gone). One object writes to a table at a time: :meth:`add`
refuses (``BackendError``) when the table has rows this object did not add.

psycopg 3 and the ``pgvector`` package (``register_vector``) come with the ``postgres``
extra; they are imported when an index is created.
"""

from __future__ import annotations

import re
import secrets
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray, IntArray
from ragprivacy.errors import BackendError, ConfigError, DataError
from ragprivacy.index._checks import (
    as_queries,
    as_vectors,
    check_dim,
    check_k,
    check_new_ids,
    check_num_threads,
    finish_result,
)
from ragprivacy.index.base import SearchResult, VectorIndex

__all__ = ["PgvectorIndex", "redact_url"]

_TABLE_RE = re.compile(r"^[a-z_][a-z0-9_]{0,50}$")
_METRICS = {"ip": ("vector_ip_ops", "<#>"), "cosine": ("vector_cosine_ops", "<=>")}
_MAX_EF = 1000  # pgvector's upper limit of hnsw.ef_search
_MAX_DIM = 2000  # pgvector's upper limit of an HNSW index's width (type vector)
_COPY_HEADER = 19  # "PGCOPY\n\377\r\n\0", int32 flags, int32 header-extension length (0)
_SCORE_ROW = np.dtype(
    [("n", ">i2"), ("l1", ">i4"), ("pos", ">i8"), ("l2", ">i4"), ("value", ">f8")]
)


def _import_clients() -> tuple[Any, Any, Any]:
    """psycopg, psycopg.sql and pgvector's ``register_vector``, or a BackendError."""
    try:
        import psycopg
        from pgvector.psycopg import register_vector
        from psycopg import sql
    except ImportError as exc:
        raise BackendError(
            "The pgvector index backend needs psycopg 3 and the pgvector package, which "
            "are not installed; install the postgres extra (pip install "
            f"'ragprivacy[postgres]'). ({exc})"
        ) from exc
    return psycopg, sql, register_vector


def redact_url(url: str) -> str:
    """The connection string without its password (what settings and logs may show)."""
    psycopg, _, _ = _import_clients()
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        # libpq's message may quote the string, password included: do not pass it on.
        raise ConfigError(
            "The 'url' parameter is not a valid PostgreSQL connection string; pass a "
            "postgresql:// URL or libpq key=value pairs."
        ) from None
    params.pop("password", None)
    return str(make_conninfo(**{k: str(v) for k, v in params.items()}))


def _one_line(exc: BaseException) -> str:
    """A database error's message on one line (libpq adds indented hint lines)."""
    return " ".join(str(exc).split())


def _vector_text(q: np.ndarray) -> str:
    """pgvector's text form of a float32 vector; ``repr`` of each value round-trips it
    exactly through the server's ``strtof``."""
    return "[" + ",".join(repr(float(x)) for x in q) + "]"


def _copy_rows(data: bytes, dtype: np.dtype, what: str) -> np.ndarray:
    """The fixed-width rows of a binary ``COPY ... TO STDOUT`` stream."""
    body = data[_COPY_HEADER:-2]
    if data[:11] != b"PGCOPY\n\xff\r\n\x00" or len(body) % dtype.itemsize:
        raise BackendError(f"The database sent a malformed binary COPY stream of {what}.")
    return np.frombuffer(body, dtype=dtype)


class PgvectorIndex(VectorIndex):
    """Inner-product HNSW search over a PostgreSQL table (pgvector; see the module doc).

    Args:
        url: a libpq connection string or ``postgresql://`` URL (the registry spec
            ``"pgvector:postgresql://user@host/db"`` passes it); a password may come from
            the URL, ``PGPASSWORD`` or ``~/.pgpass`` and is never shown in
            :meth:`config`.
        dim: vector width.
        table: the table's name (lower-case letters, digits, ``_``); an existing table is
            opened. Default: a new table ``ragprivacy_index_<random>``.
        metric: ``"ip"`` (``vector_ip_ops``) or ``"cosine"`` (``vector_cosine_ops``).
        m: HNSW neighbours per node (pgvector default 16; 2–100).
        ef_construction: build-time candidate list (default 64; at least ``2 * m``).
        ef_search: search-time candidate list (default 40; raised to ``k``; ≤ 1000).
        num_threads: server processes per query and build: sets
            ``max_parallel_maintenance_workers`` and ``max_parallel_workers_per_gather``
            to ``num_threads - 1`` (``None``: the server's settings).
        maintenance_work_mem: memory for building the HNSW graph, e.g. ``"1GB"`` (a
            graph that does not fit builds much more slowly); ``None``: the server's.

    >>> from ragprivacy.index import create_index
    >>> index = create_index("pgvector:postgresql://app@db/rag", dim=384)  # doctest: +SKIP
    """

    name = "pgvector"

    def __init__(
        self,
        url: str,
        *,
        dim: int,
        table: str | None = None,
        metric: str = "ip",
        m: int = 16,
        ef_construction: int = 64,
        ef_search: int = 40,
        num_threads: int | None = None,
        maintenance_work_mem: str | None = None,
    ) -> None:
        super().__init__(check_dim(dim))
        from ragprivacy.index.faiss_index import HnswSettings

        self.settings = HnswSettings(m=m, ef_construction=ef_construction, ef_search=ef_search)
        if not 2 <= m <= 100 or ef_construction < 2 * m or ef_construction > 1000:
            raise ConfigError(
                f"pgvector needs 2 <= m <= 100 and 2*m <= ef_construction <= 1000; got m={m}, "
                f"ef_construction={ef_construction}."
            )
        if ef_search > _MAX_EF:
            raise ConfigError(f"The 'ef_search' parameter must be <= {_MAX_EF}; got {ef_search}.")
        if self.dim > _MAX_DIM:
            raise ConfigError(
                f"pgvector's HNSW index takes vectors of at most {_MAX_DIM} dimensions; got "
                f"dim={self.dim}. Use an embedder of width <= {_MAX_DIM} or another index."
            )
        if metric not in _METRICS:
            raise ConfigError(f"The 'metric' parameter must be 'ip' or 'cosine'; got {metric!r}.")
        if table is not None and (not isinstance(table, str) or not _TABLE_RE.match(table)):
            raise ConfigError(
                f"The 'table' parameter must be a lower-case SQL name (letters, digits, '_', "
                f"at most 51 characters); got {table!r}."
            )
        if maintenance_work_mem is not None and not re.fullmatch(
            r"\d+\s*(kB|MB|GB|TB)?", str(maintenance_work_mem)
        ):
            raise ConfigError(
                f"The 'maintenance_work_mem' parameter must look like '512MB' or '2GB'; got "
                f"{maintenance_work_mem!r}."
            )
        if not isinstance(url, str):
            raise ConfigError(f"The 'url' parameter must be a connection string; got {url!r}.")
        self.num_threads = check_num_threads(num_threads)
        self.metric = metric
        self.maintenance_work_mem = maintenance_work_mem
        self.table = table or f"ragprivacy_index_{secrets.token_hex(6)}"
        self._psycopg, self._sql, register_vector = _import_clients()
        self.url = redact_url(url)
        try:
            self._conn = self._psycopg.connect(url, autocommit=True)
        except self._psycopg.Error as exc:
            raise BackendError(
                f"Cannot connect to PostgreSQL at {self.url!r}: {_one_line(exc)}"
            ) from None
        # Close the connection when the index is collected (or at exit), never leak it.
        self._closer = weakref.finalize(self, self._conn.close)
        self._ident = self._sql.Identifier(self.table)
        self._hnsw_name = self._sql.Identifier(f"{self.table}_hnsw")
        self._id_set: set[str] = set()
        self._cache: np.ndarray | None = None
        self._ef: int | None = None
        # (enable_seqscan, enable_indexscan) of the session. Searches turn sequential scans
        # off so the planner takes the HNSW graph even on small tables; a statement with
        # no other plan (the full scan of scores()) still runs as a sequential scan.
        self._plan: tuple[bool, bool] = (True, True)
        try:
            self._conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            register_vector(self._conn)
            self._open_table()
        except self._psycopg.Error as exc:
            self.close()
            raise BackendError(
                f"PostgreSQL at {self.url!r} refused to set up table {self.table!r}: "
                f"{_one_line(exc)}"
            ) from None

    # -- connection and table ----------------------------------------------------------

    def close(self) -> None:
        """Close the database connection (the table stays)."""
        self._closer()

    def drop(self) -> None:
        """Drop the table (and its HNSW index) and close the connection."""
        self._execute(self._sql.SQL("DROP TABLE IF EXISTS {}").format(self._ident))
        self.close()

    def _execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        try:
            return self._conn.execute(query, params, **kwargs)
        except self._psycopg.Error as exc:
            raise BackendError(
                f"PostgreSQL ({self.url!r}, table {self.table!r}) failed: {_one_line(exc)}"
            ) from None

    def _open_table(self) -> None:
        sql = self._sql
        self._conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (pos bigint PRIMARY KEY, id text NOT NULL "
                "UNIQUE, embedding vector({}) NOT NULL)"
            ).format(self._ident, sql.Literal(self.dim))
        )
        width = self._conn.execute(
            "SELECT atttypmod FROM pg_attribute WHERE attrelid = %s::regclass AND "
            "attname = 'embedding'",
            (self.table,),
        ).fetchone()
        if width is None or int(width[0]) != self.dim:
            raise ConfigError(
                f"Table {self.table!r} holds vectors of width {None if width is None else width[0]}"
                f", not {self.dim}; open it with its own width or choose another table."
            )
        rows = self._conn.execute(
            sql.SQL("SELECT pos, id FROM {} ORDER BY pos").format(self._ident)
        ).fetchall()
        if [int(r[0]) for r in rows] != list(range(len(rows))):
            raise DataError(
                f"Table {self.table!r} does not hold positions 0..n-1 in order; it was not "
                "written by this index backend."
            )
        self._ids = [str(r[1]) for r in rows]
        self._id_set = set(self._ids)
        self._hnsw = self._hnsw_exists()
        self._set_threads()

    def _hnsw_exists(self) -> bool:
        row = self._conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname = %s",
            (self.table, f"{self.table}_hnsw"),
        ).fetchone()
        if row is not None and _METRICS[self.metric][0] not in str(row[0]):
            raise ConfigError(
                f"Table {self.table!r} has an HNSW index for another metric than "
                f"{self.metric!r} ({row[0]}); open it with that metric."
            )
        return row is not None

    def _set_threads(self) -> None:
        if self.num_threads is not None:
            workers = self.num_threads - 1
            self._conn.execute(f"SET max_parallel_maintenance_workers = {workers}")
            self._conn.execute(f"SET max_parallel_workers_per_gather = {workers}")
        if self.maintenance_work_mem is not None:
            self._conn.execute(
                self._sql.SQL("SET maintenance_work_mem = {}").format(
                    self._sql.Literal(self.maintenance_work_mem)
                )
            )

    # -- the VectorIndex interface -----------------------------------------------------

    @property
    def ef_search(self) -> int:
        return self.settings.ef_search

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        from ragprivacy.index.faiss_index import HnswSettings

        if int(value) > _MAX_EF:
            raise ConfigError(f"The 'ef_search' parameter must be <= {_MAX_EF}; got {value}.")
        self.settings = HnswSettings(
            m=self.settings.m, ef_construction=self.settings.ef_construction, ef_search=value
        )

    def config(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "table": self.table,
            "metric": self.metric,
            "m": self.settings.m,
            "ef_construction": self.settings.ef_construction,
            "ef_search": self.settings.ef_search,
            "num_threads": self.num_threads,
            "maintenance_work_mem": self.maintenance_work_mem,
        }

    def add(self, vectors: FloatArray, ids: Sequence[str]) -> None:
        rows = as_vectors(vectors, self.dim)
        new_ids = check_new_ids(ids, rows.shape[0], self._id_set)
        if rows.shape[0] == 0:
            return
        sql = self._sql
        n = len(self)
        try:
            with self._conn.transaction(), self._conn.cursor() as cur:
                cur.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(self._ident))
                count = cur.execute(sql.SQL("SELECT count(*) FROM {}").format(self._ident))
                held = int(count.fetchone()[0])
                if held != n:
                    raise BackendError(
                        f"Table {self.table!r} holds {held} rows but this index added {n}: "
                        "another writer changed it. Open the table again."
                    )
                copy_sql = sql.SQL(
                    "COPY {} (pos, id, embedding) FROM STDIN WITH (FORMAT BINARY)"
                ).format(self._ident)
                with cur.copy(copy_sql) as copy:
                    copy.set_types(["int8", "text", "vector"])
                    for i, (doc_id, row) in enumerate(zip(new_ids, rows)):
                        copy.write_row((n + i, doc_id, row))
        except self._psycopg.Error as exc:
            raise BackendError(
                f"PostgreSQL ({self.url!r}, table {self.table!r}) refused the new rows: "
                f"{_one_line(exc)}"
            ) from None
        self._ids.extend(new_ids)
        self._id_set.update(new_ids)
        self._cache = None

    def build(self) -> None:
        """Build the HNSW index now (``CREATE INDEX ... USING hnsw``) if it is missing;
        searches do it on first use."""
        if self._hnsw:
            return
        sql = self._sql
        ops, _ = _METRICS[self.metric]
        self._execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON {} USING hnsw (embedding {}) WITH "
                "(m = {}, ef_construction = {})"
            ).format(
                self._hnsw_name,
                self._ident,
                sql.SQL(ops),
                sql.Literal(self.settings.m),
                sql.Literal(self.settings.ef_construction),
            )
        )
        self._hnsw = True

    def search(self, queries: FloatArray, k: int) -> SearchResult:
        q = as_queries(queries, self.dim)
        k = check_k(k)
        k_eff = min(k, len(self))
        positions = np.full((q.shape[0], k_eff), -1, dtype=np.int64)
        values = np.full((q.shape[0], k_eff), -np.inf, dtype=np.float32)
        if k_eff > 0:
            exact = k_eff > _MAX_EF
            if not exact:
                self.build()
            # The HNSW graph must answer whenever it can (the planner would prefer a
            # sequential scan on small tables); past ef_search's limit, an exact scan.
            self._set_plan(seqscan=exact, indexscan=not exact)
            self._set_ef(max(self.settings.ef_search, k_eff))
            _, op = _METRICS[self.metric]
            query = self._sql.SQL(
                "SELECT pos, embedding <#> %(q)s FROM {} ORDER BY embedding {} %(q)s LIMIT %(k)s"
            ).format(self._ident, self._sql.SQL(op))
            for row, vec in enumerate(q):
                found = self._execute(query, {"q": vec, "k": k_eff}).fetchall()
                if found:
                    got = np.array(found, dtype=np.float64)
                    positions[row, : len(found)] = got[:, 0].astype(np.int64)
                    values[row, : len(found)] = (-got[:, 1]).astype(np.float32)
        # deterministic order: best score first, equal scores by lower position, misses last
        missing = positions < 0
        order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, positions), -values))
        return finish_result(
            np.take_along_axis(positions, order, axis=1),
            np.take_along_axis(values, order, axis=1),
            k,
            self._ids,
        )

    def _set_plan(self, *, seqscan: bool, indexscan: bool) -> None:
        """Planner settings of the session for the next statement (set when they change)."""
        if (seqscan, indexscan) != self._plan:
            self._execute(f"SET enable_seqscan = {'on' if seqscan else 'off'}")
            self._execute(f"SET enable_indexscan = {'on' if indexscan else 'off'}")
            self._plan = (seqscan, indexscan)

    def _set_ef(self, ef: int) -> None:
        ef = min(ef, _MAX_EF)
        if ef != self._ef:
            self._execute(f"SET hnsw.ef_search = {int(ef)}")
            self._ef = ef

    def scores(self, queries: FloatArray) -> FloatArray:
        """Exact inner products with every stored vector, by a sequential scan in the
        database (binary ``COPY`` of ``(pos, embedding <#> q)``)."""
        q = as_queries(queries, self.dim)
        n = len(self)
        out = np.empty((q.shape[0], n), dtype=np.float32)
        if n == 0:
            return out
        for row, vec in enumerate(q):
            copy_sql = self._sql.SQL(
                "COPY (SELECT pos, embedding <#> {}::vector FROM {}) TO STDOUT (FORMAT BINARY)"
            ).format(self._sql.Literal(_vector_text(vec)), self._ident)
            data = self._copy_out(copy_sql)
            got = _copy_rows(data, _SCORE_ROW, "scores")
            if got.size != n or (got["n"] != 2).any() or (got["l2"] != 8).any():
                raise BackendError(
                    f"Table {self.table!r} returned {got.size} scores; this index holds {n}. "
                    "Another writer changed it; open the table again."
                )
            out[row, got["pos"]] = -got["value"]
        return out

    def scores_at(self, query: FloatArray, positions: IntArray) -> FloatArray:
        """Exact inner products of one query with the given positions (primary-key
        look-ups in the database)."""
        q = as_queries(query, self.dim)
        if q.shape[0] != 1:
            raise ConfigError(f"scores_at takes one query; got {q.shape[0]}.")
        pos = np.asarray(positions, dtype=np.int64).reshape(-1)
        if pos.size and (pos.min() < 0 or pos.max() >= len(self)):
            raise ConfigError(
                f"Positions must lie in [0, {len(self)}); got {pos.min()}..{pos.max()}."
            )
        if pos.size == 0:
            return np.empty(0, dtype=np.float32)
        found = self._execute(
            self._sql.SQL(
                "SELECT pos, embedding <#> %s FROM {} WHERE pos = ANY(%s::int8[])"
            ).format(self._ident),
            (q[0], pos.tolist()),
        ).fetchall()
        got = np.array(found, dtype=np.float64).reshape(-1, 2)
        lookup = dict(zip(got[:, 0].astype(np.int64).tolist(), (-got[:, 1]).tolist()))
        try:
            return np.array([lookup[int(p)] for p in pos], dtype=np.float32)
        except KeyError:
            raise BackendError(
                f"Table {self.table!r} lacks rows this index added; open the table again."
            ) from None

    def vectors(self) -> FloatArray:
        """The stored vectors ``[n, dim]`` read from the table (binary ``COPY``), cached
        read-only until the next :meth:`add`."""
        if self._cache is None:
            n = len(self)
            arr = np.empty((0, self.dim), dtype=np.float32)
            if n:
                row = np.dtype(
                    [
                        ("n", ">i2"),
                        ("len", ">i4"),
                        ("dim", ">i2"),
                        ("unused", ">i2"),
                        ("x", ">f4", (self.dim,)),
                    ]
                )
                data = self._copy_out(
                    self._sql.SQL(
                        "COPY (SELECT embedding FROM {} ORDER BY pos) TO STDOUT (FORMAT BINARY)"
                    ).format(self._ident)
                )
                got = _copy_rows(data, row, "vectors")
                if got.size != n or (got["dim"] != self.dim).any():
                    raise BackendError(
                        f"Table {self.table!r} returned {got.size} vectors; this index holds "
                        f"{n}. Another writer changed it; open the table again."
                    )
                arr = got["x"].astype(np.float32)
            arr.flags.writeable = False
            self._cache = arr
        return self._cache

    def _copy_out(self, query: Any) -> bytes:
        try:
            with self._conn.cursor() as cur, cur.copy(query) as copy:
                return b"".join(bytes(block) for block in copy)
        except self._psycopg.Error as exc:
            raise BackendError(
                f"PostgreSQL ({self.url!r}, table {self.table!r}) failed: {_one_line(exc)}"
            ) from None

    # -- persistence -------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write a snapshot (ids, vectors, settings without any password); loading it
        reopens the table."""
        from ragprivacy.index._persist import save_index_dir

        save_index_dir(
            path,
            backend=self.name,
            dim=self.dim,
            ids=self._ids,
            vectors=self.vectors(),
            config=self.config(),
        )

    @classmethod
    def _from_saved(cls, saved: Any) -> PgvectorIndex:
        cfg = saved.config
        index = cls(str(cfg.pop("url", "")), dim=int(saved.manifest["dim"]), **cfg)
        if len(index) == 0 and saved.ids:
            index.add(saved.vectors, saved.ids)  # the table was gone: refill it
        if index.ids != saved.ids or not np.array_equal(index.vectors(), saved.vectors):
            index.close()
            raise DataError(
                f"Table {index.table!r} no longer holds the rows saved in "
                f"{str(saved.directory)!r}; save the index again or restore the table."
            )
        return index
