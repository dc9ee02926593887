"""Phase D: the verifier (collusion paper §5.5) — (PASS, ε_audit) or FAIL naming the check.

Checks, in order (every check runs; the verdict names all failures, the first one first):

1. ``commitment_integrity`` — the commitments are signed by the provider key and were
   published no later than the window start; C_ledger,0 is the empty root; C_policy is
   the hash of the published policy, which is well formed (δ_policy > k_max·δ_acc) and
   whose σ is at least the σ eq. (3.4) gives for (ε_acc, δ_acc, r, Δ) (a smaller σ does
   not deliver the per-account (ε_acc, δ_acc) that ε_audit is computed from); C_emb is
   the hash of the published embedder fingerprint, prompt template, tokenizer and schema,
   and an embedder given to the verifier has that fingerprint; the account map names
   committed tenants. With the auditor package: C_seed = H(s_W) and every C_{D_t} is the
   Merkle root of the embeddings the auditor received.
2. ``ledger_integrity`` — the signed tree head is the provider's and names the window;
   the RFC 9162 root recomputed from the published records equals it; every record
   decodes and lies in W, and timestamps increase strictly with the ledger position.
3. ``account_policy`` — every record names a committed account under its committed
   tenant t(a) (M4 caught); the j-th record of an account carries query number j (the
   noise input rec_q = (W, a, t(a), H(q), j, n) is fixed by the ledger, not chosen by the
   provider); no account has more than r records in W.
4. ``receipt_consistency`` — for every receipt an honest account submits (M5): the
   provider's signature, the window id and the digest of the published commitments (a
   receipt names the commitments it was issued under, as the tree head does), a valid
   consistency proof from the receipt's root to the final root (append-only), a valid
   inclusion proof of the record at pos_q,
   and the receipted (a, j) equal to the ledger record's, whose salted commitments the
   receipt's (salt, H(q), H(top-K)) open. A dropped or
   rewritten record fails here, and so does any record in the name of an account that
   submitted receipts but that none of its receipts names (a query it never asked for).
5. ``per_record`` — claims A1–A4 by the proof system, for every record (``mode="full"``)
   or for s = ⌈log(1/η)/β⌉ uniformly sampled ones (``mode="sampled"``: any β-fraction of
   bad records is caught with probability ≥ 1 − (1 − β)^s ≥ 1 − η). A witnessed query
   text is always re-embedded (A1); without an embedder of the committed fingerprint the
   record fails.
6. ``policy_cap`` — the committed estimator settings lie within the paper's calibration
   (θ ≤ θ* = 0.80 and no τ shorter than the window, Observation 5.2:
   :data:`~ragprivacy.audit.coalition.THETA_CALIBRATED`), every record has its witness
   (the cap needs every query vector, in every mode), π_coal verifies (re-execution: the
   auditor recomputes ĉ from the witnessed queries bound to the ledger) and ĉ ≤ k_max.

On PASS the verdict carries ε_audit of eq. (5.2) at k_max (never ĉ) with
δ_comp = δ_policy − k_max·δ_acc (:func:`ragprivacy.audit.epsilon_audit`).

Four verdicts (:attr:`Verdict.outcome`): ``PASS``; ``FAIL`` (a check failed); ``LIVE_OK``
(an open window whose checks 1–4 hold so far); ``INCOMPLETE`` — a closed window whose
public checks (1–4 and the public half of 6: ĉ bound to the final ledger, the committed
estimator settings, ĉ ≤ k_max) hold, but which could not be re-executed because no auditor
package was given (and the proof system needs one). INCOMPLETE is never a PASS — a
provider that withholds the package gets no ε_audit — and never a FAIL of an honest
window. ``ragprivacy audit verify`` exits 0, 1, 0 and 3 for them (2: a usage error).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._validation import check_choice, check_in_range
from ragprivacy.audit.coalition import THETA_CALIBRATED, TIE, estimate_coalition
from ragprivacy.audit.commitments import (
    EMPTY_LEDGER,
    FIXED_BITS,
    AuditPolicy,
    TenantCommitment,
    embedding_commitment,
    fixed_point,
    index_salt_key,
    name_salt,
    names_key,
    pseudonym,
    scoring_matrix,
    seed_commitment,
)
from ragprivacy.audit.epsilon import epsilon_audit
from ragprivacy.audit.filters import apply_charges, filters_commitment, replay_filters
from ragprivacy.audit.merkle import MerkleLog, verify_consistency, verify_inclusion
from ragprivacy.audit.noise import integer_scores
from ragprivacy.audit.proofs import AuditorReexecution, ProofSystem, VerificationContext
from ragprivacy.audit.records import QueryRecord, Receipt, query_commitment, verify_signature
from ragprivacy.audit.transcript import (
    AuditorPackage,
    CoalitionClaim,
    Commitments,
    PublicTranscript,
)
from ragprivacy.audit.votes import VoteSettings
from ragprivacy.dp import derived_bits
from ragprivacy.embed import Embedder, create_embedder
from ragprivacy.errors import ConfigError, RagPrivacyError, VerificationError

__all__ = [
    "CHECKS",
    "OUTCOMES",
    "CheckFailure",
    "Verdict",
    "FilterEnd",
    "Verifier",
    "filter_end_states",
    "sample_size",
]

CHECKS = (
    "commitment_integrity",
    "ledger_integrity",
    "account_policy",
    "receipt_consistency",
    "per_record",
    "policy_cap",
)


def sample_size(beta: float, eta: float) -> int:
    """s = ⌈log(1/η)/β⌉ records (§5.7): a β-fraction of bad records is missed with
    probability (1 − β)^s ≤ e^{−βs} ≤ η."""
    beta = check_in_range("beta", beta, 0.0, 1.0, low_open=True)
    eta = check_in_range("eta", eta, 0.0, 1.0, low_open=True, high_open=True)
    return math.ceil(math.log(1 / eta) / beta)


@dataclass(frozen=True, slots=True)
class CheckFailure:
    """One failed check and why."""

    check: str
    detail: str


#: the verdicts of :attr:`Verdict.outcome`
OUTCOMES = ("PASS", "FAIL", "LIVE_OK", "INCOMPLETE")


@dataclass(frozen=True, slots=True)
class Verdict:
    """(PASS, ε_audit), FAIL with the failed checks named, LIVE_OK for an open window, or
    INCOMPLETE: the checks in :attr:`skipped` could not run (no auditor package)."""

    passed: bool
    epsilon_audit: float | None
    failures: tuple[CheckFailure, ...]
    mode: str
    records: int
    records_checked: int
    detection_probability: float | None
    audit: dict[str, Any] = field(default_factory=dict)
    live: bool = False  # an open window: public checks only, no (PASS, ε_audit) yet
    skipped: tuple[str, ...] = ()  # checks not run: re-execution without a package

    @property
    def outcome(self) -> str:
        """``PASS``, ``FAIL``, ``LIVE_OK`` or ``INCOMPLETE`` (:data:`OUTCOMES`)."""
        if self.passed:
            return "PASS"
        if self.failures:
            return "FAIL"
        return "LIVE_OK" if self.live else "INCOMPLETE"

    @property
    def incomplete(self) -> bool:
        """No check failed, but some could not run (:attr:`skipped`): no verdict."""
        return self.outcome == "INCOMPLETE"

    @property
    def failed_check(self) -> str | None:
        """The first failed check (None on PASS)."""
        return self.failures[0].check if self.failures else None

    @property
    def live_ok(self) -> bool:
        """A live window with no violation so far (the verdict itself comes at close)."""
        return self.live and not self.failures

    @property
    def failed_checks(self) -> set[str]:
        return {f.check for f in self.failures}

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.outcome,
            "live": self.live,
            "epsilon_audit": self.epsilon_audit,
            "failed_check": self.failed_check,
            "failures": [{"check": f.check, "detail": f.detail} for f in self.failures],
            "mode": self.mode,
            "records": self.records,
            "records_checked": self.records_checked,
            "detection_probability": self.detection_probability,
            "audit": self.audit,
            "skipped": list(self.skipped),
        }


class Verifier:
    """Checks one window's transcript, receipts and (for re-execution) auditor package.

    Args:
        provider_key: the provider's long-term public key (hex) known in advance; None
            trusts the key inside the commitments.
        proof_system: how per-record attestations are verified.
        mode: ``"full"`` or ``"sampled"``.
        beta, eta: the sampled-mode guarantee (β-fraction detected with prob. ≥ 1 − η).
        embedder: the committed embedder, for claim A1 on text queries (default: rebuilt
            from the committed name when that gives the committed fingerprint).
        rng: the sampling stream.
    """

    def __init__(
        self,
        *,
        provider_key: str | None = None,
        proof_system: ProofSystem | None = None,
        mode: str = "full",
        beta: float = 0.01,
        eta: float = 2**-20,
        embedder: Embedder | None = None,
        rng: RngLike = None,
    ) -> None:
        self.provider_key = provider_key
        self.proof_system = proof_system or AuditorReexecution()
        self.mode = check_choice("mode", mode, ("full", "sampled"))
        self.s = sample_size(beta, eta)
        self.beta = beta
        self.embedder = embedder
        self._rng = make_rng(rng)

    def verify(
        self,
        transcript: PublicTranscript,
        receipts: Sequence[Receipt] = (),
        package: AuditorPackage | None = None,
        *,
        unanswered: Sequence[tuple[str | None, str]] = (),
        previous_filters: Mapping[str, FilterEnd] | None = None,
    ) -> Verdict:
        """The verdict on one window (checks 1–6, docs/audit.md).

        A live window (``transcript.coalition is None``: still open) gets checks 1–4
        only — commitments, ledger, account policies, receipts — and a verdict that is
        ``live_ok`` or FAIL, never PASS: ĉ and the seed for re-execution come at close.

        ``unanswered``: (account or None, H(q)) of requests the accounts sent but got no
        answer to (a connection lost mid-request: the record may have been appended
        without the receipt reaching them; the shipped client logs them). Each excuses
        one record of that account (of any account for None) with that H(q) from the
        rule that a submitting account's records all carry one of its receipts.

        ``previous_filters``: where the previous window left each filtered tenant's
        documents (:func:`filter_end_states` of that window, verified on its own); with
        the auditor package, a committed filter state that starts any of them lower, a
        larger lifetime budget, or a tenant no longer filtered (budgets reset between
        windows) FAILs ``commitment_integrity``."""
        failures: list[CheckFailure] = []
        com = transcript.commitments
        key = self.provider_key or com.provider_key

        # 1. commitment integrity
        policy: AuditPolicy | None = None
        try:
            policy = AuditPolicy.from_dict(com.policy)
        except (RagPrivacyError, TypeError) as exc:
            failures.append(CheckFailure("commitment_integrity", f"ill-formed policy: {exc}"))
        if not com.verify(key):
            failures.append(CheckFailure("commitment_integrity", "bad signature on commitments"))
        if policy is not None:
            if com.c_policy != policy.commitment().hex():
                failures.append(CheckFailure("commitment_integrity", "C_policy ≠ H(policy)"))
            if com.published_at > policy.window_start:
                failures.append(
                    CheckFailure("commitment_integrity", "commitments published after W opened")
                )
        if com.c_ledger0 != EMPTY_LEDGER.hex():
            failures.append(CheckFailure("commitment_integrity", "C_ledger,0 is not H(⊥)"))
        policies: dict[str, AuditPolicy] = {}
        if policy is not None:
            failures.extend(_sigma_floor(policy))
            for acct, overrides in sorted(com.account_policies.items()):
                try:
                    policies[acct] = policy.for_account(overrides)
                except (RagPrivacyError, TypeError) as exc:
                    failures.append(
                        CheckFailure("commitment_integrity", f"account {acct!r}'s policy: {exc}")
                    )
                    continue
                failures.extend(_sigma_floor(policies[acct], acct))
        emb = com.embedder
        if (
            embedding_commitment(
                emb.get("fingerprint", ""),
                emb.get("prompt_template", ""),
                emb.get("tokenizer", ""),
                com.schema,
            ).hex()
            != com.c_emb
        ):
            failures.append(
                CheckFailure("commitment_integrity", "C_emb ≠ H(the published embedder, schema)")
            )
        embedder = self._embedder(emb.get("name", ""), emb.get("fingerprint", ""), failures)
        voting: dict[str, VoteSettings] = {}
        for t, settings in sorted(com.voting.items()):
            try:
                voting[t] = VoteSettings.from_dict(settings)
            except (RagPrivacyError, TypeError) as exc:
                failures.append(
                    CheckFailure("commitment_integrity", f"voting tenant {t!r}'s settings: {exc}")
                )
                continue
            if t not in com.c_idx:
                failures.append(
                    CheckFailure(
                        "commitment_integrity", f"voting tenant {t!r} has no committed index"
                    )
                )
        filtered = sorted(t for t, v in voting.items() if v.filtered)
        if sorted(com.filters) != filtered:
            failures.append(
                CheckFailure(
                    "commitment_integrity",
                    "C_filters is not committed for exactly the MURAG/MURAG-ADA tenants "
                    f"(committed for {sorted(com.filters)}, filtered tenants {filtered})",
                )
            )
        unknown = sorted({t for t in com.accounts.values() if t not in com.c_idx})
        if not com.accounts or unknown:
            failures.append(
                CheckFailure(
                    "commitment_integrity",
                    "the account → tenant map is empty or names tenants without a committed "
                    f"index ({', '.join(unknown)})",
                )
            )
        if package is not None:
            if seed_commitment(package.seed).hex() != com.c_seed:
                failures.append(CheckFailure("commitment_integrity", "C_seed ≠ H(s_W)"))
            salt_key = index_salt_key(package.seed)
            failures.extend(_pseudonyms(com, package))
            for t, root in com.c_idx.items():
                if _opened_root(package, t, salt_key) != root:
                    failures.append(
                        CheckFailure(
                            "commitment_integrity",
                            f"C_D[{t}] ≠ the given embeddings, ids and texts",
                        )
                    )
            for t, c in com.filters.items():
                start = package.filters.get(t)
                if start is None or filters_commitment(package.seed, t, np.array(start)) != c:
                    failures.append(
                        CheckFailure(
                            "commitment_integrity",
                            f"C_filters[{t}] ≠ the given document budgets",
                        )
                    )
                elif t in voting:
                    failures.extend(_start_state(t, start, voting[t], package))
            if previous_filters:
                failures.extend(_carried_over(com, package, voting, previous_filters))
        # 2. ledger integrity
        sth = transcript.tree_head
        records: list[QueryRecord | None] = []
        log = MerkleLog()
        log.append_many(transcript.records)
        if not verify_signature(key, sth.message(), sth.signature):
            failures.append(CheckFailure("ledger_integrity", "bad signature on the tree head"))
        if policy is not None and sth.window_id != policy.window_id:
            failures.append(CheckFailure("ledger_integrity", "the tree head is for another window"))
        if sth.commitments != com.digest():
            failures.append(
                CheckFailure(
                    "ledger_integrity",
                    "the tree head was signed under other commitments than the published ones",
                )
            )
        if sth.size != log.size or log.root().hex() != sth.root:
            failures.append(
                CheckFailure(
                    "ledger_integrity",
                    "the root of the published records differs from the signed tree head "
                    "(a record was changed or removed)",
                )
            )
        for i, raw in enumerate(transcript.records):
            try:
                rec = QueryRecord.from_bytes(raw)
            except RagPrivacyError:
                failures.append(CheckFailure("ledger_integrity", f"record {i} does not decode"))
                rec = None
            if (
                rec is not None
                and policy is not None
                and not (policy.window_start <= rec.ts <= policy.window_end)
            ):
                failures.append(CheckFailure("ledger_integrity", f"record {i} lies outside W"))
            elif rec is not None and policy is not None and policy.stamp(rec.ts) != rec.ts:
                failures.append(
                    CheckFailure(
                        "ledger_integrity",
                        f"record {i}: stamped finer than the committed stamp unit (it tells "
                        "when the account asked)",
                    )
                )
            previous = next((r for r in reversed(records) if r is not None), None)
            if rec is not None and previous is not None and rec.ts < previous.ts:
                failures.append(
                    CheckFailure(
                        "ledger_integrity",
                        f"record {i}: its timestamp is before the previous record's "
                        "(timestamps must not decrease along the ledger)",
                    )
                )
            records.append(rec)
        # 3. the account policy: t(a), query numbers j, the rate limit r
        if policy is not None:
            failures.extend(_account_policy(records, com.accounts, policy, policies, voting))
        # 4. receipts (M5)
        final = log.size
        final_root = log.root()
        held: dict[str, set[int]] = {}  # account -> positions its checked receipts name
        names = names_key(package.seed) if package is not None else None
        for r in receipts:
            where = f"receipt of {r.account!r} at position {r.position}"
            if not verify_signature(key, r.message(), r.signature):
                failures.append(CheckFailure("receipt_consistency", f"{where}: bad signature"))
                continue
            if policy is not None and r.window_id != policy.window_id:
                continue  # signed for another window: its record is in that window's ledger
            mine = held.setdefault(r.account, set())  # it submits this window's receipts: all
            if not r.opens_holder() or (
                names is not None and r.holder_salt != name_salt(names, "account", r.holder).hex()
            ):
                failures.append(
                    CheckFailure(
                        "receipt_consistency",
                        f"{where}: its account pseudonym is not its holder's in this window",
                    )
                )
                continue
            if r.commitments != com.digest():
                failures.append(
                    CheckFailure(
                        "receipt_consistency",
                        f"{where}: issued under other commitments than the published ones (the "
                        "commitments were changed after the query was answered)",
                    )
                )
                continue
            if r.tree_size > final or not 0 <= r.position < r.tree_size:
                failures.append(
                    CheckFailure("receipt_consistency", f"{where}: not in the ledger (dropped)")
                )
                continue
            if not verify_consistency(
                r.tree_size,
                final,
                bytes.fromhex(r.root),
                final_root,
                log.consistency_proof(r.tree_size, final),
            ):
                failures.append(
                    CheckFailure(
                        "receipt_consistency",
                        f"{where}: the ledger is not an append-only extension of the "
                        "receipted root",
                    )
                )
                continue
            rec = records[r.position]
            if (
                rec is None
                or (rec.account, rec.seq) != (r.account, r.seq)
                or r.opened_topk(rec.tenant) != r.topk_hash
                or not rec.opens_to(r.salt, r.query_hash, r.topk_hash, r.nonce)
                or not verify_inclusion(
                    transcript.records[r.position],
                    r.position,
                    r.tree_size,
                    log.inclusion_proof(r.position, r.tree_size),
                    bytes.fromhex(r.root),
                )
            ):
                failures.append(
                    CheckFailure("receipt_consistency", f"{where}: contradicted by the ledger")
                )
                continue
            mine.add(r.position)
        opened = {i: w.query_hash() for i, w in package.witnesses.items()} if package else None
        failures.extend(_unasked_records(records, held, unanswered, opened))
        if policy is not None:  # public from phase A: a live window is held to it too
            failures.extend(_calibrated_estimator(policy))
        if transcript.coalition is None:  # live: ĉ and the seed come at close
            if package is not None:
                failures.append(
                    CheckFailure(
                        "commitment_integrity",
                        "an auditor package for a window without a coalition claim: the "
                        "seed must stay secret until the window closes",
                    )
                )
            failures.sort(key=lambda f: CHECKS.index(f.check))
            return Verdict(
                passed=False,
                epsilon_audit=None,
                failures=tuple(failures),
                mode="live",
                records=len(records),
                records_checked=0,
                detection_probability=None,
                live=True,
            )
        # 5. per-record attestation: re-execution needs the auditor package (a
        # zero-knowledge proof system would not); without it, 5 and the witnessed half of
        # 6 are skipped and the verdict is INCOMPLETE at best
        reexecutes = package is not None or self.proof_system.zero_knowledge
        positions = [i for i, r in enumerate(records) if r is not None and reexecutes]
        detection = None
        if self.mode == "sampled" and len(positions) > self.s:
            positions = sorted(self._rng.choice(positions, self.s, replace=False).tolist())
            detection = 1 - (1 - self.beta) ** self.s
        checked = len(positions)
        if policy is not None:
            ctx = VerificationContext(
                policy=policy,
                # a size is bound by its root; the auditor counts it in the package's rows
                index_roots={
                    t: (bytes.fromhex(root), len(package.tenant_ids.get(t, ())) if package else 0)
                    for t, root in com.c_idx.items()
                },
                seed=package.seed if package else None,
                # float64 once per tenant, not once per re-executed record
                tenant_fixed={t: scoring_matrix(f) for t, f in package.tenant_fixed.items()}
                if package
                else {},
                tenant_ids=package.tenant_ids if package else {},
                embedder=embedder,
                account_policies=policies,
                voting=voting,
            )
            for pos in positions:
                rec = records[pos]
                assert rec is not None  # positions holds decodable records only
                witness = package.witnesses.get(pos) if package else None
                for f in self.proof_system.verify_record(pos, rec, witness, ctx):
                    failures.append(
                        CheckFailure("per_record", f"record {pos}: claim {f.claim}: {f.detail}")
                    )
            if package is not None:  # every record of a filtered tenant, sampled or not
                failures.extend(
                    _replay_filters(records, package, voting, policy, embedder, set(positions))
                )
            # 6. policy cap
            failures.extend(self._policy_cap(transcript.coalition, policy, records, package, log))
        failures.sort(key=lambda f: CHECKS.index(f.check))
        passed = not failures and policy is not None and reexecutes
        audit: dict[str, Any] = {}
        eps = None
        if passed and policy is not None:
            a = epsilon_audit(
                policy.epsilon_acc,
                policy.delta_acc,
                policy.k_max,
                policy.delta_policy,
                n=policy.rate_limit,
            )
            audit = a.to_dict()
            eps = a.eps_audit_leading
        if package is not None:
            audit["vector_queries"] = sum(
                1 for w in package.witnesses.values() if w.query_text is None
            )
        return Verdict(
            passed=passed,
            epsilon_audit=eps,
            failures=tuple(failures),
            mode=self.mode,
            records=len(records),
            records_checked=checked,
            detection_probability=detection,
            audit={**audit, "coalition_estimate": transcript.coalition.size},
            skipped=() if reexecutes else ("per_record", "policy_cap: re-execution of ĉ"),
        )

    def _embedder(
        self, name: str, fingerprint: str, failures: list[CheckFailure]
    ) -> Embedder | None:
        """The embedder that re-embeds witnessed query texts (claim A1): the one given to
        the verifier, or else the committed one rebuilt by name; either must have the
        committed fingerprint. ``None`` when neither is available."""
        if self.embedder is not None:
            if self.embedder.fingerprint() != fingerprint:
                failures.append(
                    CheckFailure(
                        "commitment_integrity",
                        "the embedder given to the verifier is not the committed one "
                        "(fingerprints differ)",
                    )
                )
                return None
            return self.embedder
        if not name:
            return None
        try:
            built = create_embedder(name)
        except RagPrivacyError:
            return None  # e.g. a model that is not on this machine: A1 fails on text records
        return built if built.fingerprint() == fingerprint else None

    def _policy_cap(
        self,
        claim: CoalitionClaim,
        policy: AuditPolicy,
        records: Sequence[QueryRecord | None],
        package: AuditorPackage | None,
        log: MerkleLog,
    ) -> list[CheckFailure]:
        out = []
        if claim.ledger_root != log.root().hex():
            out.append(CheckFailure("policy_cap", "π_coal is not for the final ledger"))
        if (claim.theta, claim.tau) != (policy.theta, policy.tau):
            out.append(CheckFailure("policy_cap", "the estimator's settings differ from C_policy"))
        if package is not None:
            missing = [
                i for i, r in enumerate(records) if r is not None and i not in package.witnesses
            ]
            if missing:
                out.append(
                    CheckFailure(
                        "policy_cap",
                        f"{len(missing)} record(s) have no witness (first: {missing[0]}): the "
                        "coalition cap needs every query vector, so π_coal cannot be checked",
                    )
                )
                return out
        if package is not None and records:
            good = [
                (i, r) for i, r in enumerate(records) if r is not None and i in package.witnesses
            ]
            if good:
                vectors = np.stack(
                    [package.witnesses[i].query_vector().astype(np.float64) for i, _ in good]
                )
                est = estimate_coalition(
                    vectors,
                    [r.account for _, r in good],
                    theta=policy.theta,
                    ts=[r.ts for _, r in good],
                    tau=policy.tau,
                )
                if (
                    est.size != claim.size
                    or CoalitionClaim.certify(est, claim.ledger_root) != claim.certificate
                ):
                    out.append(
                        CheckFailure(
                            "policy_cap",
                            f"π_coal does not verify: the estimator gives ĉ = {est.size}, "
                            f"the provider claimed {claim.size}",
                        )
                    )
                    return out
        if claim.size > policy.k_max:
            out.append(
                CheckFailure(
                    "policy_cap",
                    f"coalition of {claim.size} accounts exceeds k_max = {policy.k_max}: "
                    f"{', '.join(claim.accounts)}",
                )
            )
        return out


def _sigma_floor(policy: AuditPolicy, account: str | None = None) -> list[CheckFailure]:
    """The committed σ against eq. (3.4) for the committed (ε_acc, δ_acc, r, Δ).

    ε_audit (eq. 5.2) composes k_max accounts that are each (ε_acc, δ_acc)-DP over r
    queries; that premise holds only if σ is at least the calibrated one, so a smaller σ
    FAILs here rather than being turned into a larger ε_audit (the policy promised
    ε_acc to every account, and a smaller σ breaks that promise whatever the coalition).
    """
    need = replace(policy, sigma=None).noise_sigma
    if policy.noise_sigma >= need * (1 - 1e-12):
        return []
    whose = "" if account is None else f"account {account!r}: "
    return [
        CheckFailure(
            "commitment_integrity",
            f"{whose}the committed σ = {policy.noise_sigma:.6g} is below the σ = {need:.6g} that "
            f"eq. (3.4) gives for ε_acc = {policy.epsilon_acc:g}, δ_acc = "
            f"{policy.delta_acc:g}, r = {policy.rate_limit}, Δ = {policy.sensitivity:g}: the "
            "per-account guarantee ε_audit rests on does not hold",
        )
    ]


def _pseudonyms(com: Commitments, package: AuditorPackage) -> list[CheckFailure]:
    """Every account and tenant the commitments name is the pseudonym of one name of the
    package under the window's K_names (so the names of two windows cannot be linked,
    and none was chosen by the provider), and no two names share one."""
    key = names_key(package.seed)
    named = {a: "account" for a in com.accounts}
    named.update((t, "tenant") for t in [*com.accounts.values(), *com.c_idx, *com.voting])
    out = []
    for alias, kind in sorted(named.items()):
        name = package.names.get(alias)
        if name is None or pseudonym(kind, name_salt(key, kind, name), name) != alias:
            out.append(
                CheckFailure(
                    "commitment_integrity",
                    f"{kind} {alias} is not the pseudonym of a name of the auditor package "
                    "under the window's seed",
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class FilterEnd:
    """Where a window left one filtered tenant's documents (:func:`filter_end_states`):
    each document's spent ε by id and by committed content hash, the tenant's mode and
    lifetime budget M·ε_q, and the window's provider key and publication time."""

    mode: str
    document_budget: float
    by_id: dict[str, float]
    by_content: dict[str, float]
    provider_key: str
    published_at: int


