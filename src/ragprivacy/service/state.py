"""The service's state: everything durable, in one place (a directory or a database).

The state lives where its backend says (:mod:`ragprivacy.service.backend`): a SQLite
directory, described below, or one PostgreSQL database (``--state postgresql://...``)
holding the same tables, ledgers and document budgets for several replicas, with the
identity key in a file the operator names. In a directory,
``DIR/state.sqlite`` (WAL, ``synchronous=FULL``) holds the settings, tenants, documents
with their embeddings, accounts and their policies, hashed API keys, audit windows (with
their secret seeds s_W, their commitments and, once closed, the coalition claim) and the
witnesses of every ledger record; ``DIR/ledgers/<window>.sqlite`` is each window's Merkle
ledger; ``DIR/identity.key`` is the provider's Ed25519 identity key, created at first use
with mode 0600. Several processes (the server's workers, an admin command) may open the
directory at once: every write is one SQLite transaction. The witnesses that concurrent
queries store are group-committed (one transaction for those that arrive together).

Secrets (the identity key, the window seeds, the API key secrets) never leave this module
except the identity key to the signer and a seed to the admin's auditor export; reprs and
errors name none of them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._sqlite import GroupCommit
from ragprivacy._typing import FloatArray
from ragprivacy._validation import check_choice, check_in_range, check_positive, check_positive_int
from ragprivacy.audit import (
    SOURCE_CHUNK,
    AuditPolicy,
    EmbeddingSource,
    MerkleLog,
    PackedHashes,
    ProviderKey,
    RecordWitness,
    WitnessStore,
)
from ragprivacy.dp import BudgetStore
from ragprivacy.embed import Embedder, create_embedder
from ragprivacy.errors import AuthError, ConfigError, DataError
from ragprivacy.rag import DPVoteConfig
from ragprivacy.service.backend import SqliteBackend, StateBackend, open_backend
from ragprivacy.service.idempotency import PENDING_S, TTL_S
from ragprivacy.service.keys import ApiKey, hash_secret, new_key, parse_key, secret_matches
from ragprivacy.types import Document

__all__ = [
    "FREE_FAILURES",
    "MODES",
    "AuthError",
    "ServiceState",
    "StateWitnessStore",
    "StoredEmbeddings",
    "Window",
]

#: Privacy modes a tenant may run (collusion paper §2.1 and Private-RAG).
MODES = ("noisy_topk", "murag", "murag_ada", "dp_vote")
#: The modes that release only a DP-voted answer, never documents (Private-RAG).
VOTING_MODES = ("murag", "murag_ada", "dp_vote")
#: Failures after retrieval that an account may have for free per window, and only those
#: that provably do not depend on the data (the generator was never reached); every
#: other failure after retrieval, and every one past this, is charged like an answer.
FREE_FAILURES = 3
#: MURAG-ADA's threshold budget ε_thr of each answer (ε_RAG = ε_q − ε_thr; the library's).
MURAG_ADA_EPSILON_THR = 1.0

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def check_id(kind: str, value: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 64 or not set(value) <= _NAME_CHARS:
        raise ConfigError(
            f"A {kind} id must be 1-64 characters of letters, digits, '-', '_' or '.'; "
            f"got {value!r}."
        )
    return value


def _checked_documents(documents: Iterable[Document]) -> list[Document]:
    """``documents`` as a list once every one is fit to store: an id and a text, both
    non-empty Unicode (no lone surrogate), and no id twice."""
    out = list(documents)
    seen: set[str] = set()
    for n, d in enumerate(out, start=1):
        if not isinstance(d, Document):
            raise DataError(f"Document {n} is a {type(d).__name__}, not a Document.")
        if not d.id.strip() or not d.text.strip():
            raise DataError(
                f"Document {n} (id {d.id!r}) has an empty {'id' if not d.id.strip() else 'text'}"
                "; every document needs both."
            )
        try:
            d.id.encode("utf-8")
            d.text.encode("utf-8")
        except UnicodeEncodeError:
            raise DataError(
                f"Document {n} holds a lone surrogate, which is not Unicode text; fix it."
            ) from None
        if d.id in seen:
            raise DataError(f"Document id {d.id!r} is given twice; ids must be unique.")
        seen.add(d.id)
    return out


@dataclass(frozen=True, slots=True)
class Window:
    """An audit window as stored: its id, number, status and what was committed."""

    window_id: str
    number: int
    status: str
    snapshot: dict[str, Any]
    commitments: dict[str, Any]
    coalition: dict[str, Any] | None
    tree_head: dict[str, Any] | None

    @property
    def ledger_name(self) -> str:
        return f"{self.window_id}.sqlite"


class ServiceState:
    """The state of one service (see the module docstring).

    Args:
        location: a state directory, or a PostgreSQL URL (``postgresql://...``).
        create: make the directory and its files if missing (a database's tables are
            always created when missing).
        embedder: the embedder spec for a new state (default ``"hashing"``); an existing
            state keeps the one it was made with.
        identity_key: the identity key file of a PostgreSQL state (required there;
            created with mode 0600 at first use); a directory keeps its own.
    """

    def __init__(
        self,
        location: str | Path,
        *,
        create: bool = True,
        embedder: str | None = None,
        identity_key: str | Path | None = None,
    ) -> None:
        self._db: StateBackend = open_backend(location, create=create, identity_key=identity_key)
        self.location = self._db.name  # printable: a URL without its password
        if embedder is not None or self.setting("embedder") is None:
            spec = embedder or "hashing"
            existing = self.setting("embedder")
            if existing is not None and existing != spec:
                raise ConfigError(
                    f"This state was made with the embedder {existing!r}; it cannot change to "
                    f"{spec!r} (the stored embeddings are {existing!r}'s)."
                )
            create_embedder(spec)  # refuse an unknown spec before storing it
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO settings VALUES ('embedder', ?) ON CONFLICT (key) DO NOTHING",
                    (spec,),
                )
        self._embedder: Embedder | None = None
        self._identity: ProviderKey | None = None
        self._session_key = os.urandom(32)  # keys the verified-key cache of this process
        self._operator_tag: tuple[str, bytes] | None = None  # the operator key, verified
        self._verified: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"ServiceState({self.location!r})"

    @property
    def directory(self) -> Path:
        """The state directory (a SQLite state only)."""
        if not isinstance(self._db, SqliteBackend):
            raise ConfigError(f"The state {self.location} is a database, not a directory.")
        return self._db.directory

    @property
    def backend(self) -> StateBackend:
        """Where the state is stored."""
        return self._db

    def close(self) -> None:
        """Give back this process's connections (a PostgreSQL state's pool)."""
        self._db.close()

    # ------------------------------------------------------------------ plumbing
    def _write(self) -> Any:
        return self._db.write()

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.read(sql, params)

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        rows = self._db.read(sql, params)
        return rows[0] if rows else None

    def setting(self, key: str) -> str | None:
        row = self._one("SELECT value FROM settings WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO settings VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    @property
    def k_max(self) -> int:
        """The coalition cap every window commits (default 4)."""
        return int(self.setting("k_max") or 4)

    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = create_embedder(str(self.setting("embedder")))
        return self._embedder

    def backup(self, dest: str | Path) -> list[str]:
        """A copy of the whole state in the new directory ``dest``, taken while the
        service runs (:meth:`ragprivacy.service.backend.StateBackend.backup`); the files
        copied. It holds every secret the state holds: keep it as the state is kept."""
        return self._db.backup(Path(dest))

    def identity(self) -> ProviderKey:
        """The provider's Ed25519 identity key, created with mode 0600 at first use."""
        if self._identity is None:
            path = self._db.identity_path
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                seed = path.read_bytes()
            else:
                seed = os.urandom(32)
                with os.fdopen(fd, "wb") as f:
                    f.write(seed)
                    f.flush()
                    os.fsync(f.fileno())
            if len(seed) != 32:
                raise DataError(f"The identity key file {path} is damaged (not 32 bytes).")
            self._identity = ProviderKey.from_seed(seed)
        return self._identity

    # ------------------------------------------------------------------ tenants
    def create_tenant(
        self,
        tenant: str,
        *,
        mode: str = "noisy_topk",
        k: int = 5,
        epsilon_q: float | None = None,
        max_retrievals: int | None = None,
        tau: float | None = None,
        logprobs: bool = False,
        vector_table: bool | None = None,
    ) -> None:
        """A new tenant.

        ``vector_table``: where a PostgreSQL state keeps the tenant's embeddings — its
        own pgvector table, streamed by the replicas for every query (``None``, the
        default: where the database has pgvector; ``True``: refuse without it), or the
        documents' rows (``False``: each replica loads them into memory when a window
        opens; faster per query, memory per replica). A SQLite state always keeps them
        in the rows. ``noisy_topk`` tenants may allow log-probabilities on their
        answers (``logprobs``; they are post-processing of the released documents).
        Voting tenants (``murag``, ``murag_ada``, ``dp_vote``) take ``epsilon_q``, each
        answer's ε (default 1); MURAG/-ADA also ``max_retrievals`` M (each document's
        lifetime budget is M·ε_q, default M = 10) and MURAG ``tau``, the relevance
        threshold (default 0.5). ε_q defaults to Private-RAG's 10 and must pay at least
        one token discovery of the vote (ε_token = 2; MURAG-ADA first spends ε_thr = 1)."""
        tenant = check_id("tenant", tenant)
        mode = check_choice("mode", mode, MODES)
        k = check_positive_int("k", k)
        if k > 100:
            raise ConfigError(f"The 'k' parameter must be at most 100; got {k}.")
        options: dict[str, Any] = {}
        given = {"eps-q": epsilon_q, "max-retrievals": max_retrievals, "tau": tau}
        allowed = {
            "noisy_topk": (),
            "dp_vote": ("eps-q",),
            "murag": ("eps-q", "max-retrievals", "tau"),
            "murag_ada": ("eps-q", "max-retrievals"),
        }[mode]
        wrong = [f"--{o}" for o, v in given.items() if v is not None and o not in allowed]
        if wrong:
            raise ConfigError(f"Mode {mode!r} takes no {', '.join(wrong)}.")
        if mode == "noisy_topk":
            options["logprobs"] = bool(logprobs)
        elif logprobs:
            raise ConfigError(
                f"Mode {mode!r} cannot return log-probabilities: they would bypass the DP "
                "vote (only noisy_topk tenants may allow them)."
            )
        else:
            eps_q = check_positive("eps_q", 10.0 if epsilon_q is None else epsilon_q)
            options["epsilon_q"] = eps_q
            if mode == "murag_ada":
                options["epsilon_thr"] = MURAG_ADA_EPSILON_THR
            voting = eps_q - options.get("epsilon_thr", 0.0)
            token = DPVoteConfig().epsilon_token
            if DPVoteConfig().discoveries(max(voting, 1e-12)) < 1:
                raise ConfigError(
                    f"--eps-q {eps_q} leaves the vote ε = {voting:g}, less than one token "
                    f"discovery (ε_token = {token:g}"
                    + (
                        f", after MURAG-ADA's ε_thr = {MURAG_ADA_EPSILON_THR:g}"
                        if mode == "murag_ada"
                        else ""
                    )
                    + f"); give at least {token + options.get('epsilon_thr', 0.0):g}."
                )
            if mode != "dp_vote":
                m = 10 if max_retrievals is None else max_retrievals
                options["max_retrievals"] = check_positive_int("max_retrievals", m)
            if mode == "murag":
                options["tau"] = check_in_range("tau", 0.5 if tau is None else tau, -1.0, 1.0)
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM tenants WHERE tenant = ?", (tenant,)).fetchone():
                raise ConfigError(f"Tenant {tenant!r} already exists.")
            conn.execute("INSERT INTO tenants VALUES (?, ?, ?, ?)", (tenant, mode, k, time.time()))
            conn.execute("INSERT INTO tenant_options VALUES (?, ?)", (tenant, json.dumps(options)))
            if vector_table is not False:  # PostgreSQL: the tenant's own pgvector table
                self._db.create_vector_table(
                    conn, tenant, self.embedder().dim, required=bool(vector_table)
                )

    def tenants(self) -> dict[str, dict[str, Any]]:
        """Each tenant's mode, K, document count and options."""
        rows = self._rows(
            "SELECT t.tenant, t.mode, t.k, (SELECT COUNT(*) FROM documents d "
            "WHERE d.tenant = t.tenant), o.options FROM tenants t "
            "LEFT JOIN tenant_options o ON o.tenant = t.tenant ORDER BY t.tenant"
        )
        return {
            t: {"mode": m, "k": k, "documents": n, **json.loads(o or "{}")}
            for t, m, k, n, o in rows
        }

    def budget_store(self, tenant: str, capacity: float) -> BudgetStore:
        """The per-document filters of a MURAG/-ADA tenant (a lifetime budget: they
        outlive windows)."""
        return self._db.budget_store(check_id("tenant", tenant), capacity)

    def count_failure(self, window_id: str, account: str, *, charged: bool) -> bool:
        """Count one failed request of ``account`` after retrieval, atomically across
        processes. A failure that does not depend on the data (``charged=False``: the
        generator was never reached) is free only while the account has had fewer than
        :data:`FREE_FAILURES` of them in the window; past that it is charged too. Returns
        whether this failure is charged."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT charged, free FROM failures WHERE window_id = ? AND account = ?",
                (window_id, account),
            ).fetchone()
            paid, free = (0, 0) if row is None else (int(row[0]), int(row[1]))
            charged = charged or free >= FREE_FAILURES
            paid, free = (paid + 1, free) if charged else (paid, free + 1)
            conn.execute(
                "INSERT INTO failures VALUES (?, ?, ?, ?) ON CONFLICT (window_id, account) "
                "DO UPDATE SET charged = excluded.charged, free = excluded.free",
                (window_id, account, paid, free),
            )
        return charged

    def failures(self, window_id: str, account: str) -> dict[str, int]:
        """``account``'s failed requests after retrieval in the window: charged and free."""
        row = self._one(
            "SELECT charged, free FROM failures WHERE window_id = ? AND account = ?",
            (window_id, account),
        )
        paid, free = (0, 0) if row is None else (int(row[0]), int(row[1]))
        return {"charged": paid, "free": free}

    # ------------------------------------------------------------------ erasure
    def remove_documents(self, tenant: str, ids: Sequence[str]) -> tuple[int, bool]:
        """Erase documents of ``tenant`` by id: their rows, texts and embeddings, and the
        answers kept for the tenant's accounts' idempotent retries (they may quote them).
        Done at once when no open window committed the tenant; otherwise the open window
        keeps serving what it committed and the documents go when it closes (or the next
        opens). Returns (how many, whether they are gone already). An unknown id refuses
        the call with nothing removed."""
        self._tenant(tenant)
        wanted = list(dict.fromkeys(str(i) for i in ids))
        if not wanted:
            raise ConfigError("Name at least one document id to remove.")
        have: set[str] = set()
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            have.update(
                r[0]
                for r in self._rows(
                    f"SELECT doc_id FROM documents WHERE tenant = ? AND doc_id IN "
                    f"({','.join('?' * len(chunk))})",
                    (tenant, *chunk),
                )
            )
        missing = [i for i in wanted if i not in have]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ConfigError(
                f"Tenant {tenant!r} has no document {missing[0]!r}{more}; nothing was removed."
            )
        now = time.time()
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO removals VALUES (?, ?, ?) ON CONFLICT (tenant, doc_id) DO NOTHING",
                [(tenant, i, now) for i in wanted],
            )
        return len(wanted), tenant in self.apply_erasures()

    def delete_tenant(self, tenant: str) -> tuple[list[str], bool]:
        """Delete ``tenant``: its accounts' keys are revoked at once (no request of theirs
        is served from now on); its documents, options, accounts and embeddings go when
        no open window has committed it (at once, or when the open one closes). Returns
        (its accounts, whether it is gone already)."""
        self._tenant(tenant)
        accounts = sorted(a for a, x in self.accounts().items() if x["tenant"] == tenant)
        for account in accounts:
            self.revoke_keys(account)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO deletions VALUES (?, ?) ON CONFLICT (tenant) DO NOTHING",
                (tenant, time.time()),
            )
        return accounts, tenant in self.apply_erasures()

    def apply_erasures(self) -> set[str]:
        """Carry out the removals and deletions of every tenant no open window committed
        (:meth:`remove_documents`, :meth:`delete_tenant`); returns those tenants."""
        busy: set[str] = set()
        for window in self.open_windows():
            busy.update(window.snapshot.get("tenants", {}), window.snapshot.get("voting", {}))
        pending: dict[str, list[str]] = {}
        for tenant, doc_id in self._rows("SELECT tenant, doc_id FROM removals ORDER BY tenant"):
            pending.setdefault(tenant, []).append(doc_id)
        deleted = {r[0] for r in self._rows("SELECT tenant FROM deletions")}
        done: set[str] = set()
        for tenant in sorted((set(pending) | deleted) - busy):
            with self._write() as conn:
                self._db.erase(conn)
                if tenant in deleted:
                    self._drop_tenant(conn, tenant)
                else:
                    self._compact(conn, tenant, pending[tenant])
                conn.execute(
                    "DELETE FROM idempotency WHERE account IN "
                    "(SELECT account FROM accounts WHERE tenant = ?)",
                    (tenant,),
                )
                conn.execute("DELETE FROM removals WHERE tenant = ?", (tenant,))
                if tenant in deleted:
                    conn.execute("DELETE FROM accounts WHERE tenant = ?", (tenant,))
                    conn.execute("DELETE FROM deletions WHERE tenant = ?", (tenant,))
            done.add(tenant)
        if done:
            self._db.erased()
        return done

    def _compact(self, conn: Any, tenant: str, removed: Sequence[str]) -> None:
        """Delete ``removed`` of ``tenant`` and renumber the rest 0, 1, … in order (a
        window's committed positions are the rows' order)."""
        gone = set(removed)
        rows = conn.execute(
            "SELECT pos, doc_id FROM documents WHERE tenant = ? ORDER BY pos", (tenant,)
        ).fetchall()
        conn.executemany(
            "DELETE FROM documents WHERE tenant = ? AND doc_id = ?", [(tenant, i) for i in gone]
        )
        kept = [int(pos) for pos, doc_id in rows if doc_id not in gone]
        moves = [(old, new) for new, old in enumerate(kept) if old != new]
        # through negative positions: no two rows ever hold one (tenant, pos)
        conn.executemany(
            "UPDATE documents SET pos = ? WHERE tenant = ? AND pos = ?",
            [(-1 - n, tenant, o) for o, n in moves],
        )
        conn.executemany(
            "UPDATE documents SET pos = ? WHERE tenant = ? AND pos = ?",
            [(n, tenant, -1 - n) for _, n in moves],
        )
        self._db.compact_vectors(conn, tenant, sorted(gone), moves)

    def _drop_tenant(self, conn: Any, tenant: str) -> None:
        conn.execute("DELETE FROM documents WHERE tenant = ?", (tenant,))
        conn.execute("DELETE FROM tenant_options WHERE tenant = ?", (tenant,))
        conn.execute("DELETE FROM tenants WHERE tenant = ?", (tenant,))
        conn.execute(
            "DELETE FROM api_keys WHERE account IN (SELECT account FROM accounts WHERE tenant = ?)",
            (tenant,),
        )
        self._db.drop_tenant(conn, tenant)

    # ------------------------------------------------------------------ idempotency
    def begin_idempotent(
        self, account: str, key: str, fingerprint: str, now: float
    ) -> tuple[str, str | None]:
        """Claim (account, key) for a request of ``fingerprint``, atomically across
        processes (:mod:`ragprivacy.service.idempotency`): ``("new", None)`` — run it;
        ``("done", response)``; ``("pending", None)`` — another copy runs; ``("reused",
        None)`` — the key named another request. Expired rows of the account go first."""
        with self._write() as conn:
            conn.execute(
                "DELETE FROM idempotency WHERE account = ? AND created < ?",
                (account, now - TTL_S),
            )
            row = conn.execute(
                "SELECT fingerprint, created, response FROM idempotency "
                "WHERE account = ? AND key = ?",
                (account, key),
            ).fetchone()
            if row is not None and row[0] != fingerprint:
                return "reused", None
            if row is not None and row[2] is not None:
                return "done", str(row[2])
            if row is not None and float(row[1]) > now - PENDING_S:
                return "pending", None
            # new, or pending so long that its worker is gone: this request runs it
            conn.execute(
                "INSERT INTO idempotency VALUES (?, ?, ?, ?, NULL) ON CONFLICT (account, key) "
                "DO UPDATE SET created = excluded.created",
                (account, key, fingerprint, now),
            )
        return "new", None

    def finish_idempotent(self, account: str, key: str, response: str) -> None:
        """Keep the response of (account, key)'s request for its repeats."""
        with self._write() as conn:
            conn.execute(
                "UPDATE idempotency SET response = ? WHERE account = ? AND key = ?",
                (response, account, key),
            )

    def abandon_idempotent(self, account: str, key: str) -> None:
        """Forget (account, key): its request spent nothing, so a repeat runs afresh."""
        with self._write() as conn:
            conn.execute(
                "DELETE FROM idempotency WHERE account = ? AND key = ? AND response IS NULL",
                (account, key),
            )

    def _tenant(self, tenant: str) -> dict[str, Any]:
        known = self.tenants()
        if tenant not in known:
            raise ConfigError(f"Unknown tenant {tenant!r}; create it with 'tenant create'.")
        return known[tenant]

    def add_documents(
        self,
        tenant: str,
        documents: Iterable[Document],
        *,
        batch: int = 256,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[int, int]:
        """Embed and store new documents of ``tenant``; ids already stored are skipped
        (idempotent by id). Returns (added, skipped). Every document is checked first (a
        non-empty id and text, both Unicode, ids unique): one bad document refuses the
        whole call with nothing stored. A window open now serves the
        documents it committed; new ones join at the next window.

        In a PostgreSQL state with pgvector the embeddings go to the tenant's pgvector
        table (in the same transaction as the documents' rows, whose ``vector`` is then
        empty), and its HNSW index is built after the upload (the first upload builds
        the graph in one pass; later ones insert into it)."""
        self._tenant(tenant)
        documents = _checked_documents(documents)  # every one, before anything is written
        embedder = self.embedder()
        table = self._db.vector_table(tenant)
        added = skipped = 0
        pending: list[Document] = []

        def flush() -> None:
            nonlocal added, skipped
            if not pending:
                return
            vectors = np.asarray(embedder.encode([d.text for d in pending]), dtype=np.float32)
            with self._write() as conn:
                have = {
                    row[0]
                    for row in conn.execute(
                        f"SELECT doc_id FROM documents WHERE tenant = ? AND doc_id IN "
                        f"({','.join('?' * len(pending))})",
                        (tenant, *[d.id for d in pending]),
                    )
                }
                pos = conn.execute(
                    "SELECT COALESCE(MAX(pos) + 1, 0) FROM documents WHERE tenant = ?", (tenant,)
                ).fetchone()[0]
                rows: list[tuple[Any, ...]] = []
                embedded: list[tuple[int, str, np.ndarray]] = []
                for d, v in zip(pending, vectors):
                    if d.id in have:
                        skipped += 1
                        continue
                    if table is None:
                        rows.append((tenant, pos, d.id, d.text, v.astype("<f4").tobytes()))
                    else:
                        rows.append((tenant, pos, d.id, d.text, b""))
                        embedded.append((pos, d.id, v))
                    have.add(d.id)
                    pos += 1
                    added += 1
                conn.executemany("INSERT INTO documents VALUES (?, ?, ?, ?, ?)", rows)
                if embedded:
                    self._db.insert_vectors(conn, tenant, embedded)
            if progress is not None:
                progress(len(pending))
            pending.clear()

        for doc in documents:
            pending.append(doc)
            if len(pending) >= batch:
                flush()
        flush()
        if added:
            self._db.index_vectors(tenant)
        return added, skipped

    def documents(self, tenant: str, count: int | None = None) -> tuple[list[str], list[str], Any]:
        """(ids, texts, vectors [n, d]) of the first ``count`` documents of ``tenant``
        (every vector in memory; the audited provider reads :meth:`embeddings` instead)."""
        ids, texts = self.texts(tenant, count)
        _, source = self.embeddings(tenant, len(ids))
        if isinstance(source, EmbeddingSource):
            blocks = list(source.chunks(SOURCE_CHUNK))
            vectors = np.concatenate(blocks) if blocks else np.zeros((0, 0), dtype=np.float32)
            return ids, texts, vectors
        return ids, texts, source

    def texts(self, tenant: str, count: int | None = None) -> tuple[list[str], list[str]]:
        """(ids, texts) of the first ``count`` documents of ``tenant``."""
        rows = self._rows(
            "SELECT doc_id, text FROM documents WHERE tenant = ? AND pos < ? ORDER BY pos",
            (tenant, 2**62 if count is None else int(count)),
        )
        return [r[0] for r in rows], [r[1] for r in rows]

    def texts_of(self, tenant: str, ids: Sequence[str]) -> dict[str, str]:
        """The stored texts of documents ``ids`` of ``tenant``, by id (one read): what an
        answer returns or prompts with, read when it is needed rather than kept for every
        document of the tenant."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        marks = ", ".join("?" * len(wanted))
        rows = self._rows(
            f"SELECT doc_id, text FROM documents WHERE tenant = ? AND doc_id IN ({marks})",
            (tenant, *wanted),
        )
        return {r[0]: r[1] for r in rows}

    def content_hashes(self, tenant: str, count: int | None = None) -> PackedHashes:
        """The SHA-256 of the texts of the first ``count`` documents of ``tenant``, in index
        order (what a window commits beside each embedding; items read as hex strings),
        read block by block and kept as 32 bytes each: no text, and no string per
        document, is held once it is hashed."""
        packed = bytearray()
        for block in self._db.read_blocks(
            "SELECT text FROM documents WHERE tenant = ? AND pos < ? ORDER BY pos",
            (tenant, _count(count)),
            _READ_ROWS,
        ):
            for r in block:
                packed += hashlib.sha256(r[0].encode("utf-8")).digest()
        return PackedHashes(bytes(packed))

    def embeddings(
        self, tenant: str, count: int | None = None
    ) -> tuple[list[str], FloatArray | EmbeddingSource]:
        """(ids, embeddings) of the first ``count`` documents of ``tenant``: a source read
        from the tenant's pgvector table (nothing loaded yet) in a PostgreSQL state with
        pgvector, the stored float32 rows ``[n, d]`` otherwise (read block by block into
        one array: no Python object per row is held while they are read)."""
        table = self._db.vector_table(tenant)
        if table is not None:
            known = self._ids(tenant, count)
            source = self._db.embeddings(tenant, len(known), self.embedder().dim)
            assert source is not None  # the table exists
            return known, source
        limit = _count(count)
        (n,) = self._one(
            "SELECT count(*) FROM documents WHERE tenant = ? AND pos < ?", (tenant, limit)
        ) or (0,)
        ids: list[str] = []
        vectors: np.ndarray | None = None
        for block in self._db.read_blocks(
            "SELECT doc_id, vector FROM documents WHERE tenant = ? AND pos < ? ORDER BY pos",
            (tenant, limit),
            _READ_ROWS,
        ):
            rows = _float_rows(block, 1)
            at = len(ids)
            if vectors is None:
                vectors = np.empty((max(int(n), len(block)), rows.shape[1]), dtype=np.float32)
            if at + len(block) > vectors.shape[0]:  # appended since the count: grow
                vectors = np.concatenate([vectors[:at], np.empty_like(vectors)])
            ids.extend(r[0] for r in block)
            vectors[at : len(ids)] = rows
        if vectors is None:
            return ids, np.zeros((0, 0), dtype=np.float32)
        return ids, vectors[: len(ids)]

    def embedding_source(
        self, tenant: str, count: int | None = None
    ) -> tuple[list[str], EmbeddingSource]:
        """(ids, a source of the embeddings) of the first ``count`` documents of
        ``tenant``: the tenant's pgvector table in a PostgreSQL state with pgvector, read
        when needed; otherwise the stored rows as a :attr:`~EmbeddingSource.resident`
        source (:class:`StoredEmbeddings`), which a tenant commitment reads once, block by
        block, into its fixed-point rows (no float32 copy of the tenant held beside them)."""
        if self._db.vector_table(tenant) is not None:
            ids, source = self.embeddings(tenant, count)
            assert isinstance(source, EmbeddingSource)  # the pgvector table's
            return ids, source
        ids = self._ids(tenant, count)
        return ids, StoredEmbeddings(self._db, tenant, len(ids), self.embedder().dim)

    def _ids(self, tenant: str, count: int | None) -> list[str]:
        rows = self._rows(
            "SELECT doc_id FROM documents WHERE tenant = ? AND pos < ? ORDER BY pos",
            (tenant, _count(count)),
        )
        return [r[0] for r in rows]

    # ------------------------------------------------------------------ accounts
    def create_account(
        self, tenant: str, account: str, *, epsilon: float, delta: float, rate_limit: int
    ) -> None:
        account = check_id("account", account)
        epsilon, delta, rate_limit = self._checked_policy(tenant, epsilon, delta, rate_limit)
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM accounts WHERE account = ?", (account,)).fetchone():
                raise ConfigError(f"Account {account!r} already exists.")
            conn.execute(
                "INSERT INTO accounts VALUES (?, ?, ?, ?, ?, ?)",
                (account, tenant, epsilon, delta, rate_limit, time.time()),
            )

    def update_account(
        self,
        account: str,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        rate_limit: int | None = None,
    ) -> dict[str, Any]:
        """Change an account's (ε_acc, δ_acc, r), checked as at creation; returns the new
        policy. It holds from the next window: an open window keeps the policy it
        committed (or, for a voting account, fixed when it opened)."""
        known = self.accounts()
        if account not in known:
            raise ConfigError(f"Unknown account {account!r}; create it with 'account create'.")
        old = known[account]
        values = self._checked_policy(
            old["tenant"],
            old["epsilon"] if epsilon is None else epsilon,
            old["delta"] if delta is None else delta,
            old["rate_limit"] if rate_limit is None else rate_limit,
        )
        with self._write() as conn:
            conn.execute(
                "UPDATE accounts SET epsilon = ?, delta = ?, rate_limit = ? WHERE account = ?",
                (*values, account),
            )
        return self.accounts()[account]

    def revoke_keys(self, account: str) -> list[str]:
        """Revoke every valid key of ``account`` (its requests are refused from now on;
        ``create_key`` gives it a new one); returns the ids revoked."""
        return self.revoke_keys_except(account, None)

    def revoke_keys_except(self, account: str, keep: str | None) -> list[str]:
        """Revoke every valid key of ``account`` but ``keep`` (a key rotation: the new key
        is made first, so the account is never without one); returns the ids revoked."""
        if account not in self.accounts():
            raise ConfigError(f"Unknown account {account!r}; create it with 'account create'.")
        ids = [
            k["key_id"] for k in self.keys(account) if k["revoked"] is None and k["key_id"] != keep
        ]
        for key_id in ids:
            self.revoke_key(key_id)
        return ids

    def _checked_policy(
        self, tenant: str, epsilon: float, delta: float, rate_limit: int
    ) -> tuple[float, float, int]:
        """(ε_acc, δ_acc, r) for an account of ``tenant``, refused if no window could serve
        it: whatever an admin types, the next window can still be opened."""
        info = self._tenant(tenant)
        epsilon = check_positive("epsilon", epsilon)
        delta = check_in_range("delta", delta, 0.0, 1e-2, low_open=True)
        rate_limit = check_positive_int("rate_limit", rate_limit)
        if info["mode"] in VOTING_MODES:
            if epsilon < float(info["epsilon_q"]) * (1 - 1e-9):
                raise ConfigError(
                    f"ε = {epsilon:g} buys no answer at tenant {tenant!r}'s ε per answer "
                    f"({float(info['epsilon_q']):g}); give at least that."
                )
        else:
            self._check_servable(epsilon, delta, rate_limit, int(info["k"]))
        return epsilon, delta, rate_limit

    def _check_servable(self, epsilon: float, delta: float, rate_limit: int, k: int) -> None:
        """Refuse an account policy no window could commit: its noise σ (eq. 3.4) must
        lie on the window's integer grid, as the window's own check would find."""
        k_max = self.k_max
        policy = AuditPolicy(
            epsilon_acc=epsilon,
            delta_acc=delta,
            rate_limit=rate_limit,
            k_max=k_max,
            delta_policy=(k_max + 1) * delta,
            window_id="check",
            window_start=0,
            window_end=1,
            top_k=k,
        )
        try:
            policy.mechanism()
        except ConfigError:
            sigma = policy.account.noise_sigma  # eq. 3.4 in score units, off the grid
            more = sigma * 2**policy.grid_bits > 1
            raise ConfigError(
                f"An account with ε = {epsilon:g}, δ = {delta:g} and r = {rate_limit} would "
                f"need noise σ = {sigma:.3g}, "
                + (
                    "more than a window can draw; raise ε or lower r."
                    if more
                    else "less than a window can resolve; lower ε."
                )
            ) from None

    def accounts(self) -> dict[str, dict[str, Any]]:
        rows = self._rows(
            "SELECT account, tenant, epsilon, delta, rate_limit FROM accounts ORDER BY account"
        )
        return {
            a: {"tenant": t, "epsilon": e, "delta": d, "rate_limit": r} for a, t, e, d, r in rows
        }

    # ------------------------------------------------------------------ keys
    def create_key(self, account: str) -> ApiKey:
        """A new API key for ``account``: its token is returned once and never stored."""
        if account not in self.accounts():
            raise ConfigError(f"Unknown account {account!r}; create it with 'account create'.")
        key = new_key()
        salt = os.urandom(16)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO api_keys VALUES (?, ?, ?, ?, ?, NULL)",
                (key.key_id, account, salt, hash_secret(key.secret, salt), time.time()),
            )
        return key

    def keys(self, account: str | None = None) -> list[dict[str, Any]]:
        """Every API key (of ``account``, if given): its id, account, when it was created
        and revoked (UNIX seconds; None while valid). Never the secret or its hash."""
        rows = self._rows(
            "SELECT key_id, account, created, revoked FROM api_keys ORDER BY created, key_id"
        )
        return [
            {"key_id": k, "account": a, "created": c, "revoked": r}
            for k, a, c, r in rows
            if account is None or a == account
        ]

    def revoke_key(self, key_id: str) -> str:
        """Revoke a key by its id; returns its account."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT account, revoked FROM api_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
            if row is None:
                raise ConfigError(f"No API key with id {key_id!r}.")
            if row[1] is None:
                conn.execute(
                    "UPDATE api_keys SET revoked = ? WHERE key_id = ?", (time.time(), key_id)
                )
        return str(row[0])

    def authenticate(self, token: str, *, before_hash: Callable[[], None] | None = None) -> str:
        """The account of a presented key; :class:`AuthError` (naming nothing) otherwise.
        ``before_hash`` runs before a key is checked with scrypt (not for a malformed key
        or one this process verified before) and may refuse the check by raising."""
        try:
            key_id, secret = parse_key(token)
        except ConfigError:
            raise AuthError("Invalid API key.") from None
        row = self._one(
            "SELECT account, salt, hash, revoked FROM api_keys WHERE key_id = ?", (key_id,)
        )
        # A key this process verified before is checked by a keyed hash in memory (the
        # revocation is still read from the state every time): scrypt is there for a
        # stolen state file, and paying it on every request was most of a request's time
        # (benchmarks/README.md, "The service").
        tag = hmac.new(self._session_key, secret.encode(), hashlib.sha256).digest()
        if row is not None and row[3] is None:
            known = self._verified.get(key_id)
            if known is not None and hmac.compare_digest(known, tag):
                return str(row[0])
        if before_hash is not None:
            before_hash()
        # Hash even when the id is unknown, so that timing does not tell ids apart.
        salt, stored = (bytes(row[1]), bytes(row[2])) if row else (b"\0" * 16, b"\0" * 32)
        ok = secret_matches(secret, salt, stored)
        if row is None or not ok or row[3] is not None:
            raise AuthError("Invalid API key.")
        self._verified[key_id] = tag
        return str(row[0])

    # ------------------------------------------------------------------ operator key
    def create_operator_key(self) -> str:
        """A new operator key ``rpo_<43 characters>`` for the read-only status page
        (``GET /operator``), replacing any earlier one; only its scrypt hash is kept.
        Returned once."""
        secret = secrets.token_urlsafe(32)
        salt = os.urandom(16)
        self.set_setting("operator_key", json.dumps([salt.hex(), hash_secret(secret, salt).hex()]))
        self._operator_tag = None
        return f"rpo_{secret}"

    def check_operator(self, token: str, *, before_hash: Callable[[], None] | None = None) -> None:
        """Accept the operator key, or raise :class:`AuthError` (none set, or another)."""
        stored = self.setting("operator_key")
        tag = hmac.new(self._session_key, token.encode(), hashlib.sha256).digest()
        if stored is not None and self._operator_tag == (stored, tag):
            return
        if not token.startswith("rpo_") or stored is None:
            raise AuthError("Invalid operator key.")
        if before_hash is not None:
            before_hash()
        salt_hex, hash_hex = json.loads(stored)
        if not secret_matches(token[4:], bytes.fromhex(salt_hex), bytes.fromhex(hash_hex)):
            raise AuthError("Invalid operator key.")
        self._operator_tag = (stored, tag)

    # ------------------------------------------------------------------ windows
    def windows(self) -> list[Window]:
        rows = self._rows(
            "SELECT window_id, number, status, snapshot, commitments, coalition, tree_head "
            "FROM windows ORDER BY number"
        )
        return [_window(r) for r in rows]

    def window(self, window_id: str) -> Window:
        row = self._one(
            "SELECT window_id, number, status, snapshot, commitments, coalition, tree_head "
            "FROM windows WHERE window_id = ?",
            (window_id,),
        )
        if row is None:
            raise ConfigError(f"No window {window_id!r}.")
        return _window(row)

    def open_windows(self) -> list[Window]:
        rows = self._rows(
            "SELECT window_id, number, status, snapshot, commitments, coalition, tree_head "
            "FROM windows WHERE status = 'open' ORDER BY number"
        )
        return [_window(r) for r in rows]

    def open_window_id(self) -> str | None:
        """The open window's id (None when none is open): one cheap look-up that parses
        nothing, for a server that caches the window itself."""
        row = self._one("SELECT window_id FROM windows WHERE status = 'open' ORDER BY number")
        return None if row is None else str(row[0])

    def window_seed(self, window_id: str) -> bytes:
        row = self._one("SELECT seed FROM windows WHERE window_id = ?", (window_id,))
        if row is None:
            raise ConfigError(f"No window {window_id!r}.")
        return bytes(row[0])

    def insert_window(
        self,
        window_id: str,
        seed: bytes,
        snapshot: dict[str, Any],
        commitments: dict[str, Any],
    ) -> Window:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM windows WHERE status = 'open'").fetchone():
                raise ConfigError("A window is already open; close it first ('window close').")
            if conn.execute("SELECT 1 FROM windows WHERE window_id = ?", (window_id,)).fetchone():
                raise ConfigError(f"Window {window_id!r} already exists; choose another id.")
            number = conn.execute("SELECT COALESCE(MAX(number) + 1, 1) FROM windows").fetchone()[0]
            conn.execute(
                "INSERT INTO windows VALUES (?, ?, 'open', ?, ?, NULL, ?, ?, NULL, NULL)",
                (
                    window_id,
                    number,
                    seed,
                    time.time(),
                    json.dumps(snapshot),
                    json.dumps(commitments),
                ),
            )
        return self.window(window_id)

    def next_window_number(self) -> int:
        row = self._one("SELECT COALESCE(MAX(number) + 1, 1) FROM windows")
        assert row is not None  # an aggregate always has a row
        return int(row[0])

    def finish_window(
        self, window_id: str, coalition: dict[str, Any], tree_head: dict[str, Any]
    ) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE windows SET status = 'closed', closed = ?, coalition = ?, tree_head = ? "
                "WHERE window_id = ? AND status = 'open'",
                (time.time(), json.dumps(coalition), json.dumps(tree_head), window_id),
            )

    def ledger(self, window_id: str) -> MerkleLog:
        """The durable Merkle ledger of ``window_id`` (a new handle; close it)."""
        return self._db.ledger(window_id)

    def witness_store(self, window_id: str, *, group_commit: bool = True) -> StateWitnessStore:
        """Where the witnesses of ``window_id``'s ledger records are kept: this state's
        ``witnesses`` table (see :class:`StateWitnessStore`)."""
        return StateWitnessStore(self, window_id, group_commit=group_commit)


