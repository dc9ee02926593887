"""A synthetic audit window for the worked example, the CLI and the tests.

Two (or more) tenants with random unit embeddings, honest accounts that send random
queries, and optionally a coalition of same-tenant accounts that all send one probe
(pattern P-A of §5.4). Tampering cases re-create what a dishonest provider would do.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragprivacy.audit.commitments import AuditPolicy
from ragprivacy.audit.merkle import MerkleLog
from ragprivacy.audit.provider import (
    AuditedProvider,
    AuditorPackage,
    Misbehaviour,
    PublicTranscript,
)
from ragprivacy.audit.records import ProviderKey, QueryRecord, Receipt, SignedTreeHead
from ragprivacy.errors import ConfigError

__all__ = ["TAMPER_CASES", "DemoWindow", "demo_window", "tamper_ledger_file"]

TAMPER_CASES = (
    "none",
    "changed-record",
    "dropped-record",
    "wrong-seed",
    "select-before-noise",
    "cross-tenant",
    "coalition",
)


@dataclass(slots=True)
class DemoWindow:
    """A finished window: what is published, honest receipts, the auditor's package."""

    provider: AuditedProvider
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
    ledger_path: str | Path | None = None,
) -> DemoWindow:
    """Run one window (commit, queries, receipts, ĉ) and apply one tampering case.

    ``colluders`` same-tenant accounts of tenant 0 all send one probe (P-A); with
    ``tamper="coalition"`` there are k_max + 1 of them.
    """
    if tamper not in TAMPER_CASES:
        raise ConfigError(
            f"The 'tamper' case must be one of {', '.join(TAMPER_CASES)}; got {tamper!r}."
        )
    rng = np.random.default_rng(seed)
    tenant_ids = [f"tenant-{i}" for i in range(tenants)]
    data = {t: ([f"{t}/doc-{j}" for j in range(docs)], _unit(rng, (docs, dim))) for t in tenant_ids}
    n_coll = k_max + 1 if tamper == "coalition" else colluders
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
    )
    misbehaviour = Misbehaviour(
        noise_seed=bytes(32) if tamper == "wrong-seed" else None,
        select_before_noise=tamper == "select-before-noise",
        cross_tenant={f"{tenant_ids[0]}/acct-0": tenant_ids[1]} if tamper == "cross-tenant" else {},
    )
    key = ProviderKey.from_seed(bytes(rng.integers(0, 256, 32, dtype=np.uint8)))
    provider = AuditedProvider(
        policy=policy,
        tenants=data,
        accounts=accounts,
        key=key,
        seed=bytes(rng.integers(0, 256, 32, dtype=np.uint8)),
        ledger_path=ledger_path,
        misbehaviour=misbehaviour,
    )
    provider.commit(published_at=999)
    probe = _unit(rng, (dim,))
    receipts: list[Receipt] = []
    ts = 1_000
    for _round in range(queries_per_account):
        for a in accounts:
            ts += 1
            vec = probe if a in coalition else _unit(rng, (dim,))
            ans = provider.query(a, vector=vec, ts=ts)
            if a not in coalition:  # honest accounts keep and submit receipts (M5)
                receipts.append(ans.receipt)
    transcript = provider.transcript()
    package = provider.auditor_package()
    if tamper in ("changed-record", "dropped-record"):
        transcript = _rewrite(transcript, key, tamper, receipts)
    return DemoWindow(provider, transcript, receipts, package)


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
        forged = QueryRecord(rec.account, rec.tenant, rec.query_hash, "0" * 64, rec.ts, rec.proof)
        records[victim] = forged.to_bytes()
    log = MerkleLog()
    log.append_many(records)
    unsigned = SignedTreeHead(log.size, log.root().hex())
    sth = SignedTreeHead(unsigned.size, unsigned.root, key.sign(unsigned.message()))
    return PublicTranscript(transcript.commitments, records, sth, transcript.coalition)


def tamper_ledger_file(directory: str | Path, position: int) -> None:
    """Change one published record in place (the tree head is left as signed)."""
    path = Path(directory) / "ledger.jsonl"
    lines = path.read_text().splitlines()
    if not 0 <= position < len(lines):
        raise ConfigError(f"No record {position} in {path} ({len(lines)} records).")
    rec = json.loads(lines[position])
    rec["topk_hash"] = "f" * 64
    lines[position] = json.dumps(rec, sort_keys=True, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")