def filter_end_states(
    transcript: PublicTranscript, package: AuditorPackage
) -> dict[str, FilterEnd]:
    """Where a window left each filtered tenant's documents, by tenant name: its
    committed state plus the witnessed charges of the tenant's records — what the next
    window's verification takes as ``previous_filters``. Verify the window itself first;
    this only checks that its commitments are signed, that its package opens C_filters
    and that every record of a filtered tenant has a witnessed screening
    (:class:`VerificationError` otherwise)."""
    com = transcript.commitments
    if not com.verify():
        raise VerificationError("The previous window's commitments are not signed by its key.")
    out: dict[str, FilterEnd] = {}
    records = [QueryRecord.from_bytes(r) for r in transcript.records]
    for t, c in sorted(com.filters.items()):
        start = package.filters.get(t)
        if start is None or filters_commitment(package.seed, t, np.array(start)) != c:
            raise VerificationError(
                f"The previous window's package does not open its C_filters[{t}]."
            )
        settings = VoteSettings.from_dict(com.voting[t])
        spent = np.array(start, dtype=np.float64)
        for pos, rec in enumerate(records):
            if rec.tenant != t:
                continue
            w = package.witnesses.get(pos)
            if w is None or w.screen is None or w.digest() != rec.proof:
                raise VerificationError(
                    f"Record {pos} of the previous window has no witnessed screening."
                )
            apply_charges(spent, w.screen)
        ids = package.tenant_ids.get(t, [])
        contents = package.tenant_contents.get(t, [])
        by_content: dict[str, float] = {}
        for h, v in zip(contents, spent.tolist()):
            if h:
                by_content[h] = max(by_content.get(h, 0.0), v)
        out[package.names.get(t, t)] = FilterEnd(
            mode=settings.mode,
            document_budget=settings.document_budget,
            by_id=dict(zip(ids, spent.tolist())),
            by_content=by_content,
            provider_key=com.provider_key,
            published_at=com.published_at,
        )
    return out


