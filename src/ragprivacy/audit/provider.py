"""The provider side of one audit window: phases A–C (collusion paper §5.2–§5.4).

:class:`AuditedProvider` holds the tenants' committed embeddings, the accounts and the
policy. ``commit`` publishes the signed commitments (phase A); ``query`` answers one query
with noise derived from the committed seed on *every* score of the account's tenant index,
then top-K, appends r_q to the durable Merkle ledger and returns a signed receipt (phase
B); ``coalition_claim`` runs the agreed estimator over the window (phase C).
``transcript`` is what is published; ``auditor_package`` is what a trusted auditor gets
for re-execution (the seed and the witnesses).

``Misbehaviour`` makes the provider deviate in the ways the verifier must catch (noise not
from the committed seed, select-before-noise, scores not clipped to the committed
``score_range``, scoring against another tenant's index);
it exists to test and demonstrate the verifier.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray, IntArray
from ragprivacy.audit.coalition import CoalitionEstimate, estimate_coalition
from ragprivacy.audit.commitments import (
    EMPTY_LEDGER,
    AuditPolicy,
    EmbeddingSource,
    TenantCommitment,
    canonical_json,
    embedding_commitment,
    fixed_point,
    seed_commitment,
)
from ragprivacy.audit.merkle import MerkleLog
from ragprivacy.audit.noise import derived_noise, noise_digest
from ragprivacy.audit.proofs import AuditorReexecution, ProofSystem, RecordWitness
from ragprivacy.audit.records import (
    ProviderKey,
    QueryRecord,
    Receipt,
    SignedTreeHead,
    query_hash,
    topk_hash,
    verify_signature,
)
from ragprivacy.dp import (
    GaussianNoisyTopK,
    noise_first_min_scored,
    query_input,
    top_k_indices,
)
from ragprivacy.embed import Embedder
from ragprivacy.errors import BudgetExhaustedError, BusyError, ConfigError, DataError

__all__ = [
    "POLICY_OVERRIDES",
    "AuditedProvider",
    "AuditorPackage",
    "CoalitionClaim",
    "Commitments",
    "Misbehaviour",
    "PublicTranscript",
    "QueryAnswer",
    "WitnessStore",
    "account_policy",
    "answer_query",
    "exact_selection",
    "load_window",
    "save_window",
]


@dataclass(frozen=True, slots=True)
class Commitments:
    """Phase A, published and signed before the window opens.

    Besides the hashes of §5.2, the provider publishes what a verifier needs to check the
    records against them: the account → tenant map t(a) of the window (every record must
    name its account's committed tenant), each account's own policy where it differs from
    the window's (``account_policies``: a smaller ε_acc, δ_acc or r, its σ and K; the
    window policy is the largest budget any account has, which ε_audit is computed from),
    and the embedder's name, fingerprint, prompt template and tokenizer (C_emb is their
    hash with the schema; a verifier re-embeds a witnessed query text with an embedder of
    that fingerprint, claim A1).
    """

    c_emb: str
    c_idx: dict[str, tuple[str, int]]
    c_seed: str
    c_ledger0: str
    c_policy: str
    policy: dict[str, Any]
    schema: dict[str, Any]
    accounts: dict[str, str]
    account_policies: dict[str, dict[str, Any]]
    embedder: dict[str, str]
    published_at: int
    provider_key: str
    signature: str = ""

    def message(self) -> bytes:
        d = asdict(self)
        d.pop("signature")
        d["c_idx"] = {t: list(v) for t, v in d["c_idx"].items()}
        return b"commitments:" + canonical_json(d)

    def verify(self, public_hex: str | None = None) -> bool:
        return verify_signature(public_hex or self.provider_key, self.message(), self.signature)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["c_idx"] = {t: list(v) for t, v in d["c_idx"].items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Commitments:
        d = dict(d)
        d["c_idx"] = {t: (str(v[0]), int(v[1])) for t, v in d["c_idx"].items()}
        try:
            return cls(**d)
        except TypeError as exc:
            raise DataError(f"commitments.json is not a window's commitments: {exc}.") from None


@dataclass(frozen=True, slots=True)
class CoalitionClaim:
    """Phase C: ĉ with its certificate π_coal (re-execution: a hash of the estimate bound
    to the ledger root it was computed on)."""

    size: int
    accounts: tuple[str, ...]
    theta: float
    tau: int | None
    ledger_root: str
    certificate: str

    @staticmethod
    def certify(estimate: CoalitionEstimate, ledger_root: str) -> str:
        return hashlib.sha256(
            b"coalition:" + canonical_json({**estimate.to_dict(), "ledger_root": ledger_root})
        ).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["accounts"] = list(self.accounts)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CoalitionClaim:
        d = dict(d)
        d["accounts"] = tuple(d["accounts"])
        return cls(**d)


@dataclass(frozen=True, slots=True)
class QueryAnswer:
    """What the querying account gets: the selected documents and its signed receipt."""

    positions: tuple[int, ...]
    ids: tuple[str, ...]
    receipt: Receipt


@dataclass(frozen=True, slots=True, kw_only=True)
class Misbehaviour:
    """Deviations for testing the verifier (never for deployment).

    ``noise_seed``: noise from another seed; ``select_before_noise``: footnote 1's bug;
    ``skip_clipping``: noise on unclipped scores; ``cross_tenant``: account → the tenant
    index its queries are scored against (recorded under its own tenant);
    ``record_tenant``: account → another tenant it is recorded *and* served under (t(a)
    not as committed); ``ignore_rate_limit``: serve past r; ``seq_shift``: account → an
    offset added to its query numbers j (the provider choosing j to pick the noise);
    ``decoy_vectors``: account → a vector scored and witnessed instead of Emb(q) of its
    text queries.
    """

    noise_seed: bytes | None = None
    select_before_noise: bool = False
    skip_clipping: bool = False
    cross_tenant: Mapping[str, str] = field(default_factory=dict)
    record_tenant: Mapping[str, str] = field(default_factory=dict)
    ignore_rate_limit: bool = False
    seq_shift: Mapping[str, int] = field(default_factory=dict)
    decoy_vectors: Mapping[str, FloatArray] = field(default_factory=dict)


@dataclass(slots=True)
class PublicTranscript:
    """What the provider publishes: commitments, ledger (records), tree head, ĉ.

    ``coalition`` is None for a live window (still open: ĉ is certified at close); the
    verifier then runs only the checks that need no ĉ and no auditor package."""

    commitments: Commitments
    records: list[bytes]
    tree_head: SignedTreeHead
    coalition: CoalitionClaim | None


@dataclass(slots=True)
class AuditorPackage:
    """What a trusted auditor receives for re-execution: seed, witnesses, embeddings."""

    seed: bytes
    witnesses: dict[int, RecordWitness]
    tenant_fixed: dict[str, np.ndarray]
    tenant_ids: dict[str, list[str]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed.hex(),
            "witnesses": {str(k): w.to_dict() for k, w in self.witnesses.items()},
            "tenant_fixed": {
                t: {"dim": int(v.shape[1]), "hex": v.astype("<i4").tobytes().hex()}
                for t, v in self.tenant_fixed.items()
            },
            "tenant_ids": self.tenant_ids,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AuditorPackage:
        return cls(
            seed=bytes.fromhex(d["seed"]),
            witnesses={int(k): RecordWitness.from_dict(w) for k, w in d["witnesses"].items()},
            tenant_fixed={
                t: np.frombuffer(bytes.fromhex(v["hex"]), dtype="<i4").reshape(-1, v["dim"])
                for t, v in d["tenant_fixed"].items()
            },
            tenant_ids={t: list(v) for t, v in d["tenant_ids"].items()},
        )


#: exact integer scores (grid units) of one query at the given positions of its index
ScoreAt = Callable[[IntArray], IntArray]


def exact_selection(mechanism: GaussianNoisyTopK, noise: IntArray, score_at: ScoreAt) -> IntArray:
    """The account's noise-then-select TopK(clip(s) + z) (collusion paper eq. 2.1), asking
    ``score_at`` only for the slots whose noise leaves them a chance.

    ``noise`` holds z_q for every slot (derived before any score is read); ``score_at``
    gives exact integer scores for the positions it is asked. Every clipped score lies
    in the mechanism's bounds [lo, hi], so a slot whose z_i + hi is below the K-th
    largest z + lo cannot win (K slots beat it for sure):
    :meth:`~ragprivacy.dp.GaussianNoisyTopK.noise_first_positions` gives the others, C,
    from the noise alone. Only C is scored, and the top K of C under the same rule (ties
    to the lower position, C sorted) is the top K of the whole index, bit for bit: the
    verifier's re-execution stays the full rule over every slot and finds the same
    positions. At the audit's calibrations (σ ≫ Δ) C holds about K slots, so a query
    reads a handful of rows (from memory, or by position from a pgvector table) instead
    of every committed embedding.

    C is padded with the next-largest noises to at least
    :func:`ragprivacy.dp.noise_first_min_scored` (max(64, 8K)) slots, so the number of
    rows read is constant in practice: which rows are read depends on the noise and must
    stay as secret as it (a log of the rows read, seen beside the answer, says more than
    the answer). When C is more than :data:`~ragprivacy.dp.NOISE_FIRST_MAX_FRACTION` of
    the index (σ not large against Δ) every slot is scored in one pass instead.
    """
    z = np.asarray(noise, dtype=np.int64)
    if mechanism.bounds_units() is None:  # no clipping: no bound to prune with
        return mechanism.select_units(score_at(np.arange(z.shape[0], dtype=np.int64)), z)
    return mechanism.select_units_noise_first(
        z, score_at, min_scored=noise_first_min_scored(mechanism.k)
    )


def answer_query(
    *,
    window_id: str,
    mechanism: GaussianNoisyTopK,
    grid_bits: int,
    index: TenantCommitment,
    ids: Sequence[str],
    seed: bytes,
    account: str,
    tenant: str,
    query_fixed: np.ndarray,
    query_hash: str,
    query_text: str | None,
    seq: int,
    ts: int,
    proof_system: ProofSystem,
    scored_tenant: str | None = None,
    select_before_noise: bool = False,
    skip_clipping: bool = False,
    scores: np.ndarray | None = None,
) -> tuple[QueryRecord, RecordWitness]:
    """Answer one query privately: the one implementation every audited path runs.

    ``scores``: the exact integer scores of ``query_fixed`` against ``index``, when the
    caller computed them already (they depend on neither the seed nor the record, so a
    provider computes them before it takes its lock); computed here otherwise.

    Noise z_q derived from (s_W, rec_q = (W, a, t(a), H(q), j)) for every slot of the
    tenant's index, exact integer scores of the fixed-point query against the slots that
    noise leaves in the race (:func:`exact_selection`: the same positions as scoring every
    slot), the account mechanism's integer noise-then-select, then the record r_q with its
    attestation π_q and the private witness (Merkle openings of the selected positions).
    Appending the record, charging the account and signing the receipt are the caller's
    (:class:`AuditedProvider`, the service). ``select_before_noise`` and ``skip_clipping``
    are the deviations a cheating provider would run (tests only).
    """
    rec = query_input(window_id, account, tenant, query_hash, seq)
    z = derived_noise(seed, rec, mechanism, index.size)
    given = scores

    def score_at(positions: IntArray) -> IntArray:
        """Exact scores at ``positions``: from ``scores`` when given, else read from the
        index (in memory, or rows fetched by position from its store)."""
        pos = np.asarray(positions, dtype=np.int64)
        if given is not None:
            return np.asarray(given)[pos]
        if pos.shape[0] == index.size and np.array_equal(pos, np.arange(index.size)):
            return index.scores(query_fixed, grid_bits)
        return index.scores_at(query_fixed, pos.tolist(), grid_bits)

    if select_before_noise:  # footnote 1's bug
        everything = score_at(np.arange(index.size, dtype=np.int64))
        positions = top_k_indices(mechanism.clip_units(everything), mechanism.k)
    elif skip_clipping:  # Δ no longer bounded
        positions = top_k_indices(score_at(np.arange(index.size, dtype=np.int64)) + z, mechanism.k)
    else:  # the account's noise-then-select, the rule the verifier re-executes
        positions = exact_selection(mechanism, z, score_at)
    chosen = tuple(int(p) for p in positions)
    chosen_ids = tuple(ids[p] for p in chosen)
    openings = [
        (p, vector.hex(), tuple(h.hex() for h in proof))
        for p, (vector, proof) in zip(chosen, index.openings(chosen))
    ]
    witness = RecordWitness(
        query_text=query_text,
        query_fixed=np.asarray(query_fixed).astype("<i4").tobytes().hex(),
        scored_tenant=scored_tenant or tenant,
        noise_digest=noise_digest(z),
        positions=chosen,
        ids=chosen_ids,
        openings=tuple(openings),
    )
    record = QueryRecord(
        account,
        tenant,
        query_hash,
        topk_hash(tenant, chosen, chosen_ids),
        int(ts),
        int(seq),
        proof_system.prove_record(witness),
    )
    return record, witness


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


POLICY_OVERRIDES = ("epsilon_acc", "delta_acc", "rate_limit", "sigma", "top_k")


def account_policy(policy: AuditPolicy, overrides: Mapping[str, Any] | None) -> AuditPolicy:
    """An account's own policy: the window's with ``overrides`` (of
    :data:`POLICY_OVERRIDES`), which may only lower ε_acc, δ_acc and r — the window policy
    states the largest per-account budget, which ε_audit (eq. 5.2) is computed from."""
    if not overrides:
        return policy
    unknown = sorted(set(overrides) - set(POLICY_OVERRIDES))
    if unknown:
        raise ConfigError(
            f"An account policy may set {', '.join(POLICY_OVERRIDES)}; got {', '.join(unknown)}."
        )
    mine = replace(policy, **dict(overrides))
    if (
        mine.epsilon_acc > policy.epsilon_acc * (1 + 1e-12)
        or mine.delta_acc > policy.delta_acc * (1 + 1e-12)
        or mine.rate_limit > policy.rate_limit
    ):
        raise ConfigError(
            "An account's epsilon_acc, delta_acc and rate_limit may not exceed the window "
            "policy's (the window states the largest per-account budget); raise the window's."
        )
    return mine


class _StaleCount(Exception):
    """Another writer appended a record of the same account meanwhile: derive again."""


class AuditedProvider:
    """Runs one audit window of the multi-tenant retrieval with audit instrumentation.

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
        misbehaviour: deviations for testing the verifier (never for deployment).
        account_policies: account → its own policy (:data:`POLICY_OVERRIDES`, only lower
            than the window's), committed with the window.
        witness_store: where witnesses are kept (default: in memory).
        commitments: phase-A commitments already published (a second process serving
            the same window resumes them instead of committing again).
        embedder_spec: the registry spec of ``embedder`` (e.g. ``"hashing:384"``),
            published so a verifier can rebuild it; default: its name.
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
        misbehaviour: Misbehaviour | None = None,
        account_policies: Mapping[str, Mapping[str, Any]] | None = None,
        witness_store: WitnessStore | None = None,
        commitments: Commitments | None = None,
        embedder_spec: str | None = None,
    ) -> None:
        self.policy = policy
        self.embedder = embedder
        # the registry spec a verifier rebuilds the embedder from (default: its name)
        self.embedder_spec = embedder_spec or (embedder.name if embedder is not None else "")
        self.key = key or ProviderKey.generate()
        self.seed = seed if seed is not None else os.urandom(32)
        seed_commitment(self.seed)  # validates the length
        self.proof_system = proof_system or AuditorReexecution()
        self.misbehaviour = misbehaviour or Misbehaviour()
        if not tenants:
            raise ConfigError("An audited provider needs at least one tenant.")
        self._ids: dict[str, list[str]] = {}
        self._index: dict[str, TenantCommitment] = {}
        for t, (ids, vectors) in tenants.items():
            rows = (
                vectors.size
                if isinstance(vectors, EmbeddingSource)
                else np.asarray(vectors).shape[0]
            )
            if len(ids) != rows:
                raise ConfigError(f"Tenant {t!r}: give one id per embedding.")
            self._ids[t] = list(ids)
            self._index[t] = TenantCommitment(t, vectors)
        for a, t in accounts.items():
            if t not in self._index:
                raise ConfigError(f"Account {a!r} names unknown tenant {t!r}.")
        self.accounts = dict(accounts)
        self.account_policies = {
            a: dict(o) for a, o in sorted((account_policies or {}).items()) if o
        }
        unknown = sorted(set(self.account_policies) - set(self.accounts))
        if unknown:
            raise ConfigError(f"Policies given for unknown accounts: {', '.join(unknown)}.")
        self._policies = {
            a: account_policy(policy, self.account_policies.get(a)) for a in self.accounts
        }
        self._mechanisms = {a: p.mechanism() for a, p in self._policies.items()}
        # The ledger is the counter: an account's queries are its records, counted as the
        # ledger is read (also what other processes appended to the same file).
        self._count: dict[str, int] = dict.fromkeys(self.accounts, 0)
        self._scanned = 0
        self._last_ts = 0
        self._last_stamp = 0
        self._lock = threading.Lock()  # a stamp and the queueing of its append; the map below
        self._count_lock = threading.Lock()  # _count, _scanned, _last_ts
        self._account_locks: dict[str, threading.Lock] = {}
        if ledger is not None and ledger_path is not None:
            raise ConfigError("Give an audited provider a ledger_path or a ledger, not both.")
        self.ledger = ledger if ledger is not None else MerkleLog(ledger_path)
        self.witnesses = witness_store or WitnessStore()
        self.prompt_template = prompt_template
        self.tokenizer = tokenizer
        self._commitments: Commitments | None = commitments

    # ------------------------------------------------------------------ phase A
    def schema(self) -> dict[str, Any]:
        dims = {c.dim for c in self._index.values()}
        return {"tenants": {t: c.size for t, c in sorted(self._index.items())}, "dim": sorted(dims)}

    def commit(self, published_at: int) -> Commitments:
        """Publish the signed phase-A commitments (before the window opens)."""
        fp = self.embedder.fingerprint() if self.embedder is not None else "vectors-only"
        unsigned = Commitments(
            c_emb=embedding_commitment(
                fp, self.prompt_template, self.tokenizer, self.schema()
            ).hex(),
            c_idx={t: (c.root.hex(), c.size) for t, c in sorted(self._index.items())},
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
        )
        signed = Commitments(**{**asdict(unsigned), "signature": self.key.sign(unsigned.message())})
        self._commitments = signed
        return signed

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
    ) -> QueryAnswer:
        """Answer one query (noise-then-select), append r_q and return a signed receipt.

        ``ts=None`` stamps the record with the provider's clock, moved past the ledger's
        last timestamp on every attempt: concurrent writers (other processes) then never
        fail on a timestamp, they derive again like on a stale count. A given ``ts`` must
        follow the ledger's last one.

        ``before_append(ids)`` runs on the selected documents before the record is
        appended (a service generates its answer there): if it raises, nothing is
        appended and the account spends nothing. So it may raise only for a failure that
        provably does not depend on the documents; any other failure is an answer, and
        the hook keeps it and lets the record be appended (the service's hook does:
        :mod:`ragprivacy.service.failures`).
        """
        if self._commitments is None:
            raise ConfigError("Publish the commitments (commit) before the window's queries.")
        if account not in self.accounts:
            raise ConfigError(f"Unknown account {account!r}.")
        if ts is not None:
            self._check_in_window(int(ts))
        q, hq = self._embed(text, vector)
        bad = self.misbehaviour
        if text is not None and account in bad.decoy_vectors:
            q = fixed_point(np.asarray(bad.decoy_vectors[account], dtype=np.float64))[0]
        # No scores yet: the selection reads them inside the account's lock, for the few
        # slots the noise leaves in the race (exact_selection); the deviations of a
        # cheating provider read every slot there.
        # One query of an account at a time in this process (its record number j is the
        # count of its records before it); queries of different accounts derive their
        # noise in parallel and share the ledger's group commit. Other processes: the
        # guard.
        with self._account_lock(account):
            for _ in range(64):
                expected = self._used(account, wait=False)
                try:
                    stamp = None if ts is None else int(ts)  # None: stamped when queued
                    return self._answer(
                        account, text, q, hq, stamp, expected, before_append, ts is None
                    )
                except _StaleCount:
                    continue
        raise BusyError("The ledger is too busy for this account; retry the query.")

    def _check_rate_limit(self, account: str, used: int) -> None:
        """Refuse a query of ``account`` that has ``used`` its rate limit (checked before
        the selection, and again under the ledger's lock by the append's guard)."""
        limit = self._policies[account].rate_limit
        if used >= limit and not self.misbehaviour.ignore_rate_limit:
            raise BudgetExhaustedError(
                f"Account {account!r} has used its {limit} queries in this window; wait for "
                "the next window."
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
        """Now, or one nanosecond past the ledger's last record and this process's last
        stamp (clocks of two processes may stamp the same instant; a stamp may still be
        queued for the ledger). Called under ``_lock``, with the append queued at once."""
        ts = max(time.time_ns(), self._last_ts + 1, self._last_stamp + 1)
        self._check_in_window(ts)
        self._last_stamp = ts
        return ts

    def policy_of(self, account: str) -> AuditPolicy:
        """The account's own policy (the window's, or its committed overrides)."""
        return self._policies[account]

    def used(self, account: str) -> int:
        """Records of ``account`` in the ledger (its queries in the window so far)."""
        return self._used(account, wait=True)

    def _used(self, account: str, *, wait: bool) -> int:
        """``used``; ``wait=False`` does not wait for a commit in flight to catch up with
        other processes (the guard checks the count again on the caught-up ledger)."""
        self.ledger.refresh(wait=wait)  # outside _count_lock: a guard takes it inside
        with self._count_lock:
            self._scan_to(self.ledger.durable_size)
            return self._count[account]

    def _scan_to(self, size: int) -> None:
        """Count the committed records [scanned, size) (by any process); under
        ``_count_lock``. Only committed records are counted: a batch whose commit fails
        is never in the counts."""
        for i in range(self._scanned, size):
            rec = QueryRecord.from_bytes(self.ledger.leaf(i))
            self._count[rec.account] = self._count.get(rec.account, 0) + 1
            self._last_ts = rec.ts
        self._scanned = max(self._scanned, size)

    def _guard(
        self, account: str, expected: int, ts: int, restamp: bool
    ) -> Callable[[MerkleLog], None]:
        """The check that runs inside the append, on the caught-up ledger: the account
        has exactly the records its query number was derived from, is under its rate
        limit, and ts follows the last record's (a provider-stamped ts that another
        writer overtook is derived again, like a stale count)."""

        def check(log: MerkleLog) -> None:
            # the append just caught the log up: count what is committed, then the
            # earlier appends of this batch (not yet committed, so not in the counts)
            with self._count_lock:
                self._scan_to(log.durable_size)
                count, last_ts = self._count[account], self._last_ts
            for i in range(log.durable_size, log.size):
                rec = QueryRecord.from_bytes(log.leaf(i))
                count += rec.account == account
                last_ts = rec.ts
            if count != expected:
                raise _StaleCount
            self._check_rate_limit(account, expected)
            if log.size and ts <= last_ts:
                if restamp:
                    raise _StaleCount
                raise ConfigError(
                    f"Timestamps must increase with the ledger: {ts} follows {last_ts}."
                )

        return check

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
        scores: np.ndarray | None = None,
    ) -> QueryAnswer:
        self._check_rate_limit(account, expected)
        bad = self.misbehaviour
        tenant = bad.record_tenant.get(account, self.accounts[account])
        scored = bad.cross_tenant.get(account, tenant)
        seq = expected + 1 + bad.seq_shift.get(account, 0)
        record, witness = answer_query(
            window_id=self.policy.window_id,
            mechanism=self._mechanisms[account],
            grid_bits=self.policy.grid_bits,
            index=self._index[scored],
            ids=self._ids[scored],
            seed=bad.noise_seed or self.seed,
            account=account,
            tenant=tenant,
            scored_tenant=scored,
            query_fixed=q,
            query_hash=hq,
            query_text=text,
            seq=seq,
            ts=0 if ts is None else ts,  # ts enters neither rec_q's noise nor π_q
            proof_system=self.proof_system,
            select_before_noise=bad.select_before_noise,
            skip_clipping=bad.skip_clipping,
            scores=scores,
        )
        if before_append is not None:
            before_append(witness.ids)
        self.witnesses.put(record.proof, witness)  # durable before the record exists
        with self._lock:  # stamped in queue order: the ledger's timestamps increase
            if ts is None:
                record = replace(record, ts=self._next_ts())
            ticket = self.ledger.submit(
                [record.to_bytes()], guard=self._guard(account, expected, record.ts, restamp)
            )
        pos = ticket.result()[0]  # waits for the (shared) commit: the record is durable
        size = pos + 1
        unsigned = Receipt(
            self.policy.window_id,
            account,
            hq,
            record.topk_hash,
            pos,
            size,
            self.ledger.root(size).hex(),
        )
        receipt = replace(unsigned, signature=self.key.sign(unsigned.message()))
        return QueryAnswer(witness.positions, witness.ids, receipt)

    def tree_head(self) -> SignedTreeHead:
        """The signed current ledger root C_ledger,t."""
        size = self.ledger.size  # once: a root read later could be of a longer ledger
        unsigned = SignedTreeHead(self.policy.window_id, size, self.ledger.root(size).hex())
        return SignedTreeHead(
            **{**asdict(unsigned), "signature": self.key.sign(unsigned.message())}
        )

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
        root = self.ledger.root().hex()
        return CoalitionClaim(
            size=estimate.size,
            accounts=estimate.accounts,
            theta=estimate.theta,
            tau=estimate.tau,
            ledger_root=root,
            certificate=CoalitionClaim.certify(estimate, root),
        )

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
        )


