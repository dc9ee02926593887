"""Per-record attestation behind a ``ProofSystem`` interface (collusion paper §5.3, §5.5).

A proof system turns a query's private *witness* into the attestation π_q stored in the
ledger record, and checks records for the claims

* A1 — embedder consistency: the query embedding is Emb(q) under the committed embedder;
* A2 — noise derivation: z_q = DGS(H(s_W ‖ rec_q); σ) for the committed seed and σ, with
  rec_q = (W, a, t(a), H(q), j, n) (:meth:`QueryRecord.rec`);
* A3 — noise-then-select: the top-K are the K largest of clip(Score(q, E_{t(a)})) + z_q
  over the committed tenant index (scores clipped to the committed ``score_range``, noise
  on every score, then selection: :meth:`ragprivacy.dp.GaussianNoisyTopK.select_units`);
* A4 — tenant containment: every opened position comes from C_{D_{t(a)}}.

Shipped: :class:`AuditorReexecution` — π_q is a SHA-256 commitment to the witness; a
*trusted auditor* who holds the seed s_W, the committed tenant embeddings and the
witnesses re-derives the noise and re-executes the retrieval. **It does not give the
zero-knowledge property of Remark 5.1**: the auditor learns s_W, hence the noise and the
unnoised scores, so the DP guarantee holds only against parties other than the auditor.
A SNARK backend (Groth16/PLONK over the same relation) would implement the same two
methods with ``zero_knowledge = True`` and verify π_q against public inputs only
(C_emb, C_idx, C_seed, C_policy, rec_q, H(top-K)), with ``witness`` left ``None``.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ragprivacy.audit.commitments import (
    AuditPolicy,
    canonical_json,
    fixed_point,
    verify_opening,
)
from ragprivacy.audit.filters import FilterScreen
from ragprivacy.audit.noise import QueryNoise, integer_scores
from ragprivacy.audit.records import (
    QueryRecord,
    query_commitment,
    query_hash,
    topk_commitment,
    topk_hash,
)
from ragprivacy.audit.votes import VoteSettings, answer_hash, check_vote, vote_positions
from ragprivacy.dp import VoteTrace, derived_bits
from ragprivacy.embed import Embedder

__all__ = [
    "AuditorReexecution",
    "ClaimFailure",
    "ProofSystem",
    "RecordWitness",
    "VerificationContext",
]


@dataclass(frozen=True, slots=True)
class RecordWitness:
    """The provider's private witness for one record.

    ``query_fixed`` is the fixed-point query embedding (int32 hex); ``contents`` the
    committed hashes of the selected documents' texts; ``openings`` are (position, vector
    hex, [proof hex], leaf salt hex) of the selected positions in the scored index;
    ``salt`` opens the record's commitments of H(q) and H(top-K); ``nonce`` is the client's
    n of rec_q. A voting tenant's answer also holds its ``vote`` trace
    (:mod:`ragprivacy.audit.votes`); its record commits to H(answer) instead of H(top-K).
    A filtered (MURAG, MURAG-ADA) tenant's answer also holds its ``screen``
    (:mod:`ragprivacy.audit.filters`): the documents it voted over and the filter charges.
    """

    query_text: str | None
    query_fixed: str
    scored_tenant: str
    noise_digest: str
    positions: tuple[int, ...]
    ids: tuple[str, ...]
    contents: tuple[str, ...]
    openings: tuple[tuple[int, str, tuple[str, ...], str], ...]
    salt: str
    nonce: str = ""
    vote: VoteTrace | None = None
    screen: FilterScreen | None = None

    def query_hash(self) -> str:
        """H(q): of the witnessed text, or of the fixed-point vector of a vector query."""
        if self.query_text is not None:
            return query_hash(self.query_text)
        return hashlib.sha256(self.query_vector().tobytes()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        # field by field, not asdict: its deep copy of every opening was most of the
        # digest's time; the JSON (tuples as lists) is the same
        d: dict[str, Any] = {
            f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("vote", "screen")
        }
        if self.vote is not None:
            d["vote"] = self.vote.to_dict()
        if self.screen is not None:
            d["screen"] = self.screen.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RecordWitness:
        vote, screened = d.get("vote"), d.get("screen")
        return cls(
            query_text=d["query_text"],
            query_fixed=d["query_fixed"],
            scored_tenant=d["scored_tenant"],
            noise_digest=d["noise_digest"],
            positions=tuple(int(p) for p in d["positions"]),
            ids=tuple(d["ids"]),
            contents=tuple(d["contents"]),
            openings=tuple((int(p), v, tuple(pr), sa) for p, v, pr, sa in d["openings"]),
            salt=d["salt"],
            nonce=d["nonce"],
            vote=None if vote is None else VoteTrace.from_dict(vote),
            screen=None if screened is None else FilterScreen.from_dict(screened),
        )

    def digest(self) -> str:
        return hashlib.sha256(b"witness:" + canonical_json(self.to_dict())).hexdigest()

    def query_vector(self) -> np.ndarray:
        return np.frombuffer(bytes.fromhex(self.query_fixed), dtype="<i4")


@dataclass(frozen=True, slots=True)
class ClaimFailure:
    """A failed claim of one record: ``claim`` is A1–A4 or ``binding``."""

    position: int
    claim: str
    detail: str


@dataclass(slots=True)
class VerificationContext:
    """What a verifier checks records against: the policy (and each account's own, where
    committed), the committed tenant roots and sizes, and (for re-execution) the auditor's
    secrets: seed and committed embeddings."""

    policy: AuditPolicy
    index_roots: Mapping[str, tuple[bytes, int]]
    seed: bytes | None = None
    tenant_fixed: Mapping[str, np.ndarray] = field(default_factory=dict)
    tenant_ids: Mapping[str, Sequence[str]] = field(default_factory=dict)
    embedder: Embedder | None = None
    account_policies: Mapping[str, AuditPolicy] = field(default_factory=dict)
    voting: Mapping[str, VoteSettings] = field(default_factory=dict)


class ProofSystem(ABC):
    """Produces π_q from a witness and verifies records for claims A1–A4."""

    name: str = "proof-system"
    zero_knowledge: bool = False

    @abstractmethod
    def prove_record(self, witness: RecordWitness) -> str:
        """π_q for ``witness`` (hex)."""

    @abstractmethod
    def verify_record(
        self,
        position: int,
        record: QueryRecord,
        witness: RecordWitness | None,
        ctx: VerificationContext,
    ) -> list[ClaimFailure]:
        """The failed claims of one record (empty when it verifies)."""


class AuditorReexecution(ProofSystem):
    """A trusted auditor re-derives the noise and re-executes the retrieval (no ZK)."""

    name = "auditor-reexecution"
    zero_knowledge = False

    def prove_record(self, witness: RecordWitness) -> str:
        return witness.digest()

    def verify_record(
        self,
        position: int,
        record: QueryRecord,
        witness: RecordWitness | None,
        ctx: VerificationContext,
    ) -> list[ClaimFailure]:
        def fail(claim: str, detail: str) -> list[ClaimFailure]:
            return [ClaimFailure(position, claim, detail)]

        if witness is None:
            return fail("binding", "the provider gave no witness for this record")
        if witness.digest() != record.proof:
            return fail("binding", "the witness does not open the record's attestation π_q")
        policy = ctx.account_policies.get(record.account, ctx.policy)
        q = witness.query_vector()
        # A1: the query embedding is Emb(q) for the committed embedder.
        hq = witness.query_hash()
        if query_commitment(witness.salt, hq, witness.nonce) != record.query_commit:
            return fail("A1", "H(q) of the witnessed query does not open the record")
        if witness.query_text is not None:
            if ctx.embedder is None:  # never PASS a text query without re-embedding it
                return fail(
                    "A1",
                    "the witnessed query text cannot be re-embedded: no embedder with the "
                    "committed fingerprint is available to the verifier (pass --embedder)",
                )
            expect = fixed_point(ctx.embedder.encode([witness.query_text]))[0]
            if not np.array_equal(expect, q):
                return fail(
                    "A1",
                    "the witnessed query embedding is not Emb(q) under the committed "
                    "embedder (a decoy vector was scored or witnessed instead of the query)",
                )
        # A4: every opened position comes from the account's own tenant commitment.
        own = ctx.index_roots.get(record.tenant)
        if own is None:
            return fail("A4", f"no committed index for tenant {record.tenant!r}")
        if witness.scored_tenant != record.tenant:
            return fail(
                "A4",
                f"the query of tenant {record.tenant!r} was scored against tenant "
                f"{witness.scored_tenant!r}'s index",
            )
        root, size = own
        if len(witness.openings) != len(witness.positions):
            return fail("A4", "one opening per selected position is required")
        if not len(witness.ids) == len(witness.contents) == len(witness.positions):
            return fail("A4", "one id and one content hash per selected position is required")
        for (pos, vec_hex, proof, salt), sel, doc_id, content in zip(
            witness.openings, witness.positions, witness.ids, witness.contents
        ):
            if pos != sel or not verify_opening(
                root,
                size,
                pos,
                bytes.fromhex(vec_hex),
                [bytes.fromhex(p) for p in proof],
                salt=bytes.fromhex(salt),
                doc_id=doc_id,
                content=content,
            ):
                return fail(
                    "A4",
                    f"position {pos} with its id and text does not open C_D[{record.tenant}]",
                )
        settings = ctx.voting.get(record.tenant)
        if (settings is None) != (witness.vote is None):
            return fail(
                "A3",
                f"the record of tenant {record.tenant!r} "
                + ("has no vote trace" if witness.vote is None else "carries a vote")
                + " although the tenant is committed "
                + ("as a voting tenant" if settings is not None else "for retrieval"),
            )
        if witness.vote is not None:
            opened = answer_hash(record.tenant, witness.vote.text)
            if topk_commitment(witness.salt, opened) != record.topk_commit:
                return fail("A3", "H(answer) of the witness does not open the record")
        else:
            opened = topk_hash(record.tenant, witness.positions, witness.ids, witness.contents)
            if topk_commitment(witness.salt, opened) != record.topk_commit:
                return fail("A3", "H(top-K) of the witness does not open the record")
        if ctx.seed is None or record.tenant not in ctx.tenant_fixed:
            return []  # the remaining claims need the auditor's secrets
        fixed = ctx.tenant_fixed[record.tenant]
        if settings is not None and witness.vote is not None:
            return self._verify_vote(position, record, witness, ctx, settings, fixed, hq)
        # A2: the noise is derived from the committed seed and the public record, by the
        # committed derivation (full, or lazy where public parameters admit it).
        mech = policy.mechanism()
        rec = record.rec(policy.window_id, hq, witness.nonce)
        z = QueryNoise(ctx.seed, rec, mech, fixed.shape[0], policy.noise)
        if z.digest != witness.noise_digest:
            return fail("A2", "the noise was not derived from the committed seed and rec_q")
        # A3: clip to the committed score range, noise every score, then top-K: the full
        # derivation's rule over every slot (GaussianNoisyTopK.select_units), or the lazy
        # one run again from the same bits (it scores the slots its noise leaves in the
        # race, the provider's candidates).
        if z.lazy:
            expected = z.select(lambda p: integer_scores(fixed[p], q, policy.grid_bits))
        else:
            expected = mech.select_units(integer_scores(fixed, q, policy.grid_bits), z.dense())
        if tuple(int(p) for p in expected) != tuple(witness.positions):
            return fail(
                "A3",
                "the top-K are not the K largest noisy clipped scores (clip, noise every "
                "score, then select)",
            )
        ids = ctx.tenant_ids.get(record.tenant)
        if ids is not None and tuple(ids[p] for p in expected) != tuple(witness.ids):
            return fail("A3", "the selected ids are not those of the committed positions")
        return []

    @staticmethod
    def _verify_vote(
        position: int,
        record: QueryRecord,
        witness: RecordWitness,
        ctx: VerificationContext,
        settings: VoteSettings,
        fixed: np.ndarray,
        hq: str,
    ) -> list[ClaimFailure]:
        """A voting answer's re-execution (:mod:`ragprivacy.audit.votes`): the retrieved
        positions (A3) and the vote's release from the derived noise (A2)."""
        assert witness.vote is not None and ctx.seed is not None
        if settings.filtered:  # the screening is replayed with the tenant's other records
            if witness.screen is None or witness.screen.positions != tuple(witness.positions):
                return [
                    ClaimFailure(
                        position,
                        "A3",
                        "the voters' documents are not those of the witnessed screening",
                    )
                ]
        elif witness.screen is not None:
            return [ClaimFailure(position, "A3", "a dp_vote answer carries a screening")]
        elif vote_positions(
            integer_scores(fixed, witness.query_vector(), ctx.policy.grid_bits), settings.slots
        ) != tuple(witness.positions):
            return [
                ClaimFailure(
                    position,
                    "A3",
                    "the voters' documents are not the top m·k exact scores of the committed index",
                )
            ]
        policy = ctx.account_policies.get(record.account, ctx.policy)
        bits = derived_bits(ctx.seed, record.rec(policy.window_id, hq, witness.nonce))
        failure = check_vote(witness.vote, settings, bits, witness.contents)
        if failure is not None:
            return [
                ClaimFailure(
                    position, "A2", f"the vote does not replay from the derived noise: {failure}"
                )
            ]
        return []