def _start_state(
    tenant: str, start: Sequence[float], settings: VoteSettings, package: AuditorPackage
) -> list[CheckFailure]:
    """A committed filter state is one spent ε per committed document, each finite and
    within [0, M·ε_q] (a negative or infinite one would give the document more budget)."""
    values = np.asarray(start, dtype=np.float64)
    cap = settings.document_budget * (1 + 1e-9)
    if values.shape != (len(package.tenant_ids.get(tenant, ())),) or not (
        np.all(np.isfinite(values)) and np.all(values >= 0) and np.all(values <= cap)
    ):
        return [
            CheckFailure(
                "commitment_integrity",
                f"C_filters[{tenant}] commits budgets that are not one value in [0, M·ε_q] "
                "per committed document",
            )
        ]
    return []


def _carried_over(
    com: Commitments,
    package: AuditorPackage,
    voting: Mapping[str, VoteSettings],
    previous: Mapping[str, FilterEnd],
) -> list[CheckFailure]:
    """Each tenant filtered in the previous window is filtered here too, by the same
    provider, after it, with no larger lifetime budget, and every document it shares
    with that window (by id, or by committed content) starts where that window left it
    or higher (tolerance 10⁻⁹, the store's: a lifetime store sums the charges in
    another order)."""
    out = []
    tenants = {name: t for t, name in package.names.items() if t.startswith("t-")}

    def fail(detail: str) -> None:
        out.append(CheckFailure("commitment_integrity", detail))

    for name, before in sorted(previous.items()):
        if before.provider_key != com.provider_key or before.published_at >= com.published_at:
            fail("the previous window is another provider's, or not earlier than this one")
            continue
        t = tenants.get(name)
        if t is None or t not in com.c_idx:
            continue  # the tenant is not served in this window
        settings = voting.get(t)
        if settings is None or not settings.filtered or t not in package.filters:
            fail(
                f"tenant {t} had per-document filters in the previous window and has none "
                "here: its documents' budgets would start again"
            )
            continue
        if settings.document_budget > before.document_budget * (1 + 1e-9):
            fail(
                f"tenant {t}'s lifetime budget M·ε_q grew from {before.document_budget:g} to "
                f"{settings.document_budget:g} since the previous window"
            )
        lower = 0
        contents = package.tenant_contents.get(t, [])
        for i, (doc, now) in enumerate(zip(package.tenant_ids.get(t, []), package.filters[t])):
            was = before.by_id.get(doc, 0.0)
            if i < len(contents) and contents[i]:
                was = max(was, before.by_content.get(contents[i], 0.0))
            lower += now < was * (1 - 1e-9) - 1e-12
        if lower:
            fail(
                f"C_filters[{t}] commits {lower} document(s) as having spent less than "
                "the previous window left them (their budgets were reset)"
            )
    return out


