"""Tenant embeddings in pgvector tables, and replicas that survive a reconnect.

A PostgreSQL state keeps each tenant's embeddings in a pgvector table of its own (with
an HNSW index); the audited provider reads them from there instead of holding them in
memory. The same documents, accounts, window seed and queries give the same selected
ids, the same committed roots and the same receipts' top-K hashes as a SQLite state, and
the window's audit export verifies PASS. Then two ``serve`` replicas under load lose
every server connection (``pg_terminate_backend``): the next requests succeed, no
account is overspent and the window verifies.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import time
import types
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests._load import slowdown
from tests._postgres import fresh_database
from tests.service.conftest import MANY_AT_ONCE, unanswered

from ragprivacy._postgres import PgPool
from ragprivacy.audit import (
    MerkleLog,
    PostgresLedgerStorage,
    QueryRecord,
    Receipt,
    TenantCommitment,
    Verifier,
    fixed_point,
    load_window,
)
from ragprivacy.audit.noise import integer_scores
from ragprivacy.cli import main
from ragprivacy.corpus import read_jsonl
from ragprivacy.errors import BackendError, ConfigError
from ragprivacy.index import PgvectorIndex
from ragprivacy.service import (
    PgvectorTenantVectors,
    PostgresBackend,
    ServiceProvider,
    ServiceState,
    close_window,
    export_auditor,
    open_window,
)
from ragprivacy.service import provider as provider_module

pytestmark = pytest.mark.postgres
Json = dict[str, Any]
SEED = bytes(range(32))  # the window seed both states draw (a test only)
QUERIES = ["asthma patient", "record 7 diabetes", "gout visit 12", "fracture", "migraine 3"]


@pytest.fixture()
def db(postgres_url: str) -> str:
    return fresh_database(postgres_url, f"t_{uuid.uuid4().hex[:12]}")


def _populate(state: ServiceState, corpus_file: Any, root: Path) -> None:
    state.create_tenant("clinic", k=3)
    state.create_tenant("firm.b-2", k=2)  # '.' and '-' in a tenant id: a hashed table name
    state.add_documents("clinic", read_jsonl(corpus_file(root / "c.jsonl", "clinic", 150)))
    state.add_documents("firm.b-2", read_jsonl(corpus_file(root / "f.jsonl", "firm", 60)))
    for tenant, account in (("clinic", "alice"), ("clinic", "bob"), ("firm.b-2", "carol")):
        state.create_account(tenant, account, epsilon=4.0, delta=1e-6, rate_limit=20)


def _open_with_seed(state: ServiceState, monkeypatch: pytest.MonkeyPatch) -> None:
    """Open W1 with the fixed seed :data:`SEED` (the provider module's os.urandom)."""
    fake = types.SimpleNamespace(urandom=lambda n: SEED[:n], chmod=os.chmod)
    with monkeypatch.context() as m:
        m.setattr(provider_module, "os", fake)
        open_window(state, "W1")


def _ask(state: ServiceState) -> tuple[list[tuple[str, ...]], list[Json]]:
    served = ServiceProvider(state)
    ids, receipts = [], []
    for account in ("alice", "bob", "carol"):
        for q in QUERIES:
            answer = served.retrieve(account, q)
            ids.append(tuple(i for i, _ in answer.documents))
            receipts.append(answer.receipt)
    served.close()
    return ids, receipts


def test_pgvector_tenants_answer_like_sqlite_and_the_window_verifies(
    db: str, tmp_path: Path, corpus_file: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = tmp_path / "identity.key"
    lite = ServiceState(tmp_path / "lite", embedder="hashing:384")
    pg = ServiceState(db, identity_key=key, embedder="hashing:384")
    (tmp_path / "lite" / "identity.key").write_bytes(os.urandom(32))
    for state in (lite, pg):
        _populate(state, corpus_file, tmp_path)

    # where the PostgreSQL state put the embeddings: one pgvector table per tenant, with
    # its HNSW index, the documents' rows without a blob, the floats bit for bit
    backend = pg.backend
    assert isinstance(backend, PostgresBackend)
    for tenant, n in (("clinic", 150), ("firm.b-2", 60)):
        table = backend.vector_table(tenant)
        assert table == PostgresBackend.table_name(tenant) and table.startswith("tenant_vectors_")
        assert pg._rows(f"SELECT count(*) FROM {table}")[0][0] == n
        assert pg._rows(
            "SELECT count(*) FROM documents WHERE tenant = ? AND length(vector) > 0", (tenant,)
        ) == [(0,)]
        assert pg._rows("SELECT indexdef FROM pg_indexes WHERE indexname = ?", (f"{table}_hnsw",))
        _, _, v_lite = lite.documents(tenant)
        _, _, v_pg = pg.documents(tenant)
        assert v_pg.dtype == np.float32 and np.array_equal(v_lite, v_pg)
        _, source = pg.embeddings(tenant)
        assert isinstance(source, PgvectorTenantVectors)
        picked = [n - 1, 0, 17, 17]
        assert np.array_equal(source.vectors_at(picked), v_lite[picked])
        assert [len(b) for b in source.chunks(64)] == [64] * (n // 64) + [n % 64]
    assert lite.backend.vector_table("clinic") is None  # SQLite keeps its blobs
    with pytest.raises(ConfigError, match="PostgreSQL state"):
        lite.create_tenant("other", vector_table=True)
    pg.create_tenant("inline", vector_table=False)  # --inline-vectors: the rows, as before
    pg.add_documents("inline", read_jsonl(corpus_file(tmp_path / "i.jsonl", "inline", 5)))
    assert backend.vector_table("inline") is None
    _, inline = pg.embeddings("inline")
    assert isinstance(inline, np.ndarray) and inline.shape == (5, 384)

    # the pgvector table is an ordinary pgvector index: its HNSW graph searches it, and
    # its float32 inner products are close to (not always equal to) the exact scores
    table = backend.vector_table("clinic")
    assert table is not None
    joiner = "&" if "?" in db else "?"
    index = PgvectorIndex(
        f"{db}{joiner}options=-csearch_path%3Dragprivacy,public", dim=pg.embedder().dim, table=table
    )
    query = pg.embedder().encode(["asthma"])
    found = index.search(query, 3)
    assert len(found.ids[0]) == 3 and all(i.startswith("clinic-") for i in found.ids[0])
    approx = index.scores(query)[0].astype(np.float64)
    _, _, v_lite = lite.documents("clinic")
    exact = integer_scores(fixed_point(v_lite), fixed_point(query)[0], 20) / 2.0**20
    assert np.max(np.abs(approx - exact)) < 1e-3
    index.close()

    for state in (lite, pg):
        _open_with_seed(state, monkeypatch)
    com_lite, com_pg = lite.window("W1").commitments, pg.window("W1").commitments
    assert com_pg["c_idx"] == com_lite["c_idx"] and com_pg["c_emb"] == com_lite["c_emb"]

    ids_lite, receipts_lite = _ask(lite)
    ids_pg, receipts_pg = _ask(pg)
    assert ids_pg == ids_lite  # the same selection, document for document
    assert [r["topk_hash"] for r in receipts_pg] == [r["topk_hash"] for r in receipts_lite]
    assert len(set(ids_pg)) > 3  # the queries selected different documents

    # the replica held no tenant's vectors, only the trees of their hashes
    served = ServiceProvider(pg)
    _, audited = served._current()
    assert all(c._fixed is None for c in audited._index.values())
    assert isinstance(audited._index[audited.tenant_id("clinic")], TenantCommitment)
    served.close()

    close_window(pg)
    out = export_auditor(pg, "W1", tmp_path / "export")
    transcript, _, package = load_window(out)
    verdict = Verifier(mode="full").verify(
        transcript, [Receipt.from_dict(r) for r in receipts_pg], package
    )
    assert verdict.passed, verdict.failed_check()
    assert len(transcript.records) == 3 * len(QUERIES)
    lite.close()
    pg.close()


# ---------------------------------------------------------------- reconnect under load
def _admin(db: str, key: Path, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["admin", "--state", db, "--identity-key", str(key), *args])
    assert code == 0, out.getvalue()
    return out.getvalue()


async def _burst(
    urls: list[str], jobs: list[tuple[str, str]], done: list[int] | None = None
) -> list[httpx.Response | None]:
    """Every (key, query) at once, spread over the replicas in turn (``None``: no answer);
    ``done[0]`` counts the requests that have finished."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=180, limits=limits) as http:

        async def one(i: int, key: str, q: str) -> httpx.Response | None:
            try:
                return await http.post(
                    f"{urls[i % len(urls)]}/v1/retrieve",
                    json={"query": q},
                    headers={"Authorization": f"Bearer {key}"},
                )
            except httpx.HTTPError:
                return None
            finally:
                if done is not None:
                    done[0] += 1

        return await asyncio.gather(*(one(i, k, q) for i, (k, q) in enumerate(jobs)))


def _other_backends(db: str, select: str) -> list[tuple[object, ...]]:
    """``SELECT <select>`` over every server backend of ``db`` but this one."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            f"SELECT {select} FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()


def _terminate_backends(db: str) -> int:
    """End every server backend of ``db`` but this one; returns how many."""
    return sum(bool(r[0]) for r in _other_backends(db, "pg_terminate_backend(pid)"))


def _backends(db: str) -> int:
    """How many server backends of ``db`` there are besides this one."""
    return len(_other_backends(db, "pid"))


def test_the_pool_and_the_ledger_reconnect_after_their_backends_end(db: str) -> None:
    """Every backend ended: the pool's next read and the ledger's next append succeed on
    new connections; a transaction that loses its connection half-way is a one-line
    BackendError and leaves nothing behind."""
    pool = PgPool(db, max_size=3)
    log = MerkleLog(storage=PostgresLedgerStorage(db, "W1"))
    assert log.append(b"before") == 0 and pool.read("SELECT 1") == [(1,)]
    assert _terminate_backends(db) >= 2
    assert pool.read("SELECT 2") == [(2,)]
    assert log.append(b"after") == 1 and log.size == 2
    # a store opened on a pool whose idle connection was ended creates its schema on a
    # fresh one (the first statement of a request that builds a window's ledger)
    assert _terminate_backends(db) >= 1
    MerkleLog(storage=PostgresLedgerStorage(pool, "W2")).close()
    assert _terminate_backends(db) >= 1
    with pytest.raises(BackendError, match="Lost the connection"), pool.connection() as conn:
        conn.execute("SELECT 1")
    assert pool.read("SELECT 3") == [(3,)]
    with (
        pytest.raises(BackendError, match="Lost the connection") as err,
        pool.transaction() as tx,
    ):
        tx.execute("CREATE TABLE lost_half_way (x int)")
        _terminate_backends(db)
        tx.execute("INSERT INTO lost_half_way VALUES (1)")
    assert "\n" not in str(err.value)
    assert pool.read("SELECT to_regclass('lost_half_way')") == [(None,)]
    assert _terminate_backends(db) >= 1  # the log's connection, idle: replaced on reading
    other = MerkleLog(storage=PostgresLedgerStorage(db, "W1"))
    assert other.size == 2 and other.root() == log.root()
    log.refresh()
    assert log.size == 2
    for m in (log, other):
        m.close()
    pool.close()
    # no free connection in time is "busy", not a lost connection (and not retried)
    small = PgPool(db, max_size=1)
    small._pool.timeout = 0.3
    with small.connection(), pytest.raises(BackendError, match="stayed busy"):
        small.read("SELECT 1")
    small.close()


def test_replicas_reconnect_after_their_backends_are_terminated_under_load(
    db: str, tmp_path: Path, corpus_file: Any, server_factory: Any
) -> None:
    """Two replicas serve three accounts (r = 25); while a burst of 60 queries runs,
    every server backend of the database is terminated, twice. Requests in flight may
    fail (502, nothing kept but what committed); every later request is answered (200,
    or 429 past r); no account has more than r records; every receipt matches its
    record; the window verifies."""
    r = 25
    key = tmp_path / "identity.key"
    _admin(db, key, "tenant", "create", "clinic", "--k", "3")
    _admin(db, key, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "clinic", 80)))
    keys = {}
    for account in ("a", "b", "c"):
        _admin(db, key, "account", "create", "clinic", account, "--eps", "4", "--delta",
               "1e-6", "--rate-limit", str(r))  # fmt: skip
        keys[account] = _admin(db, key, "key", "create", account).strip().splitlines()[-1]
    _admin(db, key, "window", "open")
    extra = ("--identity-key", str(key), *MANY_AT_ONCE)
    replicas = [server_factory(db, extra=extra), server_factory(db, extra=extra)]
    urls = [s.url for s in replicas]
    jobs = [(keys[a], f"visit {i} {a} gout") for i in range(20) for a in keys]
    waves = [jobs[i : i + 20] for i in range(0, len(jobs), 20)]
    ended: list[int] = []  # backends ended by each termination

    async def load() -> list[httpx.Response | None]:
        # the burst comes in three waves; once half of each of the first two has finished
        # (with requests in flight, unless a slow machine let them all finish first),
        # every backend of the database is ended, after the replicas' pools have
        # connected again (they keep one connection each), so that each termination ends
        # live connections and the next wave starts only after it
        answers: list[httpx.Response | None] = []
        for n, wave in enumerate(waves):
            done = [0]
            task = asyncio.ensure_future(_burst(urls, wave, done))
            if n < len(waves) - 1:
                while done[0] < len(wave) // 2 and not task.done():
                    await asyncio.sleep(0.01)
                deadline = time.monotonic() + 60 * slowdown()
                while await asyncio.to_thread(_backends, db) < 2:
                    assert time.monotonic() < deadline, "the replicas did not reconnect"
                    await asyncio.sleep(0.05)
                ended.append(await asyncio.to_thread(_terminate_backends, db))
            answers += await task
        return answers

    first = asyncio.run(load())
    assert len(ended) == 2 and min(ended) >= 1, ended
    codes = Counter(a.status_code if a is not None else None for a in first)
    if not set(codes) <= {200, 502}:  # a lost connection is a 502, never a 500
        logs = "\n".join(s.stop()[-6000:] for s in replicas)
        raise AssertionError(f"{dict(codes)}\n{logs}")
    # after the loss: every request of both replicas is answered, up to each account's r
    more = [(keys[a], f"after {i} {a}") for i in range(r) for a in keys]
    second = asyncio.run(_burst(urls, more))
    codes = Counter(a.status_code if a is not None else None for a in second)
    assert set(codes) <= {200, 429} and codes[200] > 0, dict(codes)
    ok = [a for a in first + second if a is not None and a.status_code == 200]
    records = httpx.get(f"{urls[1]}/v1/audit/windows/W1/records", timeout=60).json()
    receipts = [a.json()["receipt"] for a in ok]
    names = {x["account"]: x["holder"] for x in receipts}  # records carry pseudonyms
    per_account = Counter(names[QueryRecord.from_bytes(x.encode()).account] for x in records)
    assert per_account == dict.fromkeys(keys, r), dict(per_account)  # nothing overspent
    assert len({x["position"] for x in receipts}) == len(receipts)
    for x in receipts:
        rec = QueryRecord.from_bytes(records[x["position"]].encode())
        assert rec.account == x["account"]
        assert rec.opens_to(x["salt"], x["query_hash"], x["topk_hash"])
    budget = httpx.get(
        f"{urls[0]}/v1/budget", headers={"Authorization": f"Bearer {keys['a']}"}, timeout=60
    ).json()
    assert (budget["used"], budget["remaining"]) == (r, 0)

    _admin(db, key, "window", "close", "--export-auditor", str(tmp_path / "auditor"))
    receipts_dir = tmp_path / "receipts"
    (receipts_dir / "unanswered").mkdir(parents=True)
    for x in receipts:
        with (receipts_dir / f"{x['account']}.jsonl").open("a") as f:
            f.write(json.dumps(x, sort_keys=True) + "\n")
    # a request that lost its connection after its record was appended brought no receipt
    # back: logged as the shipped client logs it, its record is not one never asked for
    for u in unanswered(jobs + more, first + second, keys):
        with (receipts_dir / "unanswered" / "requests.jsonl").open("a") as f:
            f.write(json.dumps(u, sort_keys=True) + "\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["audit", "verify", "--url", urls[0], "--receipts", str(receipts_dir),
                     "--auditor", str(tmp_path / "auditor"), "--json"])  # fmt: skip
    verdict = json.loads(out.getvalue())
    assert verdict["verdict"] == "PASS" and code == 0, verdict["failures"][:3]
