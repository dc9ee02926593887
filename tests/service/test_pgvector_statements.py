"""The positions a noise-first selection reads never enter the SQL text the server sees.

Which rows a query reads is chosen by its noise (``ragprivacy.audit.exact_selection``);
:meth:`PgvectorTenantVectors.vectors_at` sends them as a bound ``int8[]`` parameter, so
the statement text — what PostgreSQL's statement log and ``pg_stat_activity.query`` show
— is the same for every query. These tests turn on ``log_statement = 'all'`` for their own
database (``ALTER DATABASE``, superuser) and read the server's log: every statement that
reads a tenant table holds no integer literal, and the rows come back bit for bit. They
also pin what docs/pgvector.md says of bound parameters: the log shows their values
(``DETAIL:  parameters: $1 = '{...}'``) unless ``log_parameter_max_length = 0``.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests._postgres import fresh_database

from ragprivacy._postgres import PgPool
from ragprivacy.corpus import read_jsonl
from ragprivacy.index import PgvectorIndex
from ragprivacy.service import (
    PgvectorTenantVectors,
    PostgresBackend,
    ServiceProvider,
    ServiceState,
    open_window,
)

pytestmark = pytest.mark.postgres

#: one record of the server's log: "<date> <time> <zone> [<pid>] <LEVEL>:  <message>"
_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \S+ \S+ \[(\d+)\] ([A-Z]+):  (.*)$")
#: an integer literal in a statement (a bound parameter's ``$1`` is not one)
_LITERAL = re.compile(r"(?<![$\w])\d+")


@pytest.fixture()
def db(postgres_url: str) -> str:
    return fresh_database(postgres_url, f"t_{uuid.uuid4().hex[:12]}")


def _set(db: str, setting: str, value: str) -> None:
    """``ALTER DATABASE <db> SET setting = value``: every new connection to it has it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(db, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()[0]
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                sql.Identifier(name), sql.Identifier(setting), sql.Literal(value)
            )
        )


def _log_file(db: str) -> Path:
    """The server's log (``tests/_postgres.py`` starts it with ``pg_ctl -l`` next to its
    data directory)."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        data = conn.execute("SHOW data_directory").fetchone()[0]
    return Path(data).parent / "postgres.log"


def _records(log: Path, start: int) -> list[tuple[int, str, str]]:
    """(pid, level, message) of every log record written after byte ``start``."""
    with log.open("rb") as f:
        f.seek(start)
        text = f.read().decode(errors="replace")
    out: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        m = _RECORD.match(line)
        if m:
            out.append((int(m[1]), m[2], m[3]))
        elif out:  # a continuation line of the record before
            pid, level, message = out[-1]
            out[-1] = (pid, level, f"{message}\n{line}")
    return out


def _statements(records: list[tuple[int, str, str]], table: str) -> list[tuple[str, str | None]]:
    """Each logged statement that names ``table``, with the DETAIL record (its bound
    parameters) its backend logged next, if the backend's next record is one."""
    found: list[tuple[str, str | None]] = []
    for i, (pid, level, message) in enumerate(records):
        if level != "LOG" or table not in message:
            continue
        following = [(lv, m) for p, lv, m in records[i + 1 :] if p == pid][:1]
        detail = following[0][1] if following and following[0][0] == "DETAIL" else None
        found.append((message, detail))
    return found


def _literals(statement: str, table: str) -> list[str]:
    """The integer literals of a logged statement (the table's own name aside)."""
    text = statement.split(": ", 1)[-1].replace(table, "<table>")
    return _LITERAL.findall(text)


def test_vectors_at_binds_the_positions_and_reads_the_same_bits(db: str) -> None:
    rng = np.random.default_rng(11)
    n, dim = 300, 8
    x = rng.standard_normal((n, dim)).astype(np.float32)
    special = np.array([-0.0, 1e-45, 3.4028235e38, -1.1754944e-38], dtype=np.float32)
    x[113, :4] = special  # negative zero, a subnormal, the largest and a tiny normal
    table = f"tv_{uuid.uuid4().hex[:10]}"
    index = PgvectorIndex(db, dim=dim, table=table)  # its binary COPY stores x exactly
    index.add(x, [f"d{i}" for i in range(n)])
    index.close()
    qualified = f"public.{table}"

    _set(db, "log_statement", "all")
    log = _log_file(db)
    picked = [271, 113, 199, 113, 0]
    pool = PgPool(db)
    try:
        source = PgvectorTenantVectors(pool, qualified, size=n, dim=dim)
        start = log.stat().st_size
        got = source.vectors_at(picked)
        records = _records(log, start)
        stored = np.concatenate(list(source.chunks(64)))
    finally:
        pool.close()
    assert got.dtype == np.float32 and got.shape == (len(picked), dim)
    assert np.array_equal(got.view(np.uint32), x[picked].view(np.uint32))  # bit for bit
    assert np.array_equal(got.view(np.uint32), stored[picked].view(np.uint32))

    statements = _statements(records, qualified)
    assert statements, "the server logged no statement on the table: log_statement is off"
    for statement, detail in statements:
        assert _literals(statement, qualified) == [], statement
        assert "ANY($1)" in statement
        # PostgreSQL logs a bound parameter's value with the statement (by default,
        # log_parameter_max_length = -1): the positions are out of the text, not the log
        assert detail is not None and "$1 = '{0,113,199,271}'" in detail

    # log_parameter_max_length = 0 keeps the values out of the log as well
    _set(db, "log_parameter_max_length", "0")
    pool = PgPool(db)
    try:
        start = log.stat().st_size
        PgvectorTenantVectors(pool, qualified, size=n, dim=dim).vectors_at([57, 263])
        records = _records(log, start)
    finally:
        pool.close()
    statements = _statements(records, qualified)
    assert statements
    for statement, detail in statements:
        assert _literals(statement, qualified) == [] and detail is None, (statement, detail)


def test_the_services_noise_first_reads_keep_positions_out_of_the_sql(
    db: str, tmp_path: Path, corpus_file: Any
) -> None:
    """A PostgreSQL state's audited queries (noise first: a few dozen rows of the tenant's
    pgvector table by position, then the selected rows' openings): every statement on
    the table that the server logged while they ran holds no integer literal."""
    _set(db, "log_statement", "all")
    state = ServiceState(db, identity_key=tmp_path / "identity.key", embedder="hashing:384")
    try:
        state.create_tenant("clinic", k=3)
        state.add_documents("clinic", read_jsonl(corpus_file(tmp_path / "c.jsonl", "clinic", 150)))
        state.create_account("clinic", "alice", epsilon=4.0, delta=1e-6, rate_limit=20)
        backend = state.backend
        assert isinstance(backend, PostgresBackend)
        table = backend.vector_table("clinic")
        assert table is not None
        open_window(state, "W1")
        log = _log_file(db)
        served = ServiceProvider(state)
        try:
            # the replica starts: it reads every committed row once (one COPY of the
            # positions below the committed size) to hold the tenant's Merkle tree
            assert served.window_id() == "W1"
            start = log.stat().st_size
            chosen = {
                tuple(i for i, _ in served.retrieve("alice", q).documents)
                for q in ("asthma patient", "record 7 diabetes", "gout visit 12")
            }
        finally:
            served.close()
        records = _records(log, start)
    finally:
        state.close()
    assert all(len(ids) == 3 for ids in chosen)
    statements = _statements(records, table)
    for statement, _ in statements:
        assert _literals(statement, f"ragprivacy.{table}") == [], statement
    reads = [s for s, _ in statements if "WHERE pos = ANY($1)" in s]
    assert len(reads) >= 3  # at least one read by position per query: noise first ran
