"""One contract per storage protocol, run on SQLite and on a real PostgreSQL server.

* Budget stores (``dp.budget_store``; the in-memory one too where no file or server is
  involved): a charge then its release restores every spend, a charge over budget is
  refused and spends nothing, a charge id replays instead of charging twice, what is
  committed survives reopening, and a storage failure is a ``BackendError`` that
  charged nothing (then the retry lands).
* Ledger storages (``audit.ledger_store``, through ``MerkleLog``): appends are durable
  and ordered, a sealed ledger refuses appends from every handle, and a storage failure
  is a ``BackendError`` that appended nothing (then the next append lands).
* State backends (``service.backend``): a write transaction is all or nothing, the SQL
  written in SQLite's dialect runs on both, committed writes are seen by another
  handle, the ledgers and budget stores it hands out work (in PostgreSQL on the state's
  own pool), and a lost connection is a ``BackendError``.

The storage failure is the one each database has: SQLite's is another writer holding
the lock past the wait, PostgreSQL's a connection the server ended
(``pg_terminate_backend``). PostgreSQL cases share one database (each test uses names
of its own) on the session's server (tests/_postgres.py).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragprivacy._postgres import PgPool
from ragprivacy.audit import (
    LedgerStorage,
    LogSealedError,
    MerkleLog,
    PostgresLedgerStorage,
    SqliteLedgerStorage,
)
from ragprivacy.dp import (
    BudgetStore,
    DocumentBudgetExhaustedError,
    MemoryBudgetStore,
    PostgresBudgetStore,
    SqliteBudgetStore,
)
from ragprivacy.errors import BackendError, ConfigError
from ragprivacy.service import PostgresBackend, SqliteBackend, StateBackend

SQLITE = "sqlite"
POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)
DURABLE = [SQLITE, POSTGRES]


def _name() -> str:
    return f"c{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def pg_db(postgres_url: str) -> str:
    """One database for the PostgreSQL cases of this module."""
    from tests._postgres import fresh_database

    return fresh_database(postgres_url, f"contract_{uuid.uuid4().hex[:10]}")


@pytest.fixture(scope="module")
def pg_pool(pg_db: str) -> Iterator[PgPool]:
    pool = PgPool(pg_db, max_size=4)
    yield pool
    pool.close()


def _terminate_connections(db: str) -> None:
    """End every server connection to ``db`` but this one (a restart, a failover)."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@contextmanager
def _sqlite_locked(path: Path) -> Iterator[None]:
    """Another writer holds the SQLite file's write lock for the block."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# ------------------------------------------------------------------------ budget stores


class Budgets:
    """Opens budget stores of one kind, reopens them, and breaks their storage once."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.db: str = request.getfixturevalue("pg_db") if kind == "postgres" else ""
        self.pool: PgPool | None = (
            request.getfixturevalue("pg_pool") if kind == "postgres" else None
        )

    def open(self, capacity: float | list[float] | None, name: str | None = None) -> BudgetStore:
        name = name or _name()
        if self.kind == "memory":
            assert capacity is not None
            return MemoryBudgetStore(capacity)
        if self.kind == SQLITE:
            return SqliteBudgetStore(self.tmp_path / f"{name}.sqlite", capacity, timeout=0.2)
        assert self.pool is not None
        return PostgresBudgetStore(self.pool, name, capacity)

    def reopen(self, store: BudgetStore, capacity: float | None = None) -> BudgetStore:
        if isinstance(store, SqliteBudgetStore):
            return SqliteBudgetStore(store.path, capacity, timeout=0.2)
        assert isinstance(store, PostgresBudgetStore) and self.pool is not None
        return PostgresBudgetStore(self.pool, store.store, capacity)

    def failing(self, store: BudgetStore) -> AbstractContextManager[None]:
        """The next charge's storage fails (lock held past the wait / connection lost
        before the commit)."""
        if isinstance(store, SqliteBudgetStore):
            return _sqlite_locked(store.path)
        assert isinstance(store, PostgresBudgetStore)
        return _hook(store, lambda: _terminate_connections(self.db))


@contextmanager
def _hook(target: Any, hook: Callable[[], None]) -> Iterator[None]:
    target._before_commit = hook
    try:
        yield
    finally:
        target._before_commit = None


@pytest.fixture(params=["memory", *DURABLE])
def budgets(request: pytest.FixtureRequest, tmp_path: Path) -> Budgets:
    return Budgets(request.param, tmp_path, request)


@pytest.fixture(params=DURABLE)
def durable_budgets(request: pytest.FixtureRequest, tmp_path: Path) -> Budgets:
    return Budgets(request.param, tmp_path, request)


