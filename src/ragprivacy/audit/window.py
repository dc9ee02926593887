"""One audit window, as an object: phases A–C of the collusion paper (§5.2–§5.4).

:class:`AuditWindow` is the serving core every audited path runs — the library, the
service (one per open window, over its durable ledger, witness table and stored
commitments; several processes or replicas may serve one window over one ledger) and the
demo. It owns

- the window policy and one map of per-account policies (the window's, or each account's
  committed, only lower, overrides: :meth:`ragprivacy.audit.AuditPolicy.for_account`);
- the counter: an account's queries are its records in the ledger
  (:class:`~ragprivacy.audit.counter.LedgerCounter`), so an account spends exactly what
  was appended, and the rate limit is checked again inside the append (its guard);
- the one integer selection (:func:`~ragprivacy.audit.selection.answer_query`), the
  records, the witnesses and the signed receipts;
- its close: ``with AuditWindow(...) as w:`` closes the ledger it holds.

``commit`` publishes the signed commitments (phase A); ``query`` answers one query with
noise derived from the committed seed on *every* score of the account's tenant index,
then top-K, appends r_q to the durable Merkle ledger and returns a signed receipt (phase
B); ``coalition_claim`` runs the agreed estimator over the window (phase C).
``transcript`` is what is published; ``auditor_package`` what a trusted auditor gets for
re-execution (the seed and the witnesses).

How a query is routed, numbered, noised and selected is written once, in small methods
(``_route``, ``_query_number``, ``_noise_seed``, ``_query_vector``, ``_check_rate_limit``
and the ``selection`` rule); a provider that cheats is a subclass overriding them
(:mod:`ragprivacy.audit.cheats`, for testing and demonstrating the verifier), never a
switch in this code.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, replace
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray, IntArray
from ragprivacy.audit.coalition import estimate_coalition
from ragprivacy.audit.commitments import (
    EMPTY_LEDGER,
    AuditPolicy,
    EmbeddingSource,
    TenantCommitment,
    embedding_commitment,
    fixed_point,
    index_salt_key,
    name_salt,
    names_key,
    pseudonym,
    seed_commitment,
)
from ragprivacy.audit.counter import LedgerCounter, StaleCount
from ragprivacy.audit.filters import (
    FilterScreen,
    FilterState,
    filters_commitment,
    screen_documents,
)
from ragprivacy.audit.merkle import MerkleLog
from ragprivacy.audit.noise import QueryNoise
from ragprivacy.audit.proofs import AuditorReexecution, ProofSystem, RecordWitness
from ragprivacy.audit.records import (
    NONCE,
    ProviderKey,
    QueryRecord,
    Receipt,
    SignedTreeHead,
    query_commitment,
    query_hash,
    record_salt,
    topk_commitment,
    topk_hash,
)
from ragprivacy.audit.selection import ScoreAt, answer_query, honest_selection
from ragprivacy.audit.transcript import (
    AuditorPackage,
    CoalitionClaim,
    Commitments,
    PublicTranscript,
    QueryAnswer,
)
from ragprivacy.audit.votes import VoteSettings, answer_hash, vote_positions
from ragprivacy.dp import ChaCha20Bits, GaussianNoisyTopK, VoteTrace, derived_bits, query_input
from ragprivacy.embed import Embedder
from ragprivacy.errors import BudgetExhaustedError, BusyError, ConfigError, DataError

__all__ = ["TIMESTAMP_UNIT_NS", "AuditWindow", "WitnessStore"]

#: the provider's clock is read to the whole second, then rounded down to the policy's
#: ``stamp_unit``: the audit needs only that a record lies in its window and that stamps
#: do not decrease along the ledger (the coalition estimator's τ covers the whole window,
#: or the window FAILs ``policy_cap``), and a finer stamp would tell an outsider when each
#: account asked
TIMESTAMP_UNIT_NS = 1_000_000_000


class WitnessStore:
    """Where a provider keeps its private witnesses, keyed by the record's attestation π_q
    (the witness digest), so that a witness can be stored *before* its record is appended
    (a crash in between leaves an unused witness, never a record without one). In memory
    by default; a service keeps them durable."""

    def __init__(self) -> None:
        self._items: dict[str, RecordWitness] = {}
        self._lock = threading.Lock()

    def put(self, proof: str, witness: RecordWitness) -> None:
        with self._lock:
            self._items[proof] = witness

    def get(self, proof: str) -> RecordWitness | None:
        with self._lock:
            return self._items.get(proof)


class AuditWindow:
    """One audit window of the multi-tenant retrieval with audit instrumentation.

    Args:
        policy: the window's :class:`AuditPolicy`.
        tenants: tenant id → (document ids, unit-norm embeddings ``[N_t, d]`` held in
            memory, or an :class:`EmbeddingSource` they are read from when needed — a
            service's pgvector table; only the Merkle tree of their hashes is kept then).
        accounts: account id → tenant id.
        embedder: embeds query texts (its fingerprint enters C_emb); optional when every
            query is given as a vector.
        key: the provider's long-term signing key (default: a fresh one).
        seed: s_W, ≥ 32 bytes (default: 32 bytes from the OS).
        ledger_path: SQLite file of the ledger (default: in memory); several processes
            may serve one window over one file.
        ledger: the window's ledger, already opened (e.g. a :class:`MerkleLog` over a
            :class:`ragprivacy.audit.PostgresLedgerStorage` that replicas share); instead
            of ``ledger_path``.
        prompt_template, tokenizer: bound into C_emb.
        proof_system: how π_q is made (default: auditor re-execution).
        account_policies: account → its own policy
            (:data:`~ragprivacy.audit.POLICY_OVERRIDES`, only lower than the window's),
            committed with the window.
        witness_store: where witnesses are kept (default: in memory).
        commitments: phase-A commitments already published (a second process serving
            the same window resumes them instead of committing again); the account
            policies and vote settings then come from them unless given.
        voting: tenant id → its committed :class:`~ragprivacy.audit.VoteSettings` (a
            ``dp_vote``, ``murag`` or ``murag_ada`` tenant).
        filters: filtered (``murag``, ``murag_ada``) tenant id → what each of its
            documents had spent when the window opened (ε per index position; the
            previous window's :meth:`document_spent`), or a fresh
            :class:`~ragprivacy.audit.FilterState` holding it; committed as C_filters
            (:mod:`ragprivacy.audit.filters`). Default: nothing spent.
        embedder_spec: the registry spec of ``embedder`` (e.g. ``"hashing:384"``),
            published so a verifier can rebuild it; default: its name.
        contents: tenant id → the hex SHA-256 of each document's text, in index order,
            committed in the index leaves (a tenant left out commits no text: only its
            ids and embeddings).

    Accounts and tenants are given and asked for by name; what the window publishes
    (commitments, records, receipts' ``account``, ĉ) names them by their pseudonyms of
    the window (:func:`~ragprivacy.audit.pseudonym`, keyed by s_W), and so does rec_q, the
    noise's input, which the verifier re-executes from the public record. ``accounts``,
    ``voting`` and the witnesses' tenants are keyed by pseudonym; :attr:`names` maps a
    pseudonym back to its name, :meth:`account_id` a name to its pseudonym.
    """

    def __init__(
        self,
        *,
        policy: AuditPolicy,
        tenants: Mapping[str, tuple[Sequence[str], FloatArray | EmbeddingSource]],
        accounts: Mapping[str, str],
        embedder: Embedder | None = None,
        key: ProviderKey | None = None,
        seed: bytes | None = None,
        ledger_path: str | Path | None = None,
        ledger: MerkleLog | None = None,
        prompt_template: str = "",
        tokenizer: str = "",
        proof_system: ProofSystem | None = None,
        account_policies: Mapping[str, Mapping[str, Any]] | None = None,
        witness_store: WitnessStore | None = None,
        commitments: Commitments | None = None,
        embedder_spec: str | None = None,
        contents: Mapping[str, Sequence[str]] | None = None,
        voting: Mapping[str, VoteSettings] | None = None,
        filters: Mapping[str, FilterState | FloatArray] | None = None,
    ) -> None:
        self.policy = policy
        self.embedder = embedder
        # the registry spec a verifier rebuilds the embedder from (default: its name)
        self.embedder_spec = embedder_spec or (embedder.name if embedder is not None else "")
        self.key = key or ProviderKey.generate()
        self.seed = seed if seed is not None else os.urandom(32)
        seed_commitment(self.seed)  # validates the length
        self.proof_system = proof_system or AuditorReexecution()
        if not tenants:
            raise ConfigError("An audit window needs at least one tenant.")
        self._names_key = self._pseudonym_key()
        #: pseudonym → the account's or tenant's name
        self.names: dict[str, str] = {}
        self._aliases: dict[tuple[str, str], str] = {}
        self._ids: dict[str, list[str]] = {}
        self._index: dict[str, TenantCommitment] = {}
        texts = dict(contents or {})
        unknown_texts = sorted(set(texts) - set(tenants))
        if unknown_texts:
            raise ConfigError(f"Contents given for unknown tenants: {', '.join(unknown_texts)}.")
        for t, (ids, vectors) in tenants.items():
            rows = (
                vectors.size
                if isinstance(vectors, EmbeddingSource)
                else np.asarray(vectors).shape[0]
            )
            if len(ids) != rows:
                raise ConfigError(f"Tenant {t!r}: give one id per embedding.")
            pt = self._alias("tenant", t)
            self._index[pt] = TenantCommitment(
                pt, vectors, ids, salt_key=index_salt_key(self.seed), contents=texts.get(t)
            )
            self._ids[pt] = self._index[pt].ids  # one list of a tenant's ids, not two
        for a, t in accounts.items():
            if t not in tenants:
                raise ConfigError(f"Account {a!r} names unknown tenant {t!r}.")
        unknown_voting = sorted(set(voting or {}) - set(tenants))
        if unknown_voting:
            raise ConfigError(f"Vote settings given for unknown tenants: {unknown_voting}.")
        self.voting = dict(sorted((self._alias("tenant", t), v) for t, v in (voting or {}).items()))
        if voting is None and commitments is not None:  # resumed: the committed settings
            self.voting = {
                t: VoteSettings.from_dict(v) for t, v in sorted(commitments.voting.items())
            }
        self.filters = self._filter_states(filters or {})
        self.accounts = {
            self._alias("account", a): self._aliases[("tenant", t)] for a, t in accounts.items()
        }
        unknown = sorted(set(account_policies or {}) - set(accounts))
        if unknown:
            raise ConfigError(f"Policies given for unknown accounts: {', '.join(unknown)}.")
        self.account_policies = {
            self._aliases[("account", a)]: dict(o) for a, o in (account_policies or {}).items() if o
        }
        if account_policies is None and commitments is not None:
            # resumed: each account's committed policy (with its σ), keyed by pseudonym
            self.account_policies = {a: dict(o) for a, o in commitments.account_policies.items()}
        self.account_policies = dict(sorted(self.account_policies.items()))
        self._policies = {
            a: policy.for_account(self.account_policies.get(a)) for a in self.accounts
        }
        self._mechanisms = {a: p.mechanism() for a, p in self._policies.items()}
        self._last_stamp = 0
        self._lock = threading.Lock()  # a stamp and the queueing of its append; the map below
        self._account_locks: dict[str, threading.Lock] = {}
        if ledger is not None and ledger_path is not None:
            raise ConfigError("Give an audit window a ledger_path or a ledger, not both.")
        self.ledger = ledger if ledger is not None else MerkleLog(ledger_path)
        # The ledger is the counter: an account's queries are its records, counted as the
        # ledger is read (also what other processes appended to the same file).
        self.counter = LedgerCounter(self.ledger, self.accounts, tenants=self.filters)
        self.witnesses = witness_store or WitnessStore()
        self.prompt_template = prompt_template
        self.tokenizer = tokenizer
        self._commitments: Commitments | None = commitments
        # H(commitments), computed once for the commitments object it is of
        self._commitments_digest: tuple[Commitments, str] | None = None
        if commitments is not None:  # resumed: serve only the documents it committed
            if commitments.accounts != self.accounts:
                raise DataError(
                    "The accounts are not those the window's published commitments name "
                    "(another seed, or accounts added or moved since it opened); close the "
                    "window and open a new one."
                )
            if commitments.voting != {t: v.to_dict() for t, v in self.voting.items()}:
                raise DataError(
                    "The voting tenants' settings are not those the window's published "
                    "commitments name; close the window and open a new one."
                )
            if commitments.filters != self._filter_commitments():
                raise DataError(
                    "The filtered tenants' document budgets are not those the window's "
                    "published commitments name; close the window and open a new one."
                )
            for t, c in self._index.items():
                if commitments.c_idx.get(t) != c.root.hex():
                    raise DataError(
                        f"Tenant {self.names[t]!r}: its documents (embeddings, ids or texts) "
                        "are not those the window's published commitments name; they changed "
                        "since the window opened. Close the window and open a new one."
                    )

    def _filter_states(
        self, given: Mapping[str, FilterState | FloatArray]
    ) -> dict[str, FilterState]:
        """Each filtered tenant's state, keyed by pseudonym (nothing spent unless given)."""
        unknown = sorted(
            t
            for t in given
            if self._aliases.get(("tenant", t)) not in self.voting
            or not self.voting[self._aliases[("tenant", t)]].filtered
        )
        if unknown:
            raise ConfigError(
                f"Filter states given for tenants without per-document filters: {unknown}."
            )
        out: dict[str, FilterState] = {}
        for t, settings in self.voting.items():
            if not settings.filtered:
                continue
            state = given.get(self.names[t])
            size = len(self._ids[t])
            if state is None:
                state = np.zeros(size)
            if not isinstance(state, FilterState):
                state = FilterState(np.asarray(state, dtype=np.float64))
            elif state.applied:
                raise ConfigError(
                    f"Tenant {self.names[t]!r}: a filter state that caught up on another "
                    "window's records cannot start this one; give its document_spent()."
                )
            if state.start.shape != (size,):
                raise ConfigError(
                    f"Tenant {self.names[t]!r}: give one spent ε per document "
                    f"({size}); got {state.start.shape[0]}."
                )
            out[t] = state
        return out

    def _filter_commitments(self) -> dict[str, str]:
        return {
            t: filters_commitment(self.seed, t, f.start) for t, f in sorted(self.filters.items())
        }

    def _alias(self, kind: str, name: str) -> str:
        """The pseudonym of ``name`` (an account or a tenant) in this window, registered."""
        got = self._aliases.get((kind, name))
        if got is None:
            got = pseudonym(kind, name_salt(self._names_key, kind, name), name)
            self._aliases[(kind, name)] = got
            self.names[got] = name
        return got

    def account_id(self, account: str) -> str:
        """The pseudonym account ``account`` has in this window (what its records carry);
        :class:`ConfigError` for an account the window does not hold."""
        got = self._aliases.get(("account", account))
        if got is None:
            raise ConfigError(f"Unknown account {account!r}.")
        return got

    def holds(self, account: str) -> bool:
        """Whether account ``account`` (by name) is one of the window's."""
        return ("account", account) in self._aliases

    def tenant_id(self, tenant: str) -> str:
        """The pseudonym tenant ``tenant`` has in this window."""
        got = self._aliases.get(("tenant", tenant))
        if got is None:
            raise ConfigError(f"Unknown tenant {tenant!r}.")
        return got

    def tenant_of(self, account: str) -> str:
        """The name of account ``account``'s committed tenant t(a)."""
        return self.names[self.accounts[self.account_id(account)]]

    def vote_settings(self, account: str) -> VoteSettings | None:
        """The committed vote settings of ``account``'s tenant (None: a retrieval tenant)."""
        return self.voting.get(self.accounts[self.account_id(account)])

    @property
    def account_names(self) -> dict[str, str]:
        """Account name → its tenant's name, as given."""
        return {self.names[a]: self.names[t] for a, t in sorted(self.accounts.items())}

    def close(self) -> None:
        """Close the window's ledger (its file or its connection); the window is not
        served by this object afterwards. Idempotent."""
        self.ledger.close()

    def __enter__(self) -> AuditWindow:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ phase A
    def schema(self) -> dict[str, Any]:
        dims = {c.dim for c in self._index.values()}
        # the tenants' pseudonyms, not their sizes: a size is told only to the auditor
        return {"tenants": sorted(self._index), "dim": sorted(dims)}

    def commit(self, published_at: int) -> Commitments:
        """Publish the signed phase-A commitments (before the window opens)."""
        fp = self.embedder.fingerprint() if self.embedder is not None else "vectors-only"
        unsigned = Commitments(
            c_emb=embedding_commitment(
                fp, self.prompt_template, self.tokenizer, self.schema()
            ).hex(),
            c_idx={t: c.root.hex() for t, c in sorted(self._index.items())},
            c_seed=seed_commitment(self.seed).hex(),
            c_ledger0=EMPTY_LEDGER.hex(),
            c_policy=self.policy.commitment().hex(),
            policy=self.policy.to_dict(),
            schema=self.schema(),
            accounts=dict(sorted(self.accounts.items())),
            account_policies={
                a: {**o, "sigma": self._policies[a].noise_sigma}
                for a, o in self.account_policies.items()
            },
            embedder={
                "name": self.embedder_spec,
                "fingerprint": fp,
                "prompt_template": self.prompt_template,
                "tokenizer": self.tokenizer,
            },
            published_at=int(published_at),
            provider_key=self.key.public_hex,
            voting={t: v.to_dict() for t, v in self.voting.items()},
            filters=self._filter_commitments(),
        )
        signed = Commitments(**{**asdict(unsigned), "signature": self.key.sign(unsigned.message())})
        self._commitments = signed
        return signed

    def _digest_of_commitments(self) -> str:
        """H(the signed commitments) every receipt and tree head names, computed once (it
        serialises every commitment of the window)."""
        com = self.commitments
        if self._commitments_digest is None or self._commitments_digest[0] is not com:
            self._commitments_digest = (com, com.digest())
        return self._commitments_digest[1]

    @property
    def commitments(self) -> Commitments:
        """The published phase-A commitments (after :meth:`commit`, or given)."""
        if self._commitments is None:
            raise ConfigError("Publish the commitments (commit) before the window's queries.")
        return self._commitments

    # ------------------------------------------------------------------ phase B
    def _embed(self, text: str | None, vector: FloatArray | None) -> tuple[np.ndarray, str]:
        if (text is None) == (vector is None):
            raise ConfigError("Give a query text or a query vector (exactly one).")
        if text is not None:
            if self.embedder is None:
                raise ConfigError("Text queries need the provider's embedder.")
            return fixed_point(self.embedder.encode([text]))[0], query_hash(text)
        q = fixed_point(np.asarray(vector, dtype=np.float64))[0]
        return q, hashlib.sha256(q.tobytes()).hexdigest()

    def query(
        self,
        account: str,
        text: str | None = None,
        *,
        vector: FloatArray | None = None,
        ts: int | None = None,
        before_append: Callable[[tuple[str, ...]], None] | None = None,
        nonce: str = "",
    ) -> QueryAnswer:
        """Answer one query (noise-then-select), append r_q and return a signed receipt.

        ``ts=None`` stamps the record with the provider's clock to the whole second
        (:data:`TIMESTAMP_UNIT_NS`), never before the ledger's last timestamp: concurrent
        writers (other processes) then never fail on a timestamp, they derive again like
        on a stale count. A given ``ts`` must not precede the ledger's last one.

        ``before_append(ids)`` runs on the selected documents before the record is
        appended (a service generates its answer there): if it raises, nothing is
        appended and the account spends nothing. So it may raise only for a failure that
        provably does not depend on the documents; any other failure is an answer, and
        the hook keeps it and lets the record be appended (the service's hook does:
        :mod:`ragprivacy.service.failures`).

        ``nonce`` is the client's n of rec_q (up to 64 lowercase hex digits; the shipped
        client sends 128 random bits and checks it on the receipt).
        """
        account = self._check_request(account, nonce)
        if self.accounts[account] in self.voting:
            raise ConfigError(
                f"Account {self.names[account]!r} belongs to a voting tenant: its documents "
                "never leave the service; ask for a voted answer (vote)."
            )
        if ts is not None:
            self._check_in_window(int(ts))
            ts = self.policy.stamp(int(ts))
        q, hq = self._embed(text, vector)
        q = self._query_vector(account, text, q)
        # No scores yet: the selection reads them inside the account's lock, for the few
        # slots the noise leaves in the race (honest_selection).
        # One query of an account at a time in this process (its record number j is the
        # count of its records before it); queries of different accounts derive their
        # noise in parallel and share the ledger's group commit. Other processes: the
        # guard.
        with self._account_lock(account):
            for _ in range(64):
                expected = self.counter.used(account, wait=False)
                try:
                    stamp = None if ts is None else int(ts)  # None: stamped when queued
                    return self._answer(
                        account, text, q, hq, stamp, expected, before_append, ts is None, nonce
                    )
                except StaleCount:
                    continue
        raise BusyError("The ledger is too busy for this account; retry the query.")

    def _check_request(self, account: str, nonce: str) -> str:
        """The pseudonym of ``account``, after checking the request can be served."""
        if self._commitments is None:
            raise ConfigError("Publish the commitments (commit) before the window's queries.")
        pa = self.account_id(account)
        if not isinstance(nonce, str) or not NONCE.fullmatch(nonce):
            raise ConfigError("A query's nonce must be at most 64 lowercase hex digits.")
        return pa

    def limit(self, account: str) -> int:
        """The records account ``account`` may have in the window: its rate limit r, and
        for a voting tenant's account no more answers than its ε_acc buys at ε_q each."""
        return self._limit(self.account_id(account))

    def _limit(self, account: str) -> int:
        policy = self._policies[account]
        settings = self.voting.get(self.accounts[account])
        if settings is None:
            return policy.rate_limit
        return settings.answer_cap(policy.epsilon_acc, policy.rate_limit)

    def _check_rate_limit(self, account: str, used: int) -> None:
        """Refuse a query of ``account`` that has ``used`` its limit (checked before the
        selection, and again under the ledger's lock by the append's guard)."""
        limit = self._limit(account)
        if used >= limit:
            kind = "answers" if self.accounts[account] in self.voting else "queries"
            raise BudgetExhaustedError(
                f"Account {self.names[account]!r} has used its {limit} {kind} in this window; "
                "wait for the next window."
            )

    def _account_lock(self, account: str) -> threading.Lock:
        with self._lock:
            return self._account_locks.setdefault(account, threading.Lock())

    def _check_in_window(self, ts: int) -> None:
        if not self.policy.window_start <= ts <= self.policy.window_end:
            raise ConfigError(
                f"Timestamp {ts} lies outside the window [{self.policy.window_start}, "
                f"{self.policy.window_end}]."
            )

    def _next_ts(self) -> int:
        """Now, to the whole :data:`TIMESTAMP_UNIT_NS`, and never before the ledger's last
        record or this process's last stamp (clocks of two processes may disagree; a stamp
        may still be queued for the ledger). Called under ``_lock``, with the append
        queued at once."""
        now = self.policy.stamp(time.time_ns() // TIMESTAMP_UNIT_NS * TIMESTAMP_UNIT_NS)
        ts = max(now, self.policy.window_start, self.counter.last_ts, self._last_stamp)
        self._check_in_window(ts)
        self._last_stamp = ts
        return ts

    def policy_of(self, account: str) -> AuditPolicy:
        """The account's own policy (the window's, or its committed overrides)."""
        return self._policies[self.account_id(account)]

    def used(self, account: str) -> int:
        """Records of ``account`` in the ledger (its queries in the window so far)."""
        return self.counter.used(self.account_id(account))

    # How a query is routed, numbered, noised and selected: one small method each, the
    # honest rule. A cheating provider (ragprivacy.audit.cheats) overrides them.
    def _route(self, account: str) -> tuple[str, str]:
        """(the tenant ``account``'s record names, the tenant whose index it is scored
        against): its committed t(a), both."""
        tenant = self.accounts[account]
        return tenant, tenant

    def _query_number(self, account: str, used: int) -> int:
        """j of rec_q: one more than the account's records before it."""
        return used + 1

    def _noise_seed(self) -> bytes:
        """The committed window seed s_W the noise is derived from."""
        return self.seed

    def _pseudonym_key(self) -> bytes:
        """K_names, the key of the window's pseudonyms: derived from s_W."""
        return names_key(self.seed)

    def _query_vector(self, account: str, text: str | None, q: np.ndarray) -> np.ndarray:
        """The fixed-point vector scored for ``account``'s query: Emb(q) itself."""
        return q

    def _select(
        self, mechanism: GaussianNoisyTopK, noise: QueryNoise, score_at: ScoreAt
    ) -> IntArray:
        """The account's noise-then-select (:func:`~ragprivacy.audit.honest_selection`)."""
        return honest_selection(mechanism, noise, score_at)

    def document_spent(self, tenant: str) -> np.ndarray:
        """What each document of filtered tenant ``tenant`` (by name) has spent after
        every record committed so far: the state the next window commits."""
        t = self.tenant_id(tenant)
        if t not in self.filters:
            raise ConfigError(f"Tenant {tenant!r} has no per-document filters.")
        with self._account_lock(t):  # not while an answer of the tenant screens
            self.counter.refresh()
            return self._filters_now(t)[0]

    def document_ids(self, tenant: str) -> list[str]:
        """The committed document ids of tenant ``tenant`` (by name), in index order."""
        return list(self._ids[self.tenant_id(tenant)])

    def screenings(self, tenant: str) -> list[tuple[int, FilterScreen]]:
        """Filtered tenant ``tenant``'s (by name) committed records, by ledger position,
        with their screenings: the charges a service settles into its lifetime filter
        store once the window closes."""
        t = self.tenant_id(tenant)
        if t not in self.filters:
            raise ConfigError(f"Tenant {tenant!r} has no per-document filters.")
        self.counter.refresh()
        positions, _ = self.counter.positions(t)
        return list(zip(positions, self._screens(positions)))

    def _screens(self, positions: Sequence[int]) -> list[FilterScreen]:
        out = []
        for p in positions:
            witness = self.witnesses.get(QueryRecord.from_bytes(self.ledger.leaf(p)).proof)
            if witness is None or witness.screen is None:
                raise DataError(
                    f"Record {p} of a filtered tenant has no screening in the witness store: "
                    "its filters cannot be replayed."
                )
            out.append(witness.screen)
        return out

    def _filters_now(self, tenant: str) -> tuple[np.ndarray, int]:
        """A filtered tenant's documents' spent ε after its committed records (as far as
        the counter last read the ledger), and how many records that is."""
        return self.filters[tenant].catch_up(
            lambda applied: self.counter.positions(tenant, applied), self._screens
        )

    def _screen(
        self, scores: np.ndarray, spent: np.ndarray, settings: VoteSettings, bits: ChaCha20Bits
    ) -> FilterScreen:
        """A filtered tenant's screening (:func:`~ragprivacy.audit.screen_documents`)."""
        return screen_documents(scores, spent, settings, bits)

    def _vote_select(
        self, index: TenantCommitment, q: np.ndarray, settings: VoteSettings
    ) -> tuple[int, ...]:
        """A voting answer's documents: the top m·k exact scores of the committed index
        (:func:`~ragprivacy.audit.votes.vote_positions`)."""
        return vote_positions(index.scores(q, self.policy.grid_bits), settings.slots)

    def _answer(
        self,
        account: str,
        text: str | None,
        q: np.ndarray,
        hq: str,
        ts: int | None,
        expected: int,
        before_append: Callable[[tuple[str, ...]], None] | None = None,
        restamp: bool = False,
        nonce: str = "",
    ) -> QueryAnswer:
        self._check_rate_limit(account, expected)
        tenant, scored = self._route(account)
        record, witness = answer_query(
            window_id=self.policy.window_id,
            mechanism=self._mechanisms[account],
            grid_bits=self.policy.grid_bits,
            index=self._index[scored],
            seed=self._noise_seed(),
            account=account,
            tenant=tenant,
            scored_tenant=scored,
            query_fixed=q,
            query_hash=hq,
            query_text=text,
            seq=self._query_number(account, expected),
            ts=0 if ts is None else ts,  # ts enters neither rec_q's noise nor π_q
            proof_system=self.proof_system,
            select=self._select,
            nonce=nonce,
            derivation=self.policy.noise,
        )
        if before_append is not None:
            before_append(witness.ids)
        receipt = self._append(
            account,
            record,
            witness,
            expected,
            restamp,
            query_hash=hq,
            topk_hash=topk_hash(tenant, witness.positions, witness.ids, witness.contents),
            documents=tuple(zip(witness.positions, witness.ids, witness.contents)),
        )
        return QueryAnswer(witness.positions, witness.ids, receipt)

    def _append(
        self,
        account: str,
        record: QueryRecord,
        witness: RecordWitness,
        expected: int,
        restamp: bool,
        *,
        query_hash: str,
        topk_hash: str,
        documents: tuple[tuple[int, str, str], ...],
        answer: str | None = None,
        screened_on: tuple[str, int] | None = None,
    ) -> Receipt:
        """Append ``record`` (its witness stored first) guarded by the account's count,
        stamped now when ``restamp`` (the caller gave no timestamp), and sign its receipt."""
        self.witnesses.put(record.proof, witness)  # durable before the record exists
        with self._lock:  # stamped in queue order: the ledger's timestamps increase
            if restamp:
                record = replace(record, ts=self._next_ts())
            ticket = self.ledger.submit(
                [record.to_bytes()],
                guard=self.counter.guard(
                    account,
                    expected,
                    record.ts,
                    restamp=restamp,
                    check_limit=self._check_rate_limit,
                    tenant=screened_on,
                ),
            )
        pos = ticket.result()[0]  # waits for the (shared) commit: the record is durable
        size = pos + 1
        name = self.names[account]
        unsigned = Receipt(
            window_id=self.policy.window_id,
            account=account,
            holder=name,
            holder_salt=name_salt(self._names_key, "account", name).hex(),
            query_hash=query_hash,
            topk_hash=topk_hash,
            documents=documents,
            nonce=witness.nonce,
            salt=witness.salt,
            seq=record.seq,
            position=pos,
            tree_size=size,
            root=self.ledger.root(size).hex(),
            commitments=self._digest_of_commitments(),
            answer=answer,
        )
        return replace(unsigned, signature=self.key.sign(unsigned.message()))

    def vote(
        self,
        account: str,
        text: str,
        run: Callable[[tuple[str, ...], ChaCha20Bits], VoteTrace],
        *,
        nonce: str = "",
    ) -> tuple[QueryAnswer, VoteTrace]:
        """Answer a voting tenant's query (:mod:`ragprivacy.audit.votes`), append r_q and
        return the signed receipt with the vote's trace.

        The window retrieves the committed tenant's top m·k documents by exact score and
        derives the vote's randomness from (s_W, rec_q); ``run(ids, bits)`` votes over
        those documents with those bits (:meth:`ragprivacy.rag.DPVoteRAG.answer_documents`)
        and returns the trace. As with :meth:`query`'s hook, ``run`` may raise only for a
        failure that provably does not depend on the documents (nothing is appended);
        any other failure is an answer: ``run`` returns the trace so far with its
        ``failure`` set, and the record is appended.
        """
        account = self._check_request(account, nonce)
        settings = self.voting.get(self.accounts[account])
        if settings is None:
            raise ConfigError(
                f"Account {self.names[account]!r} does not belong to a voting tenant."
            )
        q, hq = self._embed(text, None)
        tenant = self.accounts[account]
        with ExitStack() as held:
            if tenant in self.filters:
                # this process screens a filtered tenant's answers one at a time (another
                # process's append in between makes the screening stale: screened again);
                # the lock map is keyed by pseudonym, a tenant's too
                held.enter_context(self._account_lock(tenant))
            held.enter_context(self._account_lock(account))
            for _ in range(64):
                expected = self.counter.used(account, wait=False)
                try:
                    return self._vote(account, text, q, hq, expected, run, nonce, settings)
                except StaleCount:
                    continue
        raise BusyError("The ledger is too busy for this account; retry the query.")

    def _vote(
        self,
        account: str,
        text: str,
        q: np.ndarray,
        hq: str,
        expected: int,
        run: Callable[[tuple[str, ...], ChaCha20Bits], VoteTrace],
        nonce: str,
        settings: VoteSettings,
    ) -> tuple[QueryAnswer, VoteTrace]:
        self._check_rate_limit(account, expected)
        tenant = self.accounts[account]
        index = self._index[tenant]
        seq = self._query_number(account, expected)
        rec = query_input(self.policy.window_id, account, tenant, hq, seq, nonce)
        bits = derived_bits(self._noise_seed(), rec)
        screened, screened_on = None, None
        if settings.filtered:  # MURAG/-ADA: the screening charges the filters
            spent, count = self._filters_now(tenant)
            screened_on = (tenant, count)  # stale if another record of it comes first
            scores = index.scores(q, self.policy.grid_bits)
            screened = self._screen(scores, spent, settings, bits)
            positions = screened.positions
        else:
            positions = self._vote_select(index, q, settings)
        ids = tuple(index.ids[p] for p in positions)
        trace = run(ids, bits)
        salt = record_salt()
        witness = RecordWitness(
            query_text=text,
            query_fixed=np.asarray(q).astype("<i4").tobytes().hex(),
            scored_tenant=tenant,
            noise_digest="",
            positions=positions,
            ids=ids,
            contents=tuple(index.contents[p] for p in positions),
            openings=tuple(
                (p, vector.hex(), tuple(h.hex() for h in proof), leaf.hex())
                for p, (vector, proof, leaf) in zip(positions, index.openings(positions))
            ),
            salt=salt,
            nonce=nonce,
            vote=trace,
            screen=screened,
        )
        opened = answer_hash(tenant, trace.text)
        record = QueryRecord(
            account,
            tenant,
            query_commitment(salt, hq, nonce),
            topk_commitment(salt, opened),
            0,
            seq,
            self.proof_system.prove_record(witness),
        )
        receipt = self._append(
            account,
            record,
            witness,
            expected,
            True,
            query_hash=hq,
            topk_hash=opened,
            documents=(),
            answer=trace.text,
            screened_on=screened_on,
        )
        return QueryAnswer(positions, ids, receipt), trace

    def tree_head(self) -> SignedTreeHead:
        """The signed current ledger root C_ledger,t."""
        size = self.ledger.size  # once: a root read later could be of a longer ledger
        unsigned = SignedTreeHead(
            window_id=self.policy.window_id,
            size=size,
            root=self.ledger.root(size).hex(),
            commitments=self._digest_of_commitments(),
        )
        return replace(unsigned, signature=self.key.sign(unsigned.message()))

    # ------------------------------------------------------------------ phase C
    def coalition_claim(self) -> CoalitionClaim:
        """ĉ by the agreed estimator over the window's queries, with its certificate."""
        self.ledger.refresh()
        witnesses = self._witnesses_by_position()
        positions = sorted(witnesses)
        records = [QueryRecord.from_bytes(self.ledger.leaf(p)) for p in positions]
        estimate = estimate_coalition(
            np.stack([witnesses[p].query_vector() for p in positions]).astype(np.float64)
            if positions
            else np.zeros((0, 1)),
            [r.account for r in records],
            theta=self.policy.theta,
            ts=[r.ts for r in records],
            tau=self.policy.tau,
        )
        return CoalitionClaim.of(estimate, self.ledger.root().hex())

    # ------------------------------------------------------------------ outputs
    def transcript(self) -> PublicTranscript:
        if self._commitments is None:
            raise ConfigError("Nothing to publish: call commit first.")
        self.ledger.refresh()
        return PublicTranscript(
            commitments=self._commitments,
            records=[self.ledger.leaf(i) for i in range(self.ledger.size)],
            tree_head=self.tree_head(),
            coalition=self.coalition_claim(),
        )

    def _witnesses_by_position(self) -> dict[int, RecordWitness]:
        out = {}
        for i in range(self.ledger.size):
            w = self.witnesses.get(QueryRecord.from_bytes(self.ledger.leaf(i)).proof)
            if w is not None:
                out[i] = w
        return out

    def auditor_package(self) -> AuditorPackage:
        self.ledger.refresh()
        return AuditorPackage(
            seed=self.seed,
            witnesses=self._witnesses_by_position(),
            tenant_fixed={t: c.fixed for t, c in self._index.items()},
            tenant_ids={t: list(v) for t, v in self._ids.items()},
            tenant_contents={t: list(c.contents) for t, c in self._index.items()},
            names=dict(sorted(self.names.items())),
            filters={t: f.start.tolist() for t, f in sorted(self.filters.items())},
        )
