"""The service's state on a real PostgreSQL server shared by replicas.

The session's server comes from ``pgserver`` (tests/_postgres.py); each test gets a
database of its own. Stores: the per-document budget store and the Merkle ledger never
overspend or fork when several processes write at once. Service: two ``ragprivacy
serve`` replicas on one database answer exactly an account's rate limit r out of 100
concurrent queries; kill -9 of a replica under load overspends nothing and the window
still verifies from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import multiprocessing
import signal
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import numpy as np
import pytest
from tests._postgres import fresh_database
from tests.service.conftest import MANY_AT_ONCE, unanswered

from ragprivacy._postgres import PgPool, redact_url
from ragprivacy.audit import LogSealedError, MerkleLog, PostgresLedgerStorage, QueryRecord
from ragprivacy.cli import main
from ragprivacy.dp import DocumentBudgetExhaustedError, PostgresBudgetStore
from ragprivacy.errors import BackendError, ConfigError
from ragprivacy.service import ServiceState

pytestmark = pytest.mark.postgres
Json = dict[str, Any]
#: The writer processes start a fresh interpreter: a fork of the test process would copy
#: whatever earlier tests of the session left in it (threads, connection pools, sockets,
#: native libraries' state), so a failure could come from that copy, not from the stores.
#: Service replicas never fork: each is its own ``ragprivacy serve`` process, and
#: uvicorn spawns its workers.
_WORKERS = multiprocessing.get_context("spawn")


@pytest.fixture()
def db(postgres_url: str) -> str:
    """A fresh database of this test's own on the session's server."""
    return fresh_database(postgres_url, f"t_{uuid.uuid4().hex[:12]}")


def test_the_session_database_has_pgvector(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT '[1,2,3]'::vector <-> '[1,2,4]'::vector").fetchone()
    assert row is not None and row[0] == pytest.approx(1.0)


# ---------------------------------------------------------------- state, keys, secrets
def test_a_postgres_state_needs_an_identity_key_and_creates_it_0600(db: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="--identity-key"):
        ServiceState(db)
    key = tmp_path / "identity.key"
    state = ServiceState(db, identity_key=key)
    state.create_tenant("clinic")
    public = state.identity().public_hex
    assert key.stat().st_mode & 0o777 == 0o600
    # a second replica with the same file and database signs as the same provider
    other = ServiceState(db, identity_key=key)
    assert other.identity().public_hex == public
    assert "clinic" in other.tenants()
    with pytest.raises(ConfigError, match="database, not a directory"):
        _ = other.directory
    state.close()
    other.close()


def test_the_urls_password_is_never_printed(db: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # pgserver trusts local connections, so any password is accepted: a URL with one
    secret = "hunter2-" + uuid.uuid4().hex
    parts = urlsplit(db)
    user = parts.username or "postgres"
    with_password = urlunsplit(parts._replace(netloc=f"{user}:{secret}@{parts.hostname or ''}"))
    assert secret in with_password
    state = ServiceState(with_password, identity_key=tmp_path / "k")
    assert secret not in repr(state) and secret not in state.location
    assert secret not in repr(state.backend)
    assert "***" in redact_url(with_password)
    with pytest.raises(ConfigError, match="pg_dump") as refused:  # a database backs itself up
        state.backup(tmp_path / "copy")
    assert secret not in str(refused.value) and not (tmp_path / "copy").exists()
    state.close()
    dead = f"postgresql://app:{secret}@127.0.0.1:1/nothing?connect_timeout=2"
    with pytest.raises(BackendError) as err:
        ServiceState(dead, identity_key=tmp_path / "k")
    assert secret not in str(err.value) and "***" in str(err.value)


# ---------------------------------------------------------------- budget store
def _charge_many(args: tuple[str, int]) -> int:
    db, n = args
    pool = PgPool(db, max_size=2)
    store = PostgresBudgetStore(pool, "clinic")
    ok = 0
    for i in range(n):
        try:
            store.charge(["a", "b"], 1.0, charge_id=f"{uuid.uuid4().hex}-{i}")
            ok += 1
        except DocumentBudgetExhaustedError:
            pass
    pool.close()
    return ok


def test_the_budget_store_never_overspends_across_processes(db: str) -> None:
    pool = PgPool(db, max_size=2)
    PostgresBudgetStore(pool, "clinic", capacity=17.0)
    with pytest.raises(ConfigError, match="capacity"):
        PostgresBudgetStore(pool, "clinic", capacity=3.0)
    pool.close()
    with _WORKERS.Pool(4) as procs:
        done = procs.map(_charge_many, [(db, 10)] * 4)
    pool = PgPool(db, max_size=2)
    store = PostgresBudgetStore(pool, "clinic")
    assert sum(done) == 17
    assert store.spent(["a", "b", "c"]).tolist() == [[17.0], [17.0], [0.0]]
    # idempotent charge ids, release at most once, and a refused charge changes nothing
    receipt = PostgresBudgetStore(pool, "firm", capacity=[2.0, 4.0]).charge(
        ["x"], [1.0, 1.0], charge_id="c1"
    )
    firm = PostgresBudgetStore(pool, "firm")
    assert firm.charge(["x"], [1.0, 1.0], charge_id="c1").replayed
    with pytest.raises(DocumentBudgetExhaustedError) as err:
        firm.charge(["x", "y"], [1.5, 0.0])
    assert list(err.value.exhausted) == ["x"]
    assert firm.spent(["x", "y"]).tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert firm.release(receipt.charge_id) and not firm.release(receipt.charge_id)
    assert np.all(firm.spent(["x"]) == 0)
    assert [c.charge_id for c in firm.charges()] == []
    pool.close()


# ---------------------------------------------------------------- ledger
def _append_many(args: tuple[str, int, int]) -> list[tuple[int, bytes]]:
    """``n`` threads each append one record; the (position, record) each was told."""
    db, who, n = args
    log = MerkleLog(storage=PostgresLedgerStorage(db, "W1"))
    out = []
    lock = threading.Lock()

    def one(i: int) -> None:
        record = f"{who}:{i}".encode()
        idx = log.append(record)
        with lock:
            out.append((idx, record))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    return out


def test_replicas_appending_to_one_window_share_one_append_order(db: str) -> None:
    """Three processes × 20 threads append to one window's ledger at once: 60 distinct
    positions, the tree re-read from the database equals every writer's, the stored
    nodes verify, and a seal refuses later appends from any process."""
    with _WORKERS.Pool(3) as procs:
        got = procs.map(_append_many, [(db, w, 20) for w in range(3)])
    told = {record: idx for g in got for idx, record in g}
    log = MerkleLog(storage=PostgresLedgerStorage(db, "W1"))
    stored = {log.leaf(i): i for i in range(log.size)}
    # every append was told the position the database holds its record at
    assert told == stored, (sorted(told.values()), log.size)
    assert sorted(told.values()) == list(range(60))
    log.verify_storage()
    other = MerkleLog(storage=PostgresLedgerStorage(db, "W2"))  # another window: empty
    assert other.size == 0
    assert log.seal() == 60
    late = MerkleLog(storage=PostgresLedgerStorage(db, "W1"))
    assert late.sealed and late.root() == log.root()
    with pytest.raises(LogSealedError, match="sealed"):
        late.append(b"too late")
    for m in (log, other, late):
        m.close()


# ---------------------------------------------------------------- two replicas
def _admin(db: str, key: Path, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["admin", "--state", db, "--identity-key", str(key), *args])
    assert code == 0, out.getvalue()
    return out.getvalue()


def _make_service(
    db: str, root: Path, corpus_file: Any, accounts: dict[str, int]
) -> tuple[Path, dict[str, str]]:
    key = root / "identity.key"
    _admin(db, key, "tenant", "create", "clinic", "--k", "3")
    _admin(db, key, "docs", "add", "clinic", str(corpus_file(root / "c.jsonl", "clinic", 40)))
    keys = {}
    for account, rate in accounts.items():
        _admin(db, key, "account", "create", "clinic", account, "--eps", "4", "--delta",
               "1e-6", "--rate-limit", str(rate))  # fmt: skip
        keys[account] = _admin(db, key, "key", "create", account).strip().splitlines()[-1]
    _admin(db, key, "window", "open")
    return key, keys


async def _burst(urls: list[str], jobs: list[tuple[str, str]]) -> list[httpx.Response | None]:
    """Every (key, query) at once, spread over the replicas in turn; a request a killed
    replica never answered gives ``None``."""
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

        return await asyncio.gather(*(one(i, k, q) for i, (k, q) in enumerate(jobs)))


def _records(url: str) -> list[str]:
    r = httpx.get(f"{url}/v1/audit/windows/W1/records", timeout=60)
    assert r.status_code == 200, r.text
    return list(r.json())


def _budget(url: str, key: str) -> Json:
    r = httpx.get(f"{url}/v1/budget", headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert r.status_code == 200, r.text
    out: Json = r.json()
    return out


def _close_and_verify(
    db: str,
    key: Path,
    url: str,
    root: Path,
    receipts: list[Json],
    lost: list[Json] = (),  # type: ignore[assignment]
) -> Json:
    """Close the window and verify it from outside with the receipts, and the requests
    that brought none back (``lost``, as the shipped client logs them)."""
    _admin(db, key, "window", "close", "--export-auditor", str(root / "auditor"))
    receipts_dir = root / "receipts"
    (receipts_dir / "unanswered").mkdir(parents=True)
    for r in receipts:
        with (receipts_dir / f"{r['account']}.jsonl").open("a") as f:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    for u in lost:
        with (receipts_dir / "unanswered" / "requests.jsonl").open("a") as f:
            f.write(json.dumps(u, sort_keys=True) + "\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["audit", "verify", "--url", url, "--receipts", str(receipts_dir),
                     "--auditor", str(root / "auditor"), "--json"])  # fmt: skip
    verdict: Json = json.loads(out.getvalue())
    verdict["exit_code"] = code
    return verdict


def test_two_replicas_and_100_concurrent_clients_give_exactly_r_answers(
    db: str, tmp_path, corpus_file, server_factory
) -> None:  # type: ignore[no-untyped-def]
    """Two ``serve`` processes on one database; 100 queries at once on one account with
    r = 37, half to each replica: exactly 37 answers (at 37 distinct positions), 63
    refusals, 37 records, and the window verifies from outside."""
    r = 37
    key, keys = _make_service(db, tmp_path, corpus_file, {"solo": r})
    extra = ("--identity-key", str(key), *MANY_AT_ONCE)
    replicas = [server_factory(db, extra=extra), server_factory(db, extra=extra)]
    urls = [s.url for s in replicas]
    for url in urls:  # each replica loads the open window before the burst
        _budget(url, keys["solo"])
    jobs = [(keys["solo"], f"patient {i} with asthma") for i in range(100)]
    answers = asyncio.run(_burst(urls, jobs))
    codes = Counter(a.status_code if a is not None else None for a in answers)
    assert codes == {200: r, 429: 100 - r}, dict(codes)
    # Each replica answered its 50 requests (200 or 429); how the 37 answers split between
    # them is scheduling, not the invariant: the count, the positions and the one ledger are.
    receipts = [a.json()["receipt"] for a in answers if a is not None and a.status_code == 200]
    assert sorted(x["position"] for x in receipts) == list(range(r))
    for url in urls:  # both replicas read the one shared ledger
        records = _records(url)
        assert len(records) == r
        assert sorted(QueryRecord.from_bytes(x.encode()).seq for x in records) == list(
            range(1, r + 1)
        )
    budget = _budget(urls[1], keys["solo"])
    assert (budget["used"], budget["remaining"]) == (r, 0)
    verdict = _close_and_verify(db, key, urls[0], tmp_path, receipts)
    assert verdict["verdict"] == "PASS" and verdict["exit_code"] == 0, verdict["failures"][:3]


def test_kill9_of_a_replica_under_load_overspends_nothing_and_the_window_verifies(
    db: str, tmp_path, corpus_file, server_factory
) -> None:  # type: ignore[no-untyped-def]
    """Two replicas serve three accounts (r = 40 each) under a load of 3 × 60 queries;
    one replica is killed with SIGKILL (its whole process group) mid-load. No account
    gets more than r records; every answer a client got has its record at its receipt's
    position; the surviving replica serves the rest; the window verifies."""
    r = 40
    accounts = {"a": r, "b": r, "c": r}
    key, keys = _make_service(db, tmp_path, corpus_file, accounts)
    extra = ("--identity-key", str(key), *MANY_AT_ONCE)
    victim, survivor = server_factory(db, extra=extra), server_factory(db, extra=extra)
    urls = [victim.url, survivor.url]
    jobs = [(keys[a], f"visit {i} {a} gout") for i in range(60) for a in accounts]

    async def load() -> list[httpx.Response | None]:
        task = asyncio.ensure_future(_burst(urls, jobs))
        await asyncio.sleep(0.4)
        victim.stop(signal.SIGKILL)
        return await task

    answers = asyncio.run(load())
    assert any(a is None for a in answers), "the kill interrupted no request"
    ok = [a for a in answers if a is not None and a.status_code == 200]
    unexpected = [
        (a.status_code, a.text[:120]) for a in answers if a is not None and a.status_code >= 500
    ]
    assert not unexpected or all(s in (502, 503) for s, _ in unexpected), unexpected[:3]
    # the survivor serves the rest: top every account up to its limit
    top_up = [(keys[a], f"more {i} {a}") for i in range(r) for a in accounts]
    more = asyncio.run(_burst([survivor.url], top_up))
    ok += [a for a in more if a is not None and a.status_code == 200]
    records = _records(survivor.url)
    receipts = [a.json()["receipt"] for a in ok]
    names = {x["account"]: x["holder"] for x in receipts}  # records carry pseudonyms
    per_account = Counter(names[QueryRecord.from_bytes(x.encode()).account] for x in records)
    assert per_account == dict.fromkeys(accounts, r), dict(per_account)  # nothing overspent
    assert len({x["position"] for x in receipts}) == len(receipts)
    for x in receipts:
        rec = QueryRecord.from_bytes(records[x["position"]].encode())
        assert rec.account == x["account"]
        assert rec.opens_to(x["salt"], x["query_hash"], x["topk_hash"])
    # a killed request may have left a record whose receipt never came back
    lost = unanswered(jobs + top_up, answers + more, keys)
    verdict = _close_and_verify(db, key, survivor.url, tmp_path, receipts, lost)
    assert verdict["verdict"] == "PASS" and verdict["exit_code"] == 0, verdict["failures"][:3]