def test_a_charge_then_its_release_restores_every_spend(budgets: Budgets) -> None:
    store = budgets.open([2.0, 4.0])
    store.charge(["a"], [0.5, 1.0], charge_id="first")
    before = store.spent(["a", "b"])
    receipt = store.charge(["a", "b"], [1.0, 2.0], charge_id="second")
    assert receipt.doc_ids == ("a", "b") and not receipt.replayed
    np.testing.assert_allclose(store.spent(["a", "b"]), [[1.5, 3.0], [1.0, 2.0]])
    assert store.release("second") and not store.release("second")  # at most once
    np.testing.assert_array_equal(store.spent(["a", "b"]), before)
    assert not store.release("never-made")


def test_a_charge_over_budget_is_refused_and_spends_nothing(budgets: Budgets) -> None:
    store = budgets.open(1.0)
    store.charge(["a"], 0.75)
    with pytest.raises(DocumentBudgetExhaustedError) as err:
        store.charge(["a", "b", "c"], 0.5, charge_id="too-much")
    assert err.value.exhausted == ("a",) and "'a'" not in str(err.value)  # ids stay private
    np.testing.assert_allclose(store.spent(["a", "b", "c"]), [[0.75], [0.0], [0.0]])
    assert not store.release("too-much")  # nothing was recorded to give back
    assert store.active(["a", "b"], 0.5) == ["b"]


def test_a_charge_id_replays_and_is_never_reused_for_another_charge(budgets: Budgets) -> None:
    store = budgets.open(3.0)
    first = store.charge(["a", "b"], 1.0, charge_id="q1")
    again = store.charge(["b", "a"], 1.0, charge_id="q1")
    assert again.replayed and again.doc_ids == first.doc_ids
    with pytest.raises(ConfigError, match="already used"):
        store.charge(["a"], 2.0, charge_id="q1")
    np.testing.assert_allclose(store.spent(["a", "b"]), [[1.0], [1.0]])


def test_what_a_store_committed_survives_reopening(durable_budgets: Budgets) -> None:
    store = durable_budgets.open([2.0, 2.0])
    store.charge(["a"], [1.0, 0.5], charge_id="kept")
    again = durable_budgets.reopen(store)  # capacity read back
    assert again.capacity.tolist() == [2.0, 2.0]
    np.testing.assert_allclose(again.spent(["a"]), [[1.0, 0.5]])
    assert [c.charge_id for c in again.charges()] == ["kept"]  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="created with capacity"):
        durable_budgets.reopen(store, capacity=5.0)
    with pytest.raises(ConfigError, match="pass a capacity"):
        durable_budgets.open(None)


def test_a_storage_failure_is_a_backend_error_that_charged_nothing(
    durable_budgets: Budgets,
) -> None:
    store = durable_budgets.open(1.0)
    with durable_budgets.failing(store), pytest.raises(BackendError) as err:
        store.charge(["secret-doc"], 0.5, charge_id="c")
    assert "secret-doc" not in str(err.value) and "\n" not in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__
    np.testing.assert_allclose(store.spent(["secret-doc"]), [[0.0]])
    assert store.charge(["secret-doc"], 0.5, charge_id="c").charge_id == "c"  # the retry lands
    np.testing.assert_allclose(store.spent(["secret-doc"]), [[0.5]])


# ------------------------------------------------------------------------ ledger storages


