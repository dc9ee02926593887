"""A synthetic audit window for the worked example, the CLI and the tests.

Two (or more) tenants with random unit embeddings, honest accounts that send random
queries, and optionally a coalition of same-tenant accounts that all send one probe
(pattern P-A of §5.4). Tampering cases re-create what a dishonest provider holding its own
keys would do (:data:`ragprivacy.audit.cheats.TAMPER_HELP`, run by
:class:`~ragprivacy.audit.cheats.CheatingWindow`); the verifier must FAIL each at a named
check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._validation import check_choice
from ragprivacy.audit.cheats import TAMPER_CASES, CheatingWindow, Misbehaviour
from ragprivacy.audit.coalition import estimate_coalition
from ragprivacy.audit.commitments import AuditPolicy
from ragprivacy.audit.merkle import MerkleLog
from ragprivacy.audit.proofs import RecordWitness
from ragprivacy.audit.records import ProviderKey, QueryRecord, Receipt
from ragprivacy.audit.transcript import AuditorPackage, CoalitionClaim, PublicTranscript
from ragprivacy.audit.window import AuditWindow
from ragprivacy.embed import Embedder, create_embedder
from ragprivacy.errors import ConfigError

__all__ = ["DemoWindow", "demo_window"]


@dataclass(slots=True)
class DemoWindow:
    """A finished window: what is published, honest receipts, the auditor's package."""

    provider: AuditWindow
    transcript: PublicTranscript
    receipts: list[Receipt]
    package: AuditorPackage


def _unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    v = rng.standard_normal(shape)
    return np.asarray(v / np.linalg.norm(v, axis=-1, keepdims=True))


def demo_window(
    *,
    tamper: str = "none",
    tenants: int = 2,
    docs: int = 40,
    dim: int = 32,
    accounts_per_tenant: int = 4,
    queries_per_account: int = 6,
    colluders: int = 3,
    k_max: int = 4,
    epsilon_acc: float = 1.0,
    seed: int = 0,
    queries: str = "vector",
    ledger_path: str | Path | None = None,
    noise: str = "lazy",
) -> DemoWindow:
    """Run one window (commit, queries, receipts, ĉ) and apply one tampering case.

    ``colluders`` same-tenant accounts of tenant 0 all send one probe (P-A); with
    ``tamper="coalition"``, ``"decoy-vectors"`` or ``"withheld-witnesses"`` there are
    k_max + 1 of them. ``queries="text"`` sends query texts embedded by the committed
    hashing embedder (``"decoy-vectors"`` needs it), instead of query vectors. ``noise``
    is the policy's committed derivation (:attr:`AuditPolicy.noise`; lazy only where the
    tenants have enough ``docs`` for :func:`ragprivacy.dp.lazy_suits`).
    """
    if tamper not in TAMPER_CASES:
        raise ConfigError(
            f"The 'tamper' case must be one of {', '.join(TAMPER_CASES)}; got {tamper!r}."
        )
    queries = check_choice("queries", queries, ("vector", "text"))
    if tamper == "decoy-vectors":
        queries = "text"
    embedder: Embedder | None = None
    if queries == "text":
        embedder = create_embedder("hashing")  # rebuilt by name and checked by fingerprint
        dim = int(embedder.encode(["x"]).shape[1])
    rng = np.random.default_rng(seed)
    tenant_ids = [f"tenant-{i}" for i in range(tenants)]
    data = {t: ([f"{t}/doc-{j}" for j in range(docs)], _unit(rng, (docs, dim))) for t in tenant_ids}
    big = tamper in ("coalition", "decoy-vectors", "withheld-witnesses")
    n_coll = k_max + 1 if big else colluders
    accounts: dict[str, str] = {}
    for t in tenant_ids:
        for j in range(accounts_per_tenant):
            accounts[f"{t}/acct-{j}"] = t
    coalition = [f"{tenant_ids[0]}/colluder-{j}" for j in range(n_coll)]
    for a in coalition:
        accounts[a] = tenant_ids[0]
    policy = AuditPolicy(
        epsilon_acc=epsilon_acc,
        delta_acc=1e-6,
        rate_limit=queries_per_account,
        k_max=k_max,
        delta_policy=(k_max + 1) * 1e-6,
        window_id="W-demo",
        window_start=1_000,
        window_end=1_000_000,
        top_k=5,
        sigma=1e-3 if tamper == "low-sigma" else None,
        noise=noise,
    )
    first = f"{tenant_ids[0]}/acct-0"
    misbehaviour = Misbehaviour(
        noise_seed=bytes(32) if tamper == "wrong-seed" else None,
        select_before_noise=tamper == "select-before-noise",
        cross_tenant={first: tenant_ids[1]} if tamper == "cross-tenant" else {},
        ignore_rate_limit=tamper == "over-rate",
        seq_shift={first: 7} if tamper == "ground-noise" else {},
        decoy_vectors=(
            {a: _unit(rng, (dim,)) for a in coalition} if tamper == "decoy-vectors" else {}
        ),
    )
    key = ProviderKey.from_seed(bytes(rng.integers(0, 256, 32, dtype=np.uint8)))
    common: dict[str, Any] = {
        "policy": policy,
        "tenants": data,
        "accounts": accounts,
        "embedder": embedder,
        "key": key,
        "seed": bytes(rng.integers(0, 256, 32, dtype=np.uint8)),
        "ledger_path": ledger_path,
    }
    # an honest provider runs the honest window; only a cheat runs the cheating one
    cheats = misbehaviour != Misbehaviour() or tamper == "tenant-switch"
    provider: AuditWindow = (
        CheatingWindow(misbehaviour=misbehaviour, **common) if cheats else AuditWindow(**common)
    )
    provider.commit(published_at=999)
    probe = _unit(rng, (dim,))
    probe_text = "which patient records mention the rare condition of the target?"
    receipts: list[Receipt] = []
    ts = 1_000
    for step in range(queries_per_account):
        if tamper == "tenant-switch" and step == queries_per_account // 2:
            # half-way the provider serves the account from a second tenant's index
            assert isinstance(provider, CheatingWindow)
            provider.misbehaviour = replace(misbehaviour, record_tenant={first: tenant_ids[1]})
        rounds = 4 if tamper == "over-rate" else 1
        for a in accounts:
            for _ in range(rounds if a == first else 1):
                ts += 1
                if queries == "text":
                    text = probe_text if a in coalition else _random_question(rng)
                    ans = provider.query(a, text, ts=ts)
                else:
                    vec = probe if a in coalition else _unit(rng, (dim,))
                    ans = provider.query(a, vector=vec, ts=ts)
                if a not in coalition:  # honest accounts keep and submit receipts (M5)
                    receipts.append(ans.receipt)
    transcript = provider.transcript()
    package = provider.auditor_package()
    if tamper in ("changed-record", "dropped-record"):
        transcript = _rewrite(transcript, key, tamper, receipts)
    if tamper == "withheld-witnesses":
        transcript, package = _withhold(provider, transcript, package, set(coalition))
    return DemoWindow(provider, transcript, receipts, package)


