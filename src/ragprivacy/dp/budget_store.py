"""Per-document privacy budgets that are never overspent: in memory, SQLite or PostgreSQL.

A store holds, for every document, what it has spent along ``dims`` dimensions (1 for a
pure-ε filter; one per Rényi order for an RDP filter) against one capacity vector shared
by all documents (MURAG's initial budget M·ε_q, Private-RAG Alg. 1). A document that was
never charged has spent nothing.

A charge for a set of documents is atomic: every document must afford it in every
dimension (spent + amount ≤ capacity, up to a relative tolerance of 1e-9 for float sums),
or nothing is charged and :class:`DocumentBudgetExhaustedError` lists the documents that
cannot pay in its ``exhausted`` attribute (its message only counts them: document ids are
private and messages travel to logs and callers). The durable stores do the check and the
debit in one transaction that holds the store's write lock, with one implementation over
SQL that both databases run (``ragprivacy._storage``: the PostgreSQL schema is derived
from the SQLite one, and only the row-locking clause and the maximum's name differ). The
SQLite store's lock is ``BEGIN IMMEDIATE`` (one writer at a time across threads and
processes), in WAL mode with ``synchronous=FULL``: a charge that returned is durable, and
a process killed mid-charge leaves no trace of it. Charges that a process's threads make
at the same time are group-committed: the ones that queue while a commit syncs share the
next transaction, each checked against the ones before it. The PostgreSQL store's lock is
its row (``SELECT ... FOR UPDATE``), for replicas on several machines sharing one
database. A lock held past the wait or a lost connection is a ``BackendError``; the
charge did not land, unless the connection was lost in the ``COMMIT`` itself. A
``charge_id`` makes a charge idempotent, so a client that does not know whether its
charge landed (a crash, a timeout, that lost ``COMMIT``) can retry safely; a retry must
repeat the same request (same documents, same amount): reusing an id for a different
request raises ``ConfigError`` instead of silently skipping the charge.

A request is reserve → compute → commit or release: :meth:`BudgetStore.release` gives a
committed charge back, atomically and at most once, when the request that made it failed
before anything was released to its caller (a generator error, a timeout, a cancel).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._postgres import PgPool, PgTransaction, create_schema, redact_url
from ragprivacy._sqlite import GroupCommit, connect_wal, when_unlocked
from ragprivacy._storage import POSTGRES, SQLITE, Dialect, map_backend_errors
from ragprivacy._validation import check_positive
from ragprivacy.errors import BudgetExhaustedError, ConfigError

__all__ = [
    "BudgetStore",
    "ChargeReceipt",
    "DocumentBudgetExhaustedError",
    "MemoryBudgetStore",
    "PostgresBudgetStore",
    "SqliteBudgetStore",
]

Amount = float | Sequence[float] | np.ndarray
_Charge = tuple[tuple[str, ...], np.ndarray, str]  # (document ids, amount, charge id)
_RTOL = 1e-9
_CHUNK = 500  # SQL variables per IN (...) query
#: what a store that stayed locked past the wait did (for the BackendError's message)
_UNDONE = "nothing was charged or released (retry a charge with the same charge_id)"


class DocumentBudgetExhaustedError(BudgetExhaustedError):
    """A charge was refused because some documents cannot afford it; nothing was charged.

    ``exhausted`` holds their ids for the caller to drop them; the message does not.
    """

    def __init__(self, message: str, exhausted: Sequence[str]) -> None:
        super().__init__(message)
        self.exhausted = tuple(exhausted)


@dataclass(frozen=True, slots=True)
class ChargeReceipt:
    """A committed charge: its id, the documents, and the amount each paid per dimension."""

    charge_id: str
    doc_ids: tuple[str, ...]
    amount: tuple[float, ...]
    replayed: bool = False


def _capacity(capacity: float | Sequence[float]) -> np.ndarray:
    values = [capacity] if isinstance(capacity, int | float) else list(capacity)
    if not values:
        raise ConfigError(
            f"The 'capacity' parameter must hold at least one value; got {capacity!r}."
        )
    return np.array([check_positive("capacity", v) for v in values], dtype=np.float64)


def _check_replay(
    charge_id: str,
    prev_ids: Sequence[str],
    prev_amount: Sequence[float],
    ids: Sequence[str],
    amount: np.ndarray,
) -> None:
    """A reused ``charge_id`` must name the same request; anything else is refused."""
    prev = np.asarray(prev_amount, dtype=np.float64)
    same_docs = sorted(prev_ids) == sorted(ids)
    same_amount = prev.shape == amount.shape and bool(
        np.all(np.abs(prev - amount) <= _RTOL * np.maximum(np.abs(prev), np.abs(amount)))
    )
    if not (same_docs and same_amount):
        raise ConfigError(
            f"charge_id {charge_id!r} was already used for a different charge "
            f"({len(prev_ids)} document(s), amount {prev.tolist()}); got {len(ids)} "
            f"document(s), amount {amount.tolist()}. Nothing was charged: use a fresh "
            f"charge_id for a new request (retry with the same id only to repeat a request)."
        )


def _doc_ids(doc_ids: Iterable[str]) -> tuple[str, ...]:
    ids = tuple(doc_ids)
    for d in ids:
        if not isinstance(d, str) or not d:
            raise ConfigError(f"Document ids must be non-empty strings; got {d!r}.")
    if len(set(ids)) != len(ids):
        dup = sorted({d for d in ids if ids.count(d) > 1})[:5]
        raise ConfigError(
            f"A charge lists a document more than once ({', '.join(map(repr, dup))}); "
            f"deduplicate the ids."
        )
    return ids


class BudgetStore(ABC):
    """Spent budgets per document, with an all-or-nothing :meth:`charge`."""

    def __init__(self, capacity: float | Sequence[float]) -> None:
        self.capacity = _capacity(capacity)

    @property
    def dims(self) -> int:
        """Number of budget dimensions (1 for pure ε, one per order for Rényi filters)."""
        return int(self.capacity.size)

    def _amount(self, amount: Amount) -> np.ndarray:
        a = np.atleast_1d(np.asarray(amount, dtype=np.float64))
        if a.size == 1 and self.dims > 1:
            a = np.repeat(a, self.dims)
        if a.shape != (self.dims,) or not np.all(np.isfinite(a)) or (a < 0).any():
            raise ConfigError(
                f"A charge amount must be {self.dims} finite non-negative number(s); "
                f"got {amount!r}."
            )
        return a

    def _fits(self, spent: np.ndarray, amount: np.ndarray) -> np.ndarray:
        """Which rows of ``spent`` can pay ``amount`` in every dimension."""
        return np.asarray(np.all(spent + amount <= self.capacity * (1 + _RTOL), axis=-1))

    @abstractmethod
    def spent(self, doc_ids: Iterable[str]) -> np.ndarray:
        """What each document has spent, shape (len(doc_ids), dims)."""

    def remaining(self, doc_ids: Iterable[str]) -> np.ndarray:
        """capacity − spent per document (may be slightly negative within tolerance)."""
        return np.asarray(self.capacity - self.spent(doc_ids))

    def can_afford(self, doc_ids: Iterable[str], amount: Amount) -> np.ndarray:
        """Boolean per document: could it pay ``amount`` now (a read, not a reservation)."""
        ids = _doc_ids(doc_ids)
        if not ids:
            return np.zeros(0, dtype=bool)
        return self._fits(self.spent(ids), self._amount(amount))

    def active(self, doc_ids: Iterable[str], next_charge: Amount) -> list[str]:
        """The documents that can still afford ``next_charge`` (MURAG's active set A_t)."""
        ids = _doc_ids(doc_ids)
        ok = self.can_afford(ids, next_charge)
        return [d for d, good in zip(ids, ok) if good]

    @abstractmethod
    def charge(
        self,
        doc_ids: Iterable[str],
        amount: Amount,
        *,
        charge_id: str | None = None,
    ) -> ChargeReceipt:
        """Debit ``amount`` from every document, all or nothing.

        Raises:
            DocumentBudgetExhaustedError: some document cannot pay; nothing was charged.
        """

    @abstractmethod
    def release(self, charge_id: str) -> bool:
        """Give back a committed charge whose request failed; ``True`` if it was released.

        Atomic and at most once: the charge's amount returns to each of its documents and
        its record is removed (a later charge may reuse the id). An unknown or already
        released id changes nothing and returns ``False``. Release only a charge whose
        request released nothing to its caller: the guarantee covers what was released.
        """

    @abstractmethod
    def record(self, charges: Sequence[tuple[str, Sequence[str], Amount]]) -> None:
        """Record ``charges`` — (charge id, documents, amount) — that were already spent
        elsewhere (an audit window's replayed screenings), all at once and without the
        capacity check: refusing them would not undo the spending, only lose its trace.
        Idempotent: a charge id already recorded with the same documents and amount is
        skipped (a :class:`ConfigError` when they differ)."""

    def _refuse(self, ids: Sequence[str], ok: np.ndarray, amount: np.ndarray) -> None:
        bad = [d for d, good in zip(ids, ok) if not good]
        raise DocumentBudgetExhaustedError(
            f"Charge of {amount.tolist()} refused: {len(bad)} of {len(ids)} document(s) "
            f"would exceed their budget {self.capacity.tolist()}; nothing was charged. Drop "
            f"the exhausted documents (the error's 'exhausted') or use active().",
            bad,
        )


class MemoryBudgetStore(BudgetStore):
    """An in-process store (a lock makes each charge atomic across threads)."""

    def __init__(self, capacity: float | Sequence[float]) -> None:
        super().__init__(capacity)
        self._spent: dict[str, np.ndarray] = {}
        self._charges: dict[str, ChargeReceipt] = {}
        self._lock = threading.Lock()

    def spent(self, doc_ids: Iterable[str]) -> np.ndarray:
        ids = _doc_ids(doc_ids)
        zero = np.zeros(self.dims)
        with self._lock:
            rows = [self._spent.get(d, zero) for d in ids]
        return np.array(rows, dtype=np.float64).reshape(len(ids), self.dims)

    def charge(
        self,
        doc_ids: Iterable[str],
        amount: Amount,
        *,
        charge_id: str | None = None,
    ) -> ChargeReceipt:
        ids = _doc_ids(doc_ids)
        a = self._amount(amount)
        cid = charge_id or uuid.uuid4().hex
        with self._lock:
            if cid in self._charges:
                prev = self._charges[cid]
                _check_replay(cid, prev.doc_ids, prev.amount, ids, a)
                return ChargeReceipt(prev.charge_id, prev.doc_ids, prev.amount, replayed=True)
            zero = np.zeros(self.dims)
            spent = np.array([self._spent.get(d, zero) for d in ids]).reshape(len(ids), self.dims)
            ok = self._fits(spent, a)
            if not ok.all():
                self._refuse(ids, ok, a)
            for d, row in zip(ids, spent):
                self._spent[d] = row + a
            receipt = ChargeReceipt(cid, ids, tuple(a.tolist()))
            self._charges[cid] = receipt
        return receipt

    def record(self, charges: Sequence[tuple[str, Sequence[str], Amount]]) -> None:
        with self._lock:
            for cid, doc_ids, amount in charges:
                ids, a = _doc_ids(doc_ids), self._amount(amount)
                prev = self._charges.get(cid)
                if prev is not None:
                    _check_replay(cid, prev.doc_ids, prev.amount, ids, a)
                    continue
                zero = np.zeros(self.dims)
                for d in ids:
                    self._spent[d] = self._spent.get(d, zero) + a
                self._charges[cid] = ChargeReceipt(cid, ids, tuple(a.tolist()))

    def release(self, charge_id: str) -> bool:
        with self._lock:
            receipt = self._charges.pop(charge_id, None)
            if receipt is None:
                return False
            a = np.asarray(receipt.amount, dtype=np.float64)
            for d in receipt.doc_ids:
                self._spent[d] = np.maximum(self._spent[d] - a, 0.0)
        return True


@dataclass(frozen=True, slots=True)
class _Tables:
    """Where one store's rows live: the tables of a file of its own (SQLite), or its rows
    in tables that every store of a database shares, told apart by the ``scope`` column
    (PostgreSQL). Both layouts are the ones their databases already hold.

    Attributes:
        head: the table of the store's capacity row; ``head_key`` and ``head_value`` its
            key and value (JSON) columns.
        spent, charges: what each document spent, and the committed charges.
        scope: the column naming the store in ``spent`` and ``charges`` ("" for none).
    """

    head: str
    head_key: str
    head_value: str
    spent: str
    charges: str
    scope: str = ""


_SQLITE_TABLES = _Tables("meta", "key", "value", "spent", "charges")
_PG_TABLES = _Tables(
    "budget_stores", "store", "capacity", "budget_spent", "budget_charges", "store"
)

# The store's tables in SQLite's dialect; PostgreSQL's are derived from it
# (ragprivacy._storage.postgres_schema), as the service's state's are.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS {head} ({head_key} TEXT PRIMARY KEY, {head_value} TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {spent} (
    {scope_cols}doc_id TEXT NOT NULL, dim INTEGER NOT NULL, amount REAL NOT NULL,
    PRIMARY KEY ({scope_keys}doc_id, dim)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {charges} (
    {scope_cols}charge_id TEXT NOT NULL, doc_ids TEXT NOT NULL, amount TEXT NOT NULL,
    created REAL NOT NULL, PRIMARY KEY ({scope_keys}charge_id));
"""


class _Statements:
    """Every statement of a store, written once in SQLite's dialect (``?`` placeholders,
    standard upserts) for its tables; ``dialect`` supplies the words that differ. The
    parameters of a scoped statement start with the store's name (:meth:`scoped`)."""

    def __init__(self, t: _Tables, dialect: Dialect) -> None:
        cols = f"{t.scope}, " if t.scope else ""
        where = f"{t.scope} = ? AND " if t.scope else ""
        marks = "?, " if t.scope else ""
        self.scope = t.scope
        self.schema = dialect.schema(
            _SCHEMA.format(
                head=t.head,
                head_key=t.head_key,
                head_value=t.head_value,
                spent=t.spent,
                charges=t.charges,
                scope_cols=f"{t.scope} TEXT NOT NULL, " if t.scope else "",
                scope_keys=cols,
            )
        )
        self.add_head = (
            f"INSERT INTO {t.head} ({t.head_key}, {t.head_value}) VALUES (?, ?) "
            f"ON CONFLICT ({t.head_key}) DO NOTHING"
        )
        # the store's write lock where rows can be locked (SQLite's BEGIN IMMEDIATE
        # already holds the whole file's)
        self.lock_head = (
            f"SELECT {t.head_value} FROM {t.head} WHERE {t.head_key} = ?{dialect.for_update}"
        )
        self.set_head = f"UPDATE {t.head} SET {t.head_value} = ? WHERE {t.head_key} = ?"
        self.read_spent = f"SELECT doc_id, dim, amount FROM {t.spent} WHERE {where}doc_id IN "
        self.add_spent = (
            f"INSERT INTO {t.spent} ({cols}doc_id, dim, amount) VALUES ({marks}?, ?, ?) "
            f"ON CONFLICT ({cols}doc_id, dim) DO UPDATE SET amount = {t.spent}.amount + "
            "excluded.amount"
        )
        self.give_back = (
            f"UPDATE {t.spent} SET amount = {dialect.greatest}(amount - ?, 0.0) "
            f"WHERE {where}doc_id = ? AND dim = ?"
        )
        self.add_charge = (
            f"INSERT INTO {t.charges} ({cols}charge_id, doc_ids, amount, created) "
            f"VALUES ({marks}?, ?, ?, ?)"
        )
        self.find_charge = f"SELECT doc_ids, amount FROM {t.charges} WHERE {where}charge_id = ?"
        self.drop_charge = f"DELETE FROM {t.charges} WHERE {where}charge_id = ?"
        self.list_charges = (
            f"SELECT charge_id, doc_ids, amount FROM {t.charges}"
            + (f" WHERE {t.scope} = ?" if t.scope else "")
            + " ORDER BY created, charge_id"
        )


