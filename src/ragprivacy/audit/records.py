"""Phase B artefacts: ledger records r_q, signed receipts ρ_q and tree heads (§5.3).

r_q = (a, t(a), C(H(q), n), C(H(top-K)), ts, j, π_q) is appended to the Merkle ledger, j
being the account's query number in the window (1, 2, …, at most r) and n the client's
nonce; the querying account receives ρ_q = (W, a, H(q), n, H(top-K), its documents, salt,
j, pos_q, C_ledger,t, H(commitments)) signed with the provider's long-term Ed25519 key
(RFC 8032, via ``cryptography``), and tree heads name the window W too. Raw content is
stored only as hashes. Every artefact has a canonical byte encoding
(what is hashed or signed).

**Hiding (deviation from §5.3, which records H(q) and H(top-K) themselves):** the ledger
is public, and an unsalted hash of a query text or of a list of document ids is tested by
a dictionary in seconds (plausible questions about known names; every id triple of a
tenant). So a record carries C(h) = SHA-256(tag ‖ salt ‖ h) with a fresh 256-bit salt per
record (:func:`record_salt`), and the opening (salt, H(q), n, H(top-K)) goes only to the
account, in its receipt, and to the auditor, in the record's witness. The salt binds
nothing the noise depends on (rec_q holds H(q) itself), so the provider gains nothing by
choosing it.

**Deviation from the paper (§5.3):** the public input of the derived noise is
rec_q = (W, a, t(a), H(q), j, n) (:func:`ragprivacy.dp.query_input`), not (a, t(a), H(q), ts):
the provider picks ts, so noise keyed by ts could be ground; j is fixed by the ledger. ts
stays in the record, to the whole second and never decreasing along the ledger, for the
coalition estimator's sliding window.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ragprivacy.audit.commitments import canonical_json, pseudonym
from ragprivacy.audit.votes import answer_hash
from ragprivacy.dp import query_input
from ragprivacy.errors import DataError

__all__ = [
    "ProviderKey",
    "QueryRecord",
    "Receipt",
    "SignedTreeHead",
    "query_commitment",
    "query_hash",
    "query_input",
    "record_salt",
    "topk_commitment",
    "topk_hash",
    "verify_signature",
]


def query_hash(text: str) -> str:
    """H(q): SHA-256 hex of the UTF-8 query text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def topk_hash(
    tenant: str, positions: Sequence[int], ids: Sequence[str], contents: Sequence[str]
) -> str:
    """H(top-K): SHA-256 hex over the tenant, the selected positions, their ids and the
    committed hashes of their texts (index leaves), best first."""
    return hashlib.sha256(
        canonical_json(
            {
                "tenant": tenant,
                "positions": [int(p) for p in positions],
                "ids": list(ids),
                "contents": list(contents),
            }
        )
    ).hexdigest()


def record_salt() -> str:
    """A fresh 256-bit salt (hex) for one record's commitments."""
    return os.urandom(32).hex()


def _commit(tag: bytes, salt: str, digest: str, extra: str = "") -> str:
    try:
        raw = bytes.fromhex(salt) + bytes.fromhex(digest)
    except ValueError:
        raw = b""  # a malformed opening opens nothing
    if len(raw) != 64 or not NONCE.fullmatch(extra):
        return ""
    return hashlib.sha256(tag + raw + extra.encode("ascii")).hexdigest()


#: a client nonce: up to 256 bits in lowercase hex ("" when the client sent none)
NONCE = re.compile(r"[0-9a-f]{0,64}")


def query_commitment(salt: str, query_hash: str, nonce: str = "") -> str:
    """C(H(q), n) = SHA-256("query-commit:" ‖ salt ‖ H(q) ‖ n): what the public record
    holds in place of H(q) and the client's nonce n ("" for a malformed opening, which
    matches no record)."""
    return _commit(b"query-commit:", salt, query_hash, nonce)


def topk_commitment(salt: str, topk_hash: str) -> str:
    """C(H(top-K)) = SHA-256("topk-commit:" ‖ salt ‖ H(top-K)), as :func:`query_commitment`."""
    return _commit(b"topk-commit:", salt, topk_hash)


class ProviderKey:
    """The provider's long-term Ed25519 identity key."""

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._key = private

    @classmethod
    def generate(cls) -> ProviderKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed32: bytes) -> ProviderKey:
        """A key from 32 secret bytes (RFC 8032 private key)."""
        return cls(Ed25519PrivateKey.from_private_bytes(seed32))

    @property
    def public_hex(self) -> str:
        raw = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return raw.hex()

    def sign(self, message: bytes) -> str:
        return self._key.sign(message).hex()