def _replay_filters(
    records: Sequence[QueryRecord | None],
    package: AuditorPackage,
    voting: Mapping[str, VoteSettings],
    policy: AuditPolicy,
    embedder: Embedder | None,
    reexecuted: set[int],
) -> list[CheckFailure]:
    """Every filtered tenant's screenings replayed in ledger order from its committed
    document budgets (:func:`ragprivacy.audit.filters.replay_filters`). Every record's
    witness must open it and, for a text query, hold Emb(q) — checked here for the
    records a sampled verification does not re-execute (``reexecuted``: those the
    per-record check already opened and re-embedded), since their charges decide the
    others'."""
    out = []

    def fail(pos: int, detail: str) -> None:
        out.append(CheckFailure("per_record", f"record {pos}: claim A3: {detail}"))

    for t, settings in sorted(voting.items()):
        fixed, start = package.tenant_fixed.get(t), package.filters.get(t)
        if not settings.filtered or fixed is None or start is None:
            continue  # a missing package part FAILs commitment_integrity
        matrix = scoring_matrix(fixed)
        screens = []
        for pos, rec in enumerate(records):
            if rec is None or rec.tenant != t:
                continue
            w = package.witnesses.get(pos)
            if w is None or w.digest() != rec.proof:
                fail(pos, "no witness that opens it, so the filters cannot be replayed")
                break  # the state after it is unknown
            q = w.query_vector()
            if pos in reexecuted:
                pass  # opened and re-embedded by the per-record check (its failures stand)
            elif query_commitment(w.salt, w.query_hash(), w.nonce) != rec.query_commit:
                fail(pos, "the witnessed query does not open the record")
                break
            elif w.query_text is not None and (
                embedder is None
                or not np.array_equal(fixed_point(embedder.encode([w.query_text]))[0], q)
            ):
                fail(pos, "the witnessed query embedding is not Emb(q) (or cannot be checked)")
                break
            scores = integer_scores(matrix, q, policy.grid_bits)
            bits = derived_bits(package.seed, rec.rec(policy.window_id, w.query_hash(), w.nonce))
            screens.append((pos, scores, bits, w.screen))
        else:
            out.extend(
                CheckFailure("per_record", f"record {pos}: claim A3: {detail}")
                for pos, detail in replay_filters(screens, np.array(start), settings)
            )
    return out