def save_window(
    directory: str | Path,
    transcript: PublicTranscript,
    receipts: Sequence[Receipt],
    package: AuditorPackage | None,
) -> Path:
    """Write a window to ``directory``: commitments.json, ledger.jsonl, tree_head.json,
    coalition.json, receipts.json and (private) auditor.json."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "commitments.json").write_text(json.dumps(transcript.commitments.to_dict(), indent=1))
    (d / "ledger.jsonl").write_text("".join(r.decode() + "\n" for r in transcript.records))
    (d / "tree_head.json").write_text(json.dumps(transcript.tree_head.to_dict(), indent=1))
    if transcript.coalition is None:
        raise ConfigError("A live window (no coalition claim yet) cannot be saved; close it first.")
    (d / "coalition.json").write_text(json.dumps(transcript.coalition.to_dict(), indent=1))
    (d / "receipts.json").write_text(json.dumps([r.to_dict() for r in receipts], indent=1))
    if package is not None:
        (d / "auditor.json").write_text(json.dumps(package.to_dict()))
    return d


def load_window(
    directory: str | Path,
) -> tuple[PublicTranscript, list[Receipt], AuditorPackage | None]:
    """Read what :func:`save_window` wrote."""
    d = Path(directory)
    if not (d / "commitments.json").exists():
        raise ConfigError(f"No audit window in {d} (commitments.json is missing).")
    transcript = PublicTranscript(
        commitments=Commitments.from_dict(json.loads((d / "commitments.json").read_text())),
        records=[line.encode() for line in (d / "ledger.jsonl").read_text().splitlines() if line],
        tree_head=SignedTreeHead.from_dict(json.loads((d / "tree_head.json").read_text())),
        coalition=CoalitionClaim.from_dict(json.loads((d / "coalition.json").read_text())),
    )
    receipts = [Receipt.from_dict(r) for r in json.loads((d / "receipts.json").read_text())]
    aud = d / "auditor.json"
    package = AuditorPackage.from_dict(json.loads(aud.read_text())) if aud.exists() else None
    return transcript, receipts, package