class Ledgers:
    """Opens ledger storages of one kind and breaks their storage once."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.db: str = request.getfixturevalue("pg_db") if kind == "postgres" else ""
        self.pool: PgPool | None = (
            request.getfixturevalue("pg_pool") if kind == "postgres" else None
        )

    def storage(self, name: str) -> LedgerStorage:
        if self.kind == SQLITE:
            return SqliteLedgerStorage(self.tmp_path / f"{name}.sqlite")
        assert self.pool is not None
        return PostgresLedgerStorage(self.pool, name)

    def open(self, name: str) -> MerkleLog:
        return MerkleLog(storage=self.storage(name))

    @contextmanager
    def failing(self, log: MerkleLog, storage: LedgerStorage) -> Iterator[None]:
        """The next append's storage fails (lock held past the wait / connection lost
        before the commit)."""
        if isinstance(storage, SqliteLedgerStorage):
            storage._conn().execute("PRAGMA busy_timeout = 100")
            with _sqlite_locked(storage.path):
                yield
            return
        with _hook(log, lambda: _terminate_connections(self.db)):
            yield


@pytest.fixture(params=DURABLE)
def ledgers(request: pytest.FixtureRequest, tmp_path: Path) -> Ledgers:
    return Ledgers(request.param, tmp_path, request)


def test_appends_are_durable_and_ordered(ledgers: Ledgers) -> None:
    name = _name()
    log = ledgers.open(name)
    assert [log.append(f"leaf {i}".encode()) for i in range(5)] == [0, 1, 2, 3, 4]
    assert log.append_many([b"x", b"y"]) == [5, 6]
    again = ledgers.open(name)
    assert again.size == 7 and again.root() == log.root()
    assert again.leaf(0) == b"leaf 0" and again.leaf(6) == b"y"
    again.verify_storage()
    other = ledgers.open(_name())  # another ledger of the same database is empty
    assert other.size == 0
    for m in (log, again, other):
        m.close()


def test_a_sealed_ledger_refuses_appends_from_every_handle(ledgers: Ledgers) -> None:
    name = _name()
    log, late = ledgers.open(name), ledgers.open(name)
    log.append(b"only")
    assert log.seal() == 1 and log.seal() == 1
    for handle in (log, late, ledgers.open(name)):
        with pytest.raises(LogSealedError, match="sealed"):
            handle.append(b"too late")
        assert handle.size == 1
        handle.close()


def test_a_storage_failure_is_a_backend_error_that_appended_nothing(ledgers: Ledgers) -> None:
    name = _name()
    storage = ledgers.storage(name)
    log = MerkleLog(storage=storage)
    log.append(b"before")
    with ledgers.failing(log, storage), pytest.raises(BackendError) as err:
        log.append(b"lost")
    assert "\n" not in str(err.value) and err.value.__cause__ is None
    assert log.size == 1
    assert log.append(b"after") == 1  # the next append lands where the lost one would have
    again = ledgers.open(name)
    assert [again.leaf(i) for i in range(again.size)] == [b"before", b"after"]
    for m in (log, again):
        m.close()


# ------------------------------------------------------------------------ state backends


class Backends:
    """Opens state backends of one kind on one location."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.db: str = request.getfixturevalue("pg_db") if kind == "postgres" else ""
        self.opened: list[StateBackend] = []

    def open(self) -> StateBackend:
        backend: StateBackend
        if self.kind == SQLITE:
            backend = SqliteBackend(self.tmp_path / "state", create=True)
        else:
            backend = PostgresBackend(self.db, identity_key=self.tmp_path / "identity.key")
        self.opened.append(backend)
        return backend


@pytest.fixture(params=DURABLE)
def backends(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backends]:
    made = Backends(request.param, tmp_path, request)
    yield made
    for backend in made.opened:
        backend.close()


def _setting(backend: StateBackend, key: str) -> str | None:
    rows = backend.read("SELECT value FROM settings WHERE key = ?", (key,))
    return None if not rows else str(rows[0][0])


def test_a_state_write_is_all_or_nothing_and_seen_by_another_handle(backends: Backends) -> None:
    one, two = backends.open(), backends.open()
    key, kept = _name(), _name()
    with pytest.raises(RuntimeError, match="half-way"), one.write() as conn:
        conn.execute("INSERT INTO settings VALUES (?, ?)", (key, "lost"))
        raise RuntimeError("half-way")
    assert _setting(one, key) is None
    for value in ("v1", "v2"):  # the same upsert, written once in SQLite's dialect
        with one.write() as conn:
            conn.execute(
                "INSERT INTO settings VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (kept, value),
            )
    assert _setting(two, kept) == "v2"


def test_a_state_hands_out_working_ledgers_and_budget_stores(backends: Backends) -> None:
    one, two = backends.open(), backends.open()
    window, tenant = _name(), _name()
    log = one.ledger(window)
    assert log.append(b"record") == 0
    if isinstance(one, PostgresBackend):  # one pool per process: the state's
        assert log._db is not None and log._db._pool is one.pool  # type: ignore[attr-defined]
    store = one.budget_store(tenant, 2.0)
    store.charge(["d"], 1.5, charge_id="c")
    again = two.ledger(window)
    assert again.size == 1 and again.root() == log.root()
    np.testing.assert_allclose(two.budget_store(tenant, 2.0).spent(["d"]), [[1.5]])
    for m in (log, again):
        m.close()


def test_a_lost_connection_is_a_backend_error_that_committed_nothing(
    backends: Backends,
) -> None:
    if backends.kind == SQLITE:
        pytest.skip("a SQLite state has no server connection to lose")
    backend = backends.open()
    key = _name()
    with pytest.raises(BackendError, match="Lost the connection") as err, backend.write() as conn:
        conn.execute("INSERT INTO settings VALUES (?, ?)", (key, "lost"))
        _terminate_connections(backends.db)
        conn.execute("INSERT INTO settings VALUES (?, ?)", (_name(), "lost"))
    assert "\n" not in str(err.value) and err.value.__cause__ is None
    assert _setting(backend, key) is None  # a read reconnects
    with backend.write() as conn:  # and so does the next write
        conn.execute("INSERT INTO settings VALUES (?, ?)", (key, "kept"))
    assert _setting(backend, key) == "kept"