def _opened_root(package: AuditorPackage, tenant: str, key: bytes) -> str | None:
    """C_{D_t} recomputed from the package's embeddings, ids and content hashes (None
    when the package lacks the tenant or they do not fit together)."""
    fixed = package.tenant_fixed.get(tenant)
    ids = package.tenant_ids.get(tenant)
    if fixed is None or ids is None:
        return None
    try:
        index = TenantCommitment(
            tenant,
            fixed / (1 << FIXED_BITS),
            ids,
            salt_key=key,
            contents=package.tenant_contents.get(tenant),
        )
    except ConfigError:
        return None
    return index.root.hex()


def _unasked_records(
    records: Sequence[QueryRecord | None],
    held: Mapping[str, set[int]],
    unanswered: Sequence[tuple[str | None, str]] = (),
    opened: Mapping[int, str] | None = None,
) -> list[CheckFailure]:
    """Records in the name of an account that submitted receipts but that none of its
    receipts names: queries it never asked for (filler records that move its query
    numbers j, a replay of one of its queries). An account that submits its receipts
    submits all of them — the shipped client keeps every one, charged failures included —
    and the requests it got no answer to (``unanswered``, (account, H(q))), each excusing
    one record. A public record hides its H(q), so an entry excuses a record with that
    H(q) where the auditor package opens the records (``opened``: position → H(q)), and
    any one record of its account without the package. ``held``: account → the positions
    its receipts that checked name (an account that submitted any receipt of the window
    is in it)."""
    named = held
    excused = Counter(unanswered)
    by_account = Counter(a for a, _ in unanswered)  # without openings: one record per entry
    out = []
    for i, rec in enumerate(records):
        if rec is None or rec.account not in named or i in named[rec.account]:
            continue
        if opened is None:
            for who in (rec.account, None):
                if by_account[who] > 0:
                    by_account[who] -= 1
                    break
            else:
                out.append(_never_asked(i, rec.account))
            continue
        hq = opened.get(i, "")
        for key in ((rec.account, hq), (None, hq)):
            if excused[key] > 0:
                excused[key] -= 1
                break
        else:
            out.append(_never_asked(i, rec.account))
    return out