_WORDS = (
    "invoice",
    "clause",
    "dosage",
    "referral",
    "audit",
    "merger",
    "tenancy",
    "allergy",
    "sprain",
    "contract",
    "warranty",
    "payroll",
    "biopsy",
    "lease",
    "pension",
    "subpoena",
    "insulin",
    "ledger",
    "scan",
)


def _random_question(rng: np.random.Generator) -> str:
    words = rng.choice(_WORDS, size=4, replace=False)
    return f"what does record {int(rng.integers(10**6))} say about {' '.join(words)}?"


def _withhold(
    provider: AuditWindow,
    transcript: PublicTranscript,
    package: AuditorPackage,
    hidden_accounts: set[str],
) -> tuple[PublicTranscript, AuditorPackage]:
    """Withhold the witnesses of the coalition's records and certify ĉ over the rest."""
    keep: dict[int, RecordWitness] = {}
    records = [QueryRecord.from_bytes(r) for r in transcript.records]
    hidden = {provider.account_id(a) for a in hidden_accounts}  # as the records name them
    for pos, w in package.witnesses.items():
        if records[pos].account not in hidden:
            keep[pos] = w
    positions = sorted(keep)
    estimate = estimate_coalition(
        np.stack([keep[p].query_vector() for p in positions]).astype(np.float64),
        [records[p].account for p in positions],
        theta=provider.policy.theta,
        ts=[records[p].ts for p in positions],
        tau=provider.policy.tau,
    )
    if transcript.coalition is None:
        raise ConfigError("The window has no coalition claim yet; close it first.")
    claim = CoalitionClaim.of(estimate, transcript.coalition.ledger_root)
    return (
        PublicTranscript(transcript.commitments, transcript.records, transcript.tree_head, claim),
        replace(package, witnesses=keep),
    )


def _rewrite(
    transcript: PublicTranscript, key: ProviderKey, case: str, receipts: Sequence[Receipt]
) -> PublicTranscript:
    """A provider rewriting history and re-signing a fresh tree head."""
    records = list(transcript.records)
    victim = receipts[len(receipts) // 2].position
    if case == "dropped-record":
        del records[victim]
    else:
        rec = QueryRecord.from_bytes(records[victim])
        records[victim] = replace(rec, topk_commit="0" * 64).to_bytes()
    log = MerkleLog()
    log.append_many(records)
    unsigned = replace(transcript.tree_head, size=log.size, root=log.root().hex())
    sth = replace(unsigned, signature=key.sign(unsigned.message()))
    return PublicTranscript(transcript.commitments, records, sth, transcript.coalition)
