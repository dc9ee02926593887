"""The verifiable audit protocol of the collusion paper (§5): commitments (phase A), an
RFC 9162 Merkle ledger with signed receipts and derived noise (phase B), the
coalition-size estimator (phase C), and the verifier that issues (PASS, ε_audit) or FAIL
naming the failed check (phase D). See docs/audit.md."""

from __future__ import annotations

from ragprivacy.audit.coalition import (
    CalibrationResult,
    CoalitionEstimate,
    calibrate_estimator,
    coalition_sizes,
    estimate_coalition,
    simulate_window,
)
from ragprivacy.audit.commitments import (
    FIXED_BITS,
    AuditPolicy,
    TenantCommitment,
    canonical_json,
    check_score_range,
    commit_hash,
    embedding_commitment,
    fixed_point,
    seed_commitment,
    verify_opening,
)
from ragprivacy.audit.demo import (
    TAMPER_CASES,
    TAMPER_HELP,
    DemoWindow,
    demo_window,
    tamper_ledger_file,
)
from ragprivacy.audit.epsilon import AuditEpsilon, epsilon_audit, epsilon_audit_table
from ragprivacy.audit.merkle import (
    EMPTY_ROOT,
    MerkleLog,
    leaf_hash,
    node_hash,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)
from ragprivacy.audit.noise import derived_noise, integer_scores, noise_digest
from ragprivacy.audit.proofs import (
    AuditorReexecution,
    ClaimFailure,
    ProofSystem,
    RecordWitness,
    VerificationContext,
)
from ragprivacy.audit.provider import (
    AuditedProvider,
    AuditorPackage,
    CoalitionClaim,
    Commitments,
    Misbehaviour,
    PublicTranscript,
    QueryAnswer,
    load_window,
    save_window,
)
from ragprivacy.audit.records import (
    ProviderKey,
    QueryRecord,
    Receipt,
    SignedTreeHead,
    query_hash,
    topk_hash,
    verify_signature,
)
from ragprivacy.audit.report import render_report
from ragprivacy.audit.verifier import CHECKS, CheckFailure, Verdict, Verifier, sample_size

__all__ = [
    "AuditEpsilon",
    "AuditPolicy",
    "AuditedProvider",
    "AuditorPackage",
    "AuditorReexecution",
    "CHECKS",
    "CalibrationResult",
    "CheckFailure",
    "ClaimFailure",
    "CoalitionClaim",
    "CoalitionEstimate",
    "Commitments",
    "DemoWindow",
    "EMPTY_ROOT",
    "FIXED_BITS",
    "MerkleLog",
    "Misbehaviour",
    "ProofSystem",
    "ProviderKey",
    "PublicTranscript",
    "QueryAnswer",
    "QueryRecord",
    "Receipt",
    "RecordWitness",
    "SignedTreeHead",
    "TAMPER_CASES",
    "TAMPER_HELP",
    "TenantCommitment",
    "Verdict",
    "VerificationContext",
    "Verifier",
    "calibrate_estimator",
    "canonical_json",
    "check_score_range",
    "coalition_sizes",
    "commit_hash",
    "demo_window",
    "derived_noise",
    "embedding_commitment",
    "epsilon_audit",
    "epsilon_audit_table",
    "estimate_coalition",
    "fixed_point",
    "integer_scores",
    "leaf_hash",
    "load_window",
    "node_hash",
    "noise_digest",
    "query_hash",
    "render_report",
    "root_from_leaf_hashes",
    "sample_size",
    "save_window",
    "seed_commitment",
    "simulate_window",
    "tamper_ledger_file",
    "topk_hash",
    "verify_consistency",
    "verify_inclusion",
    "verify_opening",
    "verify_signature",
]