#: rows per block when a tenant's stored embeddings are read
_READ_ROWS = 4096


def _count(count: int | None) -> int:
    return 2**62 if count is None else int(count)


def _float_rows(block: Sequence[tuple[Any, ...]], column: int) -> np.ndarray:
    """The float32 blobs in ``column`` of ``block``'s rows as one array ``[rows, d]``."""
    joined = b"".join(r[column] for r in block)
    return np.frombuffer(joined, dtype="<f4").reshape(len(block), -1)


class StoredEmbeddings(EmbeddingSource):
    """A tenant's embeddings kept in its documents' rows (a SQLite state, or a PostgreSQL
    one without pgvector), as a :attr:`~ragprivacy.audit.EmbeddingSource.resident`
    source: a tenant commitment reads every row once, block by block, and keeps them in
    fixed point, so no float32 copy of the tenant is held beside its fixed-point rows.
    ``size``: the first ``size`` documents."""

    resident = True

    def __init__(self, backend: StateBackend, tenant: str, size: int, dim: int) -> None:
        self._db = backend
        self.tenant = tenant
        self.size = int(size)
        self.dim = int(dim)

    def chunks(self, rows: int) -> Iterator[FloatArray]:
        for block in self._db.read_blocks(
            "SELECT vector FROM documents WHERE tenant = ? AND pos < ? ORDER BY pos",
            (self.tenant, self.size),
            int(rows),
        ):
            yield _float_rows(block, 0)

    def vectors_at(self, positions: Sequence[int]) -> FloatArray:
        pos = [int(p) for p in positions]
        if not pos:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = dict(
            self._db.read(
                f"SELECT pos, vector FROM documents WHERE tenant = ? AND pos IN "
                f"({','.join('?' * len(set(pos)))})",
                (self.tenant, *sorted(set(pos))),
            )
        )
        if len(rows) != len(set(pos)):
            raise DataError(f"Tenant {self.tenant!r}: some of its embeddings were removed.")
        return _float_rows([(rows[p],) for p in pos], 0)


