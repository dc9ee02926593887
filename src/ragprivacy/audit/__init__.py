"""The verifiable audit protocol of the collusion paper (§5): commitments (phase A), an
RFC 9162 Merkle ledger with signed receipts and derived noise (phase B), the
coalition-size estimator (phase C), and the verifier that issues (PASS, ε_audit) or FAIL
naming the failed check (phase D). See docs/audit.md.

The serving core is :class:`AuditWindow` (one window as an object). What is exported here
is what a provider, an auditor or a verifier calls; the building blocks (hash and
commitment helpers, the Merkle tree's node hashing, the estimator's internals) stay in
their modules. A provider that cheats, for testing the verifier, is
:mod:`ragprivacy.audit.cheats`; the synthetic window of the worked example is
:mod:`ragprivacy.audit.demo`.
"""

from __future__ import annotations

from ragprivacy.audit.coalition import (
    CalibrationResult,
    CoalitionEstimate,
    calibrate_estimator,
    estimate_coalition,
    simulate_window,
)
from ragprivacy.audit.commitments import (
    POLICY_OVERRIDES,
    PSEUDONYM,
    SOURCE_CHUNK,
    AuditPolicy,
    EmbeddingSource,
    PackedHashes,
    TenantCommitment,
    fixed_point,
    pseudonym,
)
from ragprivacy.audit.counter import LedgerCounter
from ragprivacy.audit.epsilon import AuditEpsilon, epsilon_audit, epsilon_audit_table
from ragprivacy.audit.filters import (
    FilterScreen,
    FilterState,
    apply_charges,
    filters_commitment,
    replay_filters,
    screen_documents,
)
from ragprivacy.audit.ledger_store import LedgerStorage, PostgresLedgerStorage, SqliteLedgerStorage
from ragprivacy.audit.merkle import LogSealedError, MerkleLog, verify_consistency, verify_inclusion
from ragprivacy.audit.noise import QueryNoise, derived_noise
from ragprivacy.audit.proofs import (
    AuditorReexecution,
    ClaimFailure,
    ProofSystem,
    RecordWitness,
    VerificationContext,
)
from ragprivacy.audit.records import (
    ProviderKey,
    QueryRecord,
    Receipt,
    SignedTreeHead,
    query_hash,
    verify_signature,
)
from ragprivacy.audit.report import render_report
from ragprivacy.audit.selection import answer_query, exact_selection, honest_selection
from ragprivacy.audit.transcript import (
    AuditorPackage,
    CoalitionClaim,
    Commitments,
    PublicTranscript,
    QueryAnswer,
    load_window,
    save_window,
)
from ragprivacy.audit.verifier import (
    CHECKS,
    OUTCOMES,
    CheckFailure,
    FilterEnd,
    Verdict,
    Verifier,
    filter_end_states,
    sample_size,
)
from ragprivacy.audit.votes import AUDITED_VOTING_MODES, VoteSettings, answer_hash, check_vote
from ragprivacy.audit.window import AuditWindow, WitnessStore

__all__ = [
    "AUDITED_VOTING_MODES",
    "AuditEpsilon",
    "AuditPolicy",
    "AuditWindow",
    "AuditorPackage",
    "AuditorReexecution",
    "CHECKS",
    "CalibrationResult",
    "CheckFailure",
    "ClaimFailure",
    "CoalitionClaim",
    "CoalitionEstimate",
    "Commitments",
    "EmbeddingSource",
    "FilterEnd",
    "FilterScreen",
    "FilterState",
    "LedgerCounter",
    "LedgerStorage",
    "LogSealedError",
    "MerkleLog",
    "OUTCOMES",
    "POLICY_OVERRIDES",
    "PSEUDONYM",
    "PackedHashes",
    "PostgresLedgerStorage",
    "ProofSystem",
    "ProviderKey",
    "PublicTranscript",
    "QueryAnswer",
    "QueryNoise",
    "QueryRecord",
    "Receipt",
    "RecordWitness",
    "SOURCE_CHUNK",
    "SignedTreeHead",
    "SqliteLedgerStorage",
    "TenantCommitment",
    "Verdict",
    "VerificationContext",
    "Verifier",
    "VoteSettings",
    "WitnessStore",
    "answer_hash",
    "answer_query",
    "apply_charges",
    "calibrate_estimator",
    "check_vote",
    "derived_noise",
    "epsilon_audit",
    "epsilon_audit_table",
    "estimate_coalition",
    "exact_selection",
    "filter_end_states",
    "filters_commitment",
    "fixed_point",
    "honest_selection",
    "load_window",
    "pseudonym",
    "query_hash",
    "render_report",
    "replay_filters",
    "sample_size",
    "save_window",
    "screen_documents",
    "simulate_window",
    "verify_consistency",
    "verify_inclusion",
    "verify_signature",
]
