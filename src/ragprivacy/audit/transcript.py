"""What an audit window publishes and hands over: the wire and file formats of phases A–C.

:class:`Commitments` (phase A, signed before the window opens), :class:`QueryAnswer` (an
account's documents and signed receipt, phase B), :class:`CoalitionClaim` (ĉ with its
certificate, phase C), :class:`PublicTranscript` (what anyone may read) and
:class:`AuditorPackage` (what only a trusted auditor gets: the seed and the witnesses);
:func:`save_window` / :func:`load_window` write and read them as a directory. The window
that produces them is :class:`ragprivacy.audit.AuditWindow`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._files import write_private
from ragprivacy.audit.coalition import CoalitionEstimate
from ragprivacy.audit.commitments import PSEUDONYM, canonical_json
from ragprivacy.audit.proofs import RecordWitness
from ragprivacy.audit.records import Receipt, SignedTreeHead, verify_signature
from ragprivacy.errors import ConfigError, DataError

__all__ = [
    "AuditorPackage",
    "CoalitionClaim",
    "Commitments",
    "PublicTranscript",
    "QueryAnswer",
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
    that fingerprint, claim A1). ``voting`` holds each voting tenant's committed vote
    settings (:class:`ragprivacy.audit.VoteSettings`; absent from windows without one), and
    ``filters`` each filtered (MURAG, MURAG-ADA) tenant's C_filters, a keyed hash of what its
    documents had spent when the window opened (:mod:`ragprivacy.audit.filters`).

    Accounts and tenants are named by their pseudonyms of the window
    (:func:`ragprivacy.audit.pseudonym`), and ``c_idx`` holds each tenant's Merkle root
    only: its size is bound by the root (an RFC 9162 root is over a given number of
    leaves) and told only to the auditor, who gets the rows.
    """

    c_emb: str
    c_idx: dict[str, str]
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
    voting: dict[str, dict[str, Any]] = field(default_factory=dict)
    filters: dict[str, str] = field(default_factory=dict)

    def message(self) -> bytes:
        d = self.to_dict()
        d.pop("signature")
        return b"commitments:" + canonical_json(d)

    def verify(self, public_hex: str | None = None) -> bool:
        return verify_signature(public_hex or self.provider_key, self.message(), self.signature)

    def digest(self) -> str:
        """H(the signed commitments): what every receipt and tree head of the window
        names, so that commitments changed after a query was answered (re-signed with
        another seed, more accounts or an earlier ``published_at``) contradict them."""
        return hashlib.sha256(self.message()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not self.voting:  # a window without voting tenants reads and signs as before
            d.pop("voting")
        if not self.filters:  # and one without filtered tenants
            d.pop("filters")
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Commitments:
        d = dict(d)
        names = [*dict(d.get("accounts") or {}), *dict(d.get("c_idx") or {})]
        if any(not isinstance(v, str) for v in dict(d.get("c_idx") or {}).values()) or any(
            not PSEUDONYM.fullmatch(str(n)) for n in names
        ):
            raise DataError(
                "These commitments name accounts and tenants in the clear and publish tenant "
                "sizes: they were written by an earlier ragprivacy, before public names were "
                "pseudonyms, and cannot be verified by this version."
            )
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

    @classmethod
    def of(cls, estimate: CoalitionEstimate, ledger_root: str) -> CoalitionClaim:
        """The claim of ``estimate`` over the ledger of root ``ledger_root``, certified."""
        return cls(
            size=estimate.size,
            accounts=estimate.accounts,
            theta=estimate.theta,
            tau=estimate.tau,
            ledger_root=ledger_root,
            certificate=cls.certify(estimate, ledger_root),
        )

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
    """What a trusted auditor receives for re-execution: seed, witnesses, embeddings,
    and the ids and content hashes committed beside them."""

    seed: bytes
    witnesses: dict[int, RecordWitness]
    tenant_fixed: dict[str, np.ndarray]
    tenant_ids: dict[str, list[str]]
    tenant_contents: dict[str, list[str]]
    #: pseudonym → the account's or tenant's name (the auditor checks each pseudonym)
    names: dict[str, str] = field(default_factory=dict)
    #: filtered tenant → each document's spent ε when the window opened (opens C_filters)
    filters: dict[str, list[float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed.hex(),
            "witnesses": {str(k): w.to_dict() for k, w in self.witnesses.items()},
            "tenant_fixed": {
                t: {"dim": int(v.shape[1]), "hex": v.astype("<i4").tobytes().hex()}
                for t, v in self.tenant_fixed.items()
            },
            "tenant_ids": self.tenant_ids,
            "tenant_contents": self.tenant_contents,
            "names": self.names,
            **({"filters": self.filters} if self.filters else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AuditorPackage:
        if "tenant_contents" not in d or "names" not in d:
            raise DataError(
                "This auditor package has no 'tenant_contents' or no 'names': it was "
                "exported by an earlier ragprivacy, before index leaves were salted and "
                "public names were pseudonyms, and cannot be verified by this version."
            )
        return cls(
            seed=bytes.fromhex(d["seed"]),
            witnesses={int(k): RecordWitness.from_dict(w) for k, w in d["witnesses"].items()},
            tenant_fixed={
                t: np.frombuffer(bytes.fromhex(v["hex"]), dtype="<i4").reshape(-1, v["dim"])
                for t, v in d["tenant_fixed"].items()
            },
            tenant_ids={t: list(v) for t, v in d["tenant_ids"].items()},
            tenant_contents={t: list(v) for t, v in d["tenant_contents"].items()},
            names={str(k): str(v) for k, v in d["names"].items()},
            filters={
                str(t): [float(x) for x in v] for t, v in dict(d.get("filters") or {}).items()
            },
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
        write_private(d / "auditor.json", json.dumps(package.to_dict()))  # the seed
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