def _window(row: tuple[Any, ...]) -> Window:
    return Window(
        window_id=row[0],
        number=int(row[1]),
        status=row[2],
        snapshot=json.loads(row[3]),
        commitments=json.loads(row[4]),
        coalition=json.loads(row[5]) if row[5] else None,
        tree_head=json.loads(row[6]) if row[6] else None,
    )


class StateWitnessStore(WitnessStore):
    """A window's witnesses in the state's ``witnesses`` table, whichever backend holds
    it (a SQLite directory or a PostgreSQL database); durable before the record is
    appended. :meth:`ServiceState.witness_store` makes one.

    Concurrent puts are group-committed: the witnesses that threads store at the same
    time go into one transaction (one sync of ``synchronous=FULL``), and each put returns
    only once that transaction committed (see :class:`ragprivacy._sqlite.GroupCommit`).
    ``group_commit=False`` commits each put alone."""

    def __init__(self, state: ServiceState, window_id: str, *, group_commit: bool = True) -> None:
        super().__init__()
        self._state = state
        self._window_id = window_id
        self._group: GroupCommit[tuple[str, str], None] = GroupCommit(
            self._put_batch, max_batch=256 if group_commit else 1
        )

    def put(self, proof: str, witness: RecordWitness) -> None:
        self._group.run((proof, json.dumps(witness.to_dict())))

    def _put_batch(self, items: list[tuple[str, str]]) -> list[None]:
        with self._state._write() as conn:
            conn.executemany(
                "INSERT INTO witnesses VALUES (?, ?, ?) ON CONFLICT (window_id, proof) "
                "DO UPDATE SET witness = excluded.witness",
                [(self._window_id, proof, witness) for proof, witness in items],
            )
        return [None] * len(items)

    def get(self, proof: str) -> RecordWitness | None:
        row = self._state._one(
            "SELECT witness FROM witnesses WHERE window_id = ? AND proof = ?",
            (self._window_id, proof),
        )
        return None if row is None else RecordWitness.from_dict(json.loads(row[0]))