def verify_signature(public_hex: str, message: bytes, signature_hex: str) -> bool:
    """True if ``signature_hex`` is the key's Ed25519 signature of ``message``."""
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_hex)).verify(
            bytes.fromhex(signature_hex), message
        )
    except (InvalidSignature, ValueError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class QueryRecord:
    """r_q: account, its tenant, the salted commitments of H(q) and H(top-K), timestamp,
    the account's query number j in the window, and the attestation π_q."""

    account: str
    tenant: str
    query_commit: str
    topk_commit: str
    ts: int
    seq: int
    proof: str

    def rec(
        self, window_id: str, query_hash: str, nonce: str = ""
    ) -> tuple[str, str, str, str, int, str]:
        """rec_q = (W, a, t(a), H(q), j, n) for the opened H(q) and client nonce n: the
        input of the derived noise (A2)."""
        return query_input(window_id, self.account, self.tenant, query_hash, self.seq, nonce)

    def opens_to(self, salt: str, query_hash: str, topk_hash: str, nonce: str = "") -> bool:
        """Whether (salt, H(q), n, H(top-K)) opens this record's two commitments."""
        return (
            query_commitment(salt, query_hash, nonce) == self.query_commit
            and topk_commitment(salt, topk_hash) == self.topk_commit
        )

    def to_bytes(self) -> bytes:
        return canonical_json(asdict(self))

    @classmethod
    def from_bytes(cls, data: bytes) -> QueryRecord:
        try:
            d = json.loads(data)
        except ValueError as exc:
            raise DataError(f"A ledger leaf is not a query record: {exc}.") from None
        if isinstance(d, dict) and "query_hash" in d:
            raise DataError(
                "This ledger's records hold H(q) itself: it was written by an earlier "
                "ragprivacy, before records held salted commitments, and cannot be verified "
                "by this version."
            )
        try:
            return cls(**d)
        except TypeError as exc:
            raise DataError(f"A ledger leaf is not a query record: {exc}.") from None


def _unbound(kind: str, d: Mapping[str, Any], *, salted: bool = False) -> DataError:
    """The error for an export whose ``kind`` predates this version's fields."""
    if "commitments" not in d:
        return DataError(
            f"This {kind} does not bind the window's commitments (no 'commitments' field): "
            "it was exported by an earlier ragprivacy, before receipts and tree heads named "
            "the commitments they were issued under, and cannot be verified by this version."
        )
    if salted and ("salt" not in d or "documents" not in d or "nonce" not in d):
        return DataError(
            f"This {kind} has no 'salt' or 'documents': it was exported by an earlier "
            "ragprivacy, before records held salted commitments and receipts named the "
            "committed documents, and cannot be verified by this version."
        )
    if salted and ("holder" not in d or "holder_salt" not in d):
        return DataError(
            f"This {kind} has no 'holder': it was exported by an earlier ragprivacy, before "
            "public names were pseudonyms, and cannot be verified by this version."
        )
    return DataError(f"This is not a {kind}: its fields are {', '.join(sorted(d))}.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Receipt:
    """ρ_q, co-signed at query time: what an honest account can later show the verifier.

    Besides the record's place in the ledger (position, tree size, root), it holds the
    openings of the record's commitments, the account's secret (the public record hides
    them; :meth:`QueryRecord.opens_to`): (a, H(q), H(top-K)), the ``salt``, the client's
    ``nonce`` n of rec_q, and the ``documents`` H(top-K) is taken over — (position, id,
    SHA-256 of the text as committed in the index leaf) of each selected document, so the
    account checks the texts it was served against what was committed. It names the
    account's query number j (``seq``) and the digest of the window's commitments it was
    issued under (``commitments``, :meth:`ragprivacy.audit.Commitments.digest`):
    commitments re-signed later — another seed, late accounts, a back-dated
    ``published_at`` — contradict every receipt issued before, and a record in the
    account's name that none of its receipts names is one it
    never asked for. A voting tenant's receipt carries the ``answer`` text instead of
    documents (they never leave the service); its ``topk_hash`` is H(answer).

    ``account`` is the account's pseudonym in the window, what its records carry;
    ``holder`` its name and ``holder_salt`` k_a, which open the pseudonym
    (:meth:`opens_holder`): the account checks that its receipts name it, under a new
    pseudonym in every window."""

    window_id: str
    account: str
    holder: str
    holder_salt: str
    query_hash: str
    topk_hash: str
    documents: tuple[tuple[int, str, str], ...]
    nonce: str
    salt: str
    seq: int
    position: int
    tree_size: int
    root: str
    commitments: str
    answer: str | None = None
    signature: str = ""

    def message(self) -> bytes:
        d = self.to_dict()
        d.pop("signature")
        return b"receipt:" + canonical_json(d)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.answer is None:  # a retrieval's receipt reads as before voting answers
            d.pop("answer")
        return d

    def opens_holder(self) -> bool:
        """Whether (``holder``, ``holder_salt``) opens the pseudonym ``account``."""
        try:
            salt = bytes.fromhex(self.holder_salt)
        except ValueError:
            return False
        return len(salt) == 32 and pseudonym("account", salt, self.holder) == self.account

    def opened_topk(self, tenant: str) -> str:
        """H(top-K) of the receipted documents (position, id, content hash) of ``tenant``
        — or, for a voting tenant's ``answer``, H(answer): what ``topk_hash`` must be."""
        if self.answer is not None:
            return answer_hash(tenant, self.answer)
        return topk_hash(
            tenant,
            [p for p, _, _ in self.documents],
            [i for _, i, _ in self.documents],
            [c for _, _, c in self.documents],
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Receipt:
        try:
            fields = dict(d)
            fields["documents"] = tuple((int(p), str(i), str(c)) for p, i, c in fields["documents"])
            return cls(**fields)
        except (TypeError, KeyError, ValueError):
            raise _unbound("receipt", d, salted=True) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class SignedTreeHead:
    """The ledger root C_ledger at ``size`` of window ``window_id``, signed by the provider
    under the window's commitments (``commitments``: their digest, as in a receipt)."""

    window_id: str
    size: int
    root: str
    commitments: str
    signature: str = ""

    def message(self) -> bytes:
        return b"tree-head:" + canonical_json(
            {
                "window_id": self.window_id,
                "size": self.size,
                "root": self.root,
                "commitments": self.commitments,
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SignedTreeHead:
        try:
            return cls(**dict(d))
        except TypeError:
            raise _unbound("tree head", d) from None