def _never_asked(position: int, account: str) -> CheckFailure:
    return CheckFailure(
        "receipt_consistency",
        f"record {position} is in the name of {account!r}, which submitted its receipts, "
        "but none of them names it: a query the account never asked for",
    )


def _calibrated_estimator(policy: AuditPolicy) -> list[CheckFailure]:
    """The committed θ and τ within the calibration of §5.4 (Observation 5.2 holds at
    θ* = 0.80 over the whole window): a larger θ, or a sliding window shorter than W, lets a
    coalition go unseen by construction (probes a little less similar than θ, or spaced
    more than τ apart), so ĉ ≤ k_max would say nothing."""
    out = []
    if policy.theta > THETA_CALIBRATED + TIE:
        out.append(
            CheckFailure(
                "policy_cap",
                f"the committed θ = {policy.theta:g} is above the calibrated θ* = "
                f"{THETA_CALIBRATED:g} (§5.4, Observation 5.2): coalitions whose probes are "
                "less similar than θ are never seen",
            )
        )
    span = policy.window_end - policy.window_start
    if policy.tau is not None and policy.tau < span:
        out.append(
            CheckFailure(
                "policy_cap",
                f"the committed τ = {policy.tau} is shorter than the window ({span}): "
                "colluders that space their probes more than τ apart are never one cluster; "
                "the calibration (Observation 5.2) is over the whole window",
            )
        )
    return out