class _SqlBudgetStore(BudgetStore):
    """The one durable store: every check, charge and release, written once over SQL
    that both databases run (:class:`_Statements`).

    A charge or release is one transaction that holds the store's write lock — the
    file's ``BEGIN IMMEDIATE`` lock in SQLite, the store's head row (``SELECT ... FOR
    UPDATE``) in PostgreSQL — so the writers of one store take turns, and each check
    reads every spend committed before it: no two charges can both pass a check only one
    of them fits. A subclass opens the transactions (:meth:`_transaction`) and the reads
    (:meth:`_reading`).
    """

    #: how messages name the store (never a secret)
    name: str
    _head_id: str
    _sql: _Statements
    _group: GroupCommit[_Charge, ChargeReceipt] | None = None
    _before_commit: Callable[[], None] | None = None  # test hook (crash injection)

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """One write transaction holding the store's lock; yields an object with
        ``execute`` and ``executemany`` (``?`` placeholders)."""

    @abstractmethod
    def _reading(self) -> AbstractContextManager[Any]:
        """A connection (or transaction) for reads, yielding what :meth:`_transaction` does."""

    def _scoped(self) -> tuple[str, ...]:
        """The parameters that name this store in a scoped statement."""
        return (self._head_id,) if self._sql.scope else ()

    def _open(self, capacity: float | Sequence[float] | None) -> list[float]:
        """The store's capacity: stored on first use, checked against ``capacity`` after."""
        given = None if capacity is None else _capacity(capacity)
        with self._transaction() as tx:
            tx.execute(
                self._sql.add_head,
                (self._head_id, json.dumps(None if given is None else given.tolist())),
            )
            stored = json.loads(tx.execute(self._sql.lock_head, (self._head_id,)).fetchone()[0])
            if stored is None:
                if given is None:
                    raise ConfigError(f"Nothing is stored in {self.name} yet; pass a capacity.")
                stored = given.tolist()
                tx.execute(self._sql.set_head, (json.dumps(stored), self._head_id))
            cap = np.array(stored, dtype=np.float64)
            if given is not None and not np.array_equal(cap, given):
                raise ConfigError(
                    f"Capacity {given.tolist()} refused: {self.name} was created with "
                    f"capacity {cap.tolist()}. Open it with capacity=None."
                )
        return [float(c) for c in cap]

    def _read(self, tx: Any, ids: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(ids), self.dims), dtype=np.float64)
        pos = {d: i for i, d in enumerate(ids)}
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start : start + _CHUNK])
            rows = tx.execute(
                f"{self._sql.read_spent}({','.join('?' * len(chunk))})",
                (*self._scoped(), *chunk),
            ).fetchall()
            for doc, dim, amount in rows:
                out[pos[doc], dim] = amount
        return out

    def spent(self, doc_ids: Iterable[str]) -> np.ndarray:
        ids = _doc_ids(doc_ids)
        with self._reading() as tx:
            return self._read(tx, ids)

    def charge(
        self,
        doc_ids: Iterable[str],
        amount: Amount,
        *,
        charge_id: str | None = None,
    ) -> ChargeReceipt:
        item = (_doc_ids(doc_ids), self._amount(amount), charge_id or uuid.uuid4().hex)
        if self._group is not None:
            return self._group.run(item)
        outcome = self._commit_charges([item])[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def record(self, charges: Sequence[tuple[str, Sequence[str], Amount]]) -> None:
        items = [(_doc_ids(ids), self._amount(a), cid) for cid, ids, a in charges]
        for outcome in self._commit_charges(items, check=False):
            if isinstance(outcome, BaseException):
                raise outcome

    def _commit_charges(
        self, items: list[_Charge], *, check: bool = True
    ) -> list[ChargeReceipt | BaseException]:
        """Check and debit ``items`` in one transaction (one sync of the disk).

        Each charge is checked against what the database holds plus the charges before
        it in the batch, exactly as if they had committed one by one in this order; a
        refused charge adds nothing and is returned as its error (the others commit).
        """
        scope = self._scoped()
        with self._transaction() as tx:
            tx.execute(self._sql.lock_head, (self._head_id,))
            delta: dict[str, np.ndarray] = {}  # what this batch adds, per document
            new: dict[str, ChargeReceipt] = {}
            outcomes: list[ChargeReceipt | BaseException] = []
            for ids, a, cid in items:
                try:
                    outcomes.append(self._charge_in(tx, ids, a, cid, delta, new, check))
                except (DocumentBudgetExhaustedError, ConfigError) as refused:
                    outcomes.append(refused)
            tx.executemany(
                self._sql.add_spent,
                [
                    (*scope, d, k, float(v[k]))
                    for d, v in delta.items()
                    for k in range(self.dims)
                    if v[k]
                ],
            )
            now = time.time()
            tx.executemany(
                self._sql.add_charge,
                [
                    (
                        *scope,
                        r.charge_id,
                        json.dumps(list(r.doc_ids)),
                        json.dumps(list(r.amount)),
                        now,
                    )
                    for r in new.values()
                ],
            )
            if self._before_commit is not None:
                self._before_commit()
        return outcomes

    def _charge_in(
        self,
        tx: Any,
        ids: tuple[str, ...],
        a: np.ndarray,
        cid: str,
        delta: dict[str, np.ndarray],
        new: dict[str, ChargeReceipt],
        check: bool = True,
    ) -> ChargeReceipt:
        """One charge inside an open transaction (``delta``/``new``: the batch so far)."""
        earlier = new.get(cid)
        if earlier is None:
            row = tx.execute(self._sql.find_charge, (*self._scoped(), cid)).fetchone()
            if row is not None:
                earlier = ChargeReceipt(cid, tuple(json.loads(row[0])), tuple(json.loads(row[1])))
        if earlier is not None:
            _check_replay(cid, earlier.doc_ids, earlier.amount, ids, a)
            return ChargeReceipt(cid, earlier.doc_ids, earlier.amount, replayed=True)
        spent = self._read(tx, ids)
        for i, d in enumerate(ids):
            if d in delta:
                spent[i] += delta[d]
        ok = self._fits(spent, a)
        if check and not ok.all():
            self._refuse(ids, ok, a)
        for d in ids:
            delta[d] = delta[d] + a if d in delta else a.copy()
        receipt = ChargeReceipt(cid, ids, tuple(a.tolist()))
        new[cid] = receipt
        return receipt

    def release(self, charge_id: str) -> bool:
        scope = self._scoped()
        with self._transaction() as tx:
            tx.execute(self._sql.lock_head, (self._head_id,))
            row = tx.execute(self._sql.find_charge, (*scope, charge_id)).fetchone()
            if row is None:
                return False
            ids, amount = json.loads(row[0]), json.loads(row[1])
            tx.executemany(
                self._sql.give_back,
                [
                    (float(amount[k]), *scope, d, k)
                    for d in ids
                    for k in range(self.dims)
                    if amount[k]
                ],
            )
            tx.execute(self._sql.drop_charge, (*scope, charge_id))
        return True

    def charges(self) -> list[ChargeReceipt]:
        """Every committed charge, oldest first (the store's own audit log)."""
        with self._reading() as tx:
            rows = tx.execute(self._sql.list_charges, self._scoped()).fetchall()
        return [ChargeReceipt(c, tuple(json.loads(d)), tuple(json.loads(a))) for c, d, a in rows]


class SqliteBudgetStore(_SqlBudgetStore):
    """A durable store in one SQLite file, safe across threads and processes.

    The write lock is ``BEGIN IMMEDIATE`` (one writer at a time, across threads and
    processes); the file is in WAL mode with ``synchronous=FULL`` by default.

    Args:
        path: the database file (created if absent).
        capacity: per-document capacity (one value per dimension). ``None`` reads it from
            an existing database; a value that disagrees with the stored one is refused.
        timeout: seconds to wait for another writer's lock.
        synchronous: ``"FULL"`` (durable on power loss) or ``"NORMAL"`` (survives process
            crashes, may lose the last commits on power loss).
        group_commit: concurrent charges of this process's threads share one transaction,
            hence one sync of the disk (:class:`ragprivacy._sqlite.GroupCommit`); each is
            still checked as if it committed alone, in queue order, and returns only once
            durable. ``False``: one transaction per charge.
    """

    def __init__(
        self,
        path: str | Path,
        capacity: float | Sequence[float] | None = None,
        *,
        timeout: float = 60.0,
        synchronous: str = "FULL",
        group_commit: bool = True,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigError(
                f"The 'synchronous' parameter must be FULL or NORMAL; got {synchronous!r}."
            )
        self.path = Path(path)
        self.name = f"the budget store {self.path}"
        self.timeout = check_positive("timeout", timeout)
        self._synchronous = synchronous
        self._local = threading.local()
        self._head_id = "capacity"  # the key of the capacity row in the file's meta table
        self._sql = _Statements(_SQLITE_TABLES, SQLITE)
        self._group = GroupCommit(self._commit_charges) if group_commit else None
        super().__init__(self._open(capacity))

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect_wal(
                self.path,
                timeout=self.timeout,
                synchronous=self._synchronous,
                schema=self._sql.schema,
                autocommit=True,
            )
            self._local.conn = conn
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn()
        with map_backend_errors(self.name, undone=_UNDONE):
            # busy_timeout covers lock waits; retry the rare SQLITE_BUSY it does not cover
            when_unlocked(lambda: conn.execute("BEGIN IMMEDIATE"), self.timeout)
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with map_backend_errors(self.name, undone=_UNDONE):
            yield self._conn()

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class PostgresBudgetStore(_SqlBudgetStore):
    """A durable store as the rows of ``store`` in a PostgreSQL database that several
    processes and machines share (the service's replicas).

    The write lock is the store's row in ``budget_stores`` (``SELECT ... FOR UPDATE``),
    so the writers of one store take turns while other stores' charges do not wait; the
    check reads the spends committed before the lock (READ COMMITTED takes a new
    snapshot per statement). A lost connection fails the charge with ``BackendError``
    (the server rolled it back; retry with the same ``charge_id``).

    Args:
        pool: a :class:`ragprivacy._postgres.PgPool` on the database.
        store: the store's name (the service uses the tenant id).
        capacity: per-document capacity; ``None`` reads it from an existing store; a value
            that disagrees with the stored one is refused.
    """

    def __init__(
        self, pool: PgPool, store: str, capacity: float | Sequence[float] | None = None
    ) -> None:
        self._pool = pool
        self.store = store
        self.name = f"the budget store {store!r} in {redact_url(pool.url)}"
        self._head_id = store
        self._sql = _Statements(_PG_TABLES, POSTGRES)
        pool.retrying(
            lambda conn: create_schema(conn, self._sql.schema, "ragprivacy/budget-schema")
        )
        super().__init__(self._open(capacity))

    def __repr__(self) -> str:
        return f"PostgresBudgetStore({self.store!r}, {self._pool!r})"

    def _transaction(self) -> AbstractContextManager[PgTransaction]:
        return self._pool.transaction()

    def _reading(self) -> AbstractContextManager[PgTransaction]:
        return self._pool.transaction()

    def close(self) -> None:
        """Nothing to close: the pool belongs to its owner."""