def _account_policy(
    records: Sequence[QueryRecord | None],
    accounts: Mapping[str, str],
    policy: AuditPolicy,
    policies: Mapping[str, AuditPolicy],
    voting: Mapping[str, VoteSettings] | None = None,
) -> list[CheckFailure]:
    """t(a) as committed, query numbers j = 1, 2, … in ledger order, at most r per account
    (and for a voting tenant's account at most the answers its ε_acc buys at ε_q each)."""
    out: list[CheckFailure] = []
    count: dict[str, int] = {}
    for i, rec in enumerate(records):
        if rec is None:
            continue
        committed = accounts.get(rec.account)
        if committed is None:
            out.append(
                CheckFailure(
                    "account_policy", f"record {i}: account {rec.account!r} is not committed"
                )
            )
            continue
        if rec.tenant != committed:
            out.append(
                CheckFailure(
                    "account_policy",
                    f"record {i}: account {rec.account!r} is recorded under tenant "
                    f"{rec.tenant!r}, but its committed tenant t(a) is {committed!r}",
                )
            )
        count[rec.account] = count.get(rec.account, 0) + 1
        if rec.seq != count[rec.account]:
            out.append(
                CheckFailure(
                    "account_policy",
                    f"record {i}: it is query {count[rec.account]} of account "
                    f"{rec.account!r} in the ledger but carries query number {rec.seq}: a "
                    "record of the account is missing before it, or the provider chose the "
                    "noise input rec_q",
                )
            )
    for a in sorted(count):
        own = policies.get(a, policy)
        settings = (voting or {}).get(accounts[a])
        if settings is not None:
            cap = settings.answer_cap(own.epsilon_acc, own.rate_limit)
            if count[a] > cap:
                out.append(
                    CheckFailure(
                        "account_policy",
                        f"account {a!r} has {count[a]} voted answers in the window, more "
                        f"than the {cap} its ε_acc = {own.epsilon_acc:g} and r = "
                        f"{own.rate_limit} allow at ε_q = {settings.epsilon_q:g} each",
                    )
                )
            continue
        limit = own.rate_limit
        if count[a] > limit:
            out.append(
                CheckFailure(
                    "account_policy",
                    f"account {a!r} has {count[a]} records in the window, more than its rate "
                    f"limit r = {limit} (the per-account guarantee assumes at most r)",
                )
            )
    return out
