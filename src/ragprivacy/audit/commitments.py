"""Phase A of the audit protocol: canonical encodings and commitments (collusion paper §5.2).

Before the window opens the provider publishes, signed with its long-term Ed25519 key:

* C_emb = H(embedder fingerprint ‖ prompt template ‖ tokenizer ‖ schema(D))   (R1, eq. 2.2)
* C_idx = {C_{D_t}}: per tenant an RFC 9162 Merkle root over its documents in index
  order (R6, a vector commitment with O(log |D_t|) openings); leaf i is
  H(salt_i ‖ Emb(d_i) ‖ id_i ‖ H(text_i)) (:func:`index_leaf`)
* C_seed = H(s_W) for a fresh seed of at least 256 bits                          (G4)
* C_ledger,0 = the empty tree's root SHA-256()                                    (G2)
* C_policy = H(ε_acc ‖ δ_acc ‖ σ ‖ k_max ‖ δ_policy ‖ W)                          (eq. 5.1)

Every H is SHA-256 over a type-tagged, length-prefixed encoding
(:func:`ragprivacy.dp.encode_record`) with a label per commitment; structured values are
canonical JSON (sorted keys, no spaces, floats in shortest round-trip form). Embeddings
are committed in fixed point (:data:`FIXED_BITS` fractional bits, int32 little endian),
which is also what retrieval scores, so scores are integers and re-execution is
bit-exact on any machine.

**Hiding index leaves (deviation from §5.2, whose leaves are H(Emb(d))):** the root is
public and the embedder is public and deterministic, so an unsalted leaf lets anyone test
a guessed document (regenerate a corpus, match the root; recover a one-document tenant's
text from a few candidates). Each leaf is salted with salt_i = HMAC(K_idx, (t, i)), K_idx
derived from the window seed s_W (:func:`index_salt_key`): the auditor, who receives s_W,
recomputes every leaf; nobody else can test one. The leaf also commits the document's id
and the SHA-256 of its text (when the provider gives it), so a document served under an
id or text that was never committed is caught (the account checks the text against its
receipt, the auditor the receipt against the leaf).

**Pseudonyms (deviation from §5.2–5.3, which name accounts and tenants):** account and
tenant names are as testable as query texts ("clinic", a person's e-mail address) and
link one account's records across windows. Everything public names them by a per-window
pseudonym (:func:`pseudonym`) keyed by K_names, derived from s_W: an account's is
H(k_a ‖ a) with k_a = HMAC(K_names, a), and its receipt carries (a, k_a), so the account
checks its own pseudonym without the seed; the auditor, who receives s_W and the names,
checks every pseudonym of the window. Pseudonyms change with every window, so records
of two windows cannot be linked by name.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray
from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.audit.merkle import (
    EMPTY_ROOT,
    PackedMerkleTree,
    leaf_hash,
    verify_inclusion,
)
from ragprivacy.dp import (
    DEFAULT_SCORE_RANGE,
    AccountPolicy,
    GaussianNoisyTopK,
    Grid,
    encode_record,
    score_sensitivity,
)
from ragprivacy.errors import ConfigError, DataError

__all__ = [
    "FIXED_BITS",
    "PSEUDONYM",
    "POLICY_OVERRIDES",
    "SOURCE_CHUNK",
    "AuditPolicy",
    "EmbeddingSource",
    "TenantCommitment",
    "canonical_json",
    "check_score_range",
    "commit_hash",
    "embedding_commitment",
    "fixed_point",
    "index_leaf",
    "index_salt_key",
    "leaf_salt",
    "name_salt",
    "names_key",
    "pseudonym",
    "seed_commitment",
    "verify_opening",
]

FIXED_BITS = 15  # embedding coordinates in units of 2^-15 (|v_i| ≤ 1 fits int32)


def canonical_json(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, NaN refused."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def commit_hash(label: str, *parts: bytes | str | int) -> bytes:
    """SHA-256 over ``label`` and ``parts`` in the unambiguous record encoding."""
    return hashlib.sha256(encode_record("ragprivacy.audit/v1", label, *parts)).digest()


def seed_commitment(seed: bytes) -> bytes:
    """C_seed = H(s_W); refuses seeds shorter than 256 bits (λ ≥ 256, §5.2)."""
    if not isinstance(seed, bytes) or len(seed) < 32:
        raise ConfigError(
            f"The window seed must be at least 32 random bytes; got "
            f"{len(seed) if isinstance(seed, bytes) else type(seed).__name__}. Use os.urandom(32)."
        )
    return commit_hash("C_seed", seed)


def index_salt_key(seed: bytes) -> bytes:
    """K_idx: the key of the index leaves' salts, derived from the window seed s_W (only
    the auditor, who receives s_W, can recompute a leaf)."""
    return commit_hash("K_idx", seed)


def leaf_salt(key: bytes, tenant: str, position: int) -> bytes:
    """salt_i = HMAC-SHA256(K_idx, (tenant, i)): 256 bits per leaf."""
    return hmac.new(key, encode_record("leaf-salt", tenant, int(position)), "sha256").digest()


def index_leaf(salt: bytes, row: bytes, doc_id: str, content: str) -> bytes:
    """Leaf data of C_{D_t}: H(salt ‖ fixed-point Emb(d) ‖ id ‖ H(text)) (``content``: the
    hex SHA-256 of the document's text, or "" when the provider commits no text)."""
    return commit_hash("index-leaf", salt, row, doc_id, content)


#: a public pseudonym: ``a-`` (an account) or ``t-`` (a tenant) and 128 bits in hex
PSEUDONYM = re.compile(r"[at]-[0-9a-f]{32}")

_PREFIX = {"account": "a-", "tenant": "t-"}


def names_key(seed: bytes) -> bytes:
    """K_names: the key of the window's pseudonyms, derived from the window seed s_W."""
    return commit_hash("K_names", seed)


def name_salt(key: bytes, kind: str, name: str) -> bytes:
    """k = HMAC-SHA256(K_names, (kind, name)): the opening of one name's pseudonym
    (``kind``: "account" or "tenant")."""
    return hmac.new(key, encode_record("name-salt", kind, name), "sha256").digest()


def pseudonym(kind: str, salt: bytes, name: str) -> str:
    """The public name of account or tenant ``name`` in a window: its kind's prefix and
    the first 128 bits of H(kind ‖ k ‖ name), ``salt`` = k (:func:`name_salt`). Without k
    nobody can test a guessed name against it; with k the holder of ``name`` checks it."""
    if kind not in _PREFIX:
        raise ConfigError(f"A pseudonym names an account or a tenant; got {kind!r}.")
    return _PREFIX[kind] + commit_hash("pseudonym", kind, salt, name).hex()[:32]


def embedding_commitment(
    embedder_fingerprint: str, prompt_template: str, tokenizer: str, schema: Mapping[str, Any]
) -> bytes:
    """C_emb of eq. (R1): embedder, prompt template, tokenizer and index schema."""
    return commit_hash(
        "C_emb", embedder_fingerprint, prompt_template, tokenizer, canonical_json(dict(schema))
    )


def fixed_point(vectors: FloatArray) -> np.ndarray:
    """Embeddings as int32 in units of 2^-FIXED_BITS (rounded to nearest, ties to even)."""
    v = np.asarray(vectors, dtype=np.float64)
    if v.ndim == 1:
        v = v[None, :]
    if not np.all(np.isfinite(v)) or np.abs(v).max(initial=0.0) > 4.0:
        raise ConfigError("Embeddings must be finite unit-norm vectors to be committed.")
    return np.rint(v * (1 << FIXED_BITS)).astype("<i4")


def scoring_matrix(fixed_vectors: np.ndarray) -> np.ndarray:
    """The fixed-point embeddings as float64, the form :func:`integer_scores` multiplies
    (every entry an integer, so exact), read-only. 8 bytes an entry: a tenant commitment
    does not keep one (:meth:`TenantCommitment.scores` converts its int32 rows block by
    block instead); a verifier re-executing many queries over one index makes it once."""
    out = np.asarray(fixed_vectors, dtype=np.float64)
    out.flags.writeable = False
    return out


#: bytes of float64 rows :func:`_block_scores` converts at a time: 256 rows at d = 384
#: (768 KiB), a buffer that stays in a core's cache while BLAS reads it
_SCORE_BLOCK_BYTES = 3 << 18


def _block_scores(fixed_vectors: np.ndarray, fixed_query: np.ndarray, grid_bits: int) -> np.ndarray:
    """:func:`~ragprivacy.audit.integer_scores` of every int32 row of ``fixed_vectors``,
    without a float64 copy of the matrix: the rows are converted block by block
    (:data:`_SCORE_BLOCK_BYTES`) into one float64 buffer, reused, and each block is
    scored by ``integer_scores``. Every score is exact wherever it is computed, so the
    result is the same integers, bit for bit, as scoring the whole matrix at once."""
    from ragprivacy.audit.noise import integer_scores

    fixed = np.asarray(fixed_vectors)
    if fixed.ndim != 2:
        raise ConfigError(f"Fixed-point rows must be a matrix [n, d]; got shape {fixed.shape}.")
    n, dim = fixed.shape
    rows = max(1, _SCORE_BLOCK_BYTES // (8 * max(dim, 1)))
    out = np.empty(n, dtype=np.int64)
    buffer = np.empty((min(rows, n), dim), dtype=np.float64)
    for start in range(0, n, rows):
        block = buffer[: min(rows, n - start)]
        np.copyto(block, fixed[start : start + block.shape[0]], casting="safe")
        out[start : start + block.shape[0]] = integer_scores(block, fixed_query, grid_bits)
    return out


class EmbeddingSource(ABC):
    """A tenant's committed embeddings read where they are stored.

    By default the provider keeps only the Merkle tree of their hashes (32 bytes a
    document) and reads vectors when it needs them: every row, in position order, for the
    exact scores of a query and for the commitment (:meth:`chunks`), and single positions
    for the openings of the selected slots (:meth:`vectors_at`). A source that is
    :attr:`resident` is read once instead, block by block, when the commitment is made,
    which keeps its rows in fixed point (4 bytes an entry, no float copy of the whole
    matrix even while it is built). The vectors must be the same float32 values the
    in-memory path would hold (bit for bit): they are turned into the committed fixed
    point by :func:`fixed_point`, so the verifier's re-execution, which scores the
    auditor's copy of the fixed-point rows in numpy, computes the same integer scores. A
    service keeps them in a pgvector table (:class:`ragprivacy.service.PgvectorTenantVectors`).
    """

    #: number of rows (positions 0 .. size - 1)
    size: int
    #: vector width
    dim: int
    #: whether a commitment reads every row once and keeps it (in fixed point) instead of
    #: reading rows when it needs them: a store that is slow to read by position
    resident: bool = False

    @abstractmethod
    def vectors_at(self, positions: Sequence[int]) -> FloatArray:
        """float32 rows ``[len(positions), dim]`` in the order asked."""

    @abstractmethod
    def chunks(self, rows: int) -> Iterator[FloatArray]:
        """Every row ``0 .. size - 1`` in order, as float32 blocks of at most ``rows``."""


#: rows per block when a source's vectors are streamed (about 1.5 MB at d = 384)
SOURCE_CHUNK = 1024


class PackedHashes(Sequence[str]):
    """The committed content hashes of a tenant's documents, held as 32 bytes each (not a
    64-character string each); an item reads as its hex string, as given. A store that
    hashes the texts itself hands one over (``packed``: the raw SHA-256 digests, in
    index order), so no string per document is ever made."""

    def __init__(self, packed: bytes) -> None:
        self._packed = packed

    def __len__(self) -> int:
        return len(self._packed) // 32

    def _item(self, i: int) -> str:
        return self._packed[32 * i : 32 * i + 32].hex()

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._item(i) for i in range(*index.indices(len(self)))]
        i = int(index)
        if not -len(self) <= i < len(self):
            raise IndexError("content index out of range")
        return self._item(i % len(self))


class _Blank(Sequence[str]):
    """No text committed for any of ``size`` documents: every content hash is ""."""

    def __init__(self, size: int) -> None:
        self._size = size

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [""] * len(range(*index.indices(self._size)))
        if not -self._size <= int(index) < self._size:
            raise IndexError("content index out of range")
        return ""


def _packed_contents(contents: Sequence[str] | None, size: int) -> Sequence[str]:
    """``contents`` in the smallest form that reads back the same strings: 32 bytes each
    when every one is a lower-case hex SHA-256, none when every one is "", else as given."""
    if contents is None:
        return _Blank(size)
    if isinstance(contents, PackedHashes):
        return contents
    packed = bytearray()
    for c in contents:
        try:
            digest = bytes.fromhex(c) if isinstance(c, str) and len(c) == 64 else b""
        except ValueError:
            digest = b""
        if len(digest) != 32 or digest.hex() != c:
            break
        packed += digest
    else:
        return PackedHashes(bytes(packed)) if packed else list(contents)
    if not any(contents):
        return _Blank(len(contents))
    return list(contents)


class TenantCommitment:
    """C_{D_t}: an RFC 9162 Merkle root over the salted leaves :func:`index_leaf` of the
    tenant's documents (fixed-point embedding, id, content hash) in index order.

    ``vectors`` are the tenant's embeddings ``[N_t, d]`` held in memory, or an
    :class:`EmbeddingSource` they are read from (only the tree of their hashes is kept,
    unless the source is :attr:`~EmbeddingSource.resident`); ``ids`` one id per row;
    ``salt_key`` is K_idx (:func:`index_salt_key`); ``contents`` the hex SHA-256 of each
    document's text (default: none committed).
    ``opening(i)`` returns the vector bytes, its inclusion proof and its salt; the auditor
    checks it against the root with :func:`verify_opening`. :meth:`scores` and
    :meth:`scores_at` are the exact integer scores
    (:func:`~ragprivacy.audit.integer_scores`) of a fixed-point query against every
    committed row or chosen positions, the same numbers from either storage.

    What it holds: rows in memory as int32 fixed point (4 bytes an entry, the size of a
    float32 index; converted block by block, never as a whole float64 matrix), the tree
    packed (:class:`~ragprivacy.audit.merkle.PackedMerkleTree`, about 64 bytes a
    document), the content hashes as 32 bytes each, and the ids.
    """

    def __init__(
        self,
        tenant: str,
        vectors: FloatArray | EmbeddingSource,
        ids: Sequence[str],
        *,
        salt_key: bytes,
        contents: Sequence[str] | None = None,
    ) -> None:
        self.tenant = tenant
        self.ids = list(ids)
        self.contents: Sequence[str] = _packed_contents(contents, len(self.ids))
        if len(self.contents) != len(self.ids):
            raise ConfigError(f"Tenant {tenant!r}: give one content hash per document.")
        self._salt_key = salt_key
        self._source: EmbeddingSource | None = None
        self._fixed: np.ndarray | None = None
        if isinstance(vectors, EmbeddingSource):
            self.dim = int(vectors.dim)
            if vectors.resident:
                self._fixed = np.empty((int(vectors.size), self.dim), dtype="<i4")
            else:
                self._source = vectors
            blocks = (fixed_point(b) for b in vectors.chunks(SOURCE_CHUNK))
            self._tree = PackedMerkleTree(self._leaves(blocks, keep=self._fixed))
            if self._tree.size != vectors.size:
                raise DataError(
                    f"Tenant {tenant!r}: its store returned {self._tree.size} embeddings, "
                    f"not {vectors.size}; another writer changed it."
                )
        else:
            v = np.asarray(vectors)
            if v.ndim == 1:
                v = v[None, :]
            self.dim = int(v.shape[1]) if v.ndim == 2 else 0
            self._fixed = np.empty((v.shape[0], self.dim), dtype="<i4")
            blocks = (
                fixed_point(v[s : s + SOURCE_CHUNK]) for s in range(0, v.shape[0], SOURCE_CHUNK)
            )
            self._tree = PackedMerkleTree(self._leaves(blocks, keep=self._fixed))
        if self._tree.size != len(self.ids):
            raise ConfigError(f"Tenant {tenant!r}: give one id per embedding.")

    def _leaves(self, blocks: Iterator[np.ndarray], *, keep: np.ndarray | None) -> Iterator[bytes]:
        """The leaf data of every row of ``blocks`` (fixed point), in order; each block
        is also copied into ``keep`` at its positions when given."""
        start = 0
        for rows in blocks:
            end = start + rows.shape[0]
            if keep is not None and end > keep.shape[0]:
                raise DataError(
                    f"Tenant {self.tenant!r}: its store returned more than {keep.shape[0]} "
                    "embeddings; another writer changed it."
                )
            if end > len(self.ids):
                raise ConfigError(f"Tenant {self.tenant!r}: give one id per embedding.")
            if keep is not None:
                keep[start:end] = rows
            for i, row in enumerate(rows):
                yield self._leaf(start + i, row.tobytes())
            start = end

    def salt(self, position: int) -> bytes:
        """salt_i of leaf ``position``."""
        return leaf_salt(self._salt_key, self.tenant, position)

    def _leaf(self, position: int, row: bytes) -> bytes:
        return index_leaf(self.salt(position), row, self.ids[position], self.contents[position])

    @property
    def size(self) -> int:
        return self._tree.size

    @property
    def root(self) -> bytes:
        return self._tree.root()

    @property
    def fixed(self) -> np.ndarray:
        """Every committed row in fixed point ``[N_t, d]`` (read in full from a source:
        the auditor's export)."""
        if self._fixed is not None:
            return self._fixed
        assert self._source is not None
        blocks = [fixed_point(b) for b in self._source.chunks(SOURCE_CHUNK)]
        return np.concatenate(blocks) if blocks else np.zeros((0, self.dim), dtype="<i4")

    def fixed_at(self, positions: Sequence[int]) -> np.ndarray:
        """The fixed-point rows at ``positions`` (in the order asked)."""
        pos = [int(p) for p in positions]
        if any(not 0 <= p < self.size for p in pos):
            raise ConfigError(f"Positions must lie in [0, {self.size}); got {pos}.")
        if self._fixed is not None:
            return self._fixed[pos]
        assert self._source is not None
        if not pos:
            return np.zeros((0, self.dim), dtype="<i4")
        rows = fixed_point(self._source.vectors_at(pos))
        if rows.shape != (len(pos), self.dim):
            raise DataError(f"Tenant {self.tenant!r}: its store returned rows of another shape.")
        return rows

    def opening(self, position: int) -> tuple[bytes, list[bytes], bytes]:
        return self.openings([position])[0]

    def openings(self, positions: Sequence[int]) -> list[tuple[bytes, list[bytes], bytes]]:
        """:meth:`opening` of each position — (row bytes, inclusion proof, salt) — the rows
        read in one fetch from a source (each checked against its committed leaf: a store
        changed since the window opened is refused, never opened)."""
        rows = self.fixed_at(positions)
        out = []
        for p, row in zip(positions, rows):
            if leaf_hash(self._leaf(int(p), row.tobytes())) != self._tree.leaf_hash_at(int(p)):
                raise DataError(
                    f"Tenant {self.tenant!r}: the stored embedding at position {p} is not "
                    "the committed one; its store changed since the window opened."
                )
            out.append((row.tobytes(), self._tree.inclusion_proof(int(p)), self.salt(int(p))))
        return out

    def scores(self, fixed_query: np.ndarray, grid_bits: int) -> np.ndarray:
        """Exact integer scores (grid units, int64) of ``fixed_query`` against every
        committed row: the int32 rows in memory converted block by block
        (:func:`_block_scores`), or the source's rows streamed block by block (no more
        than :data:`SOURCE_CHUNK` rows held at once)."""
        from ragprivacy.audit.noise import integer_scores

        if self._source is None:
            assert self._fixed is not None
            return _block_scores(self._fixed, fixed_query, grid_bits)
        parts = [
            integer_scores(fixed_point(b), fixed_query, grid_bits)
            for b in self._source.chunks(SOURCE_CHUNK)
        ]
        out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        if out.shape[0] != self.size:
            raise DataError(
                f"Tenant {self.tenant!r}: its store returned {out.shape[0]} embeddings, not "
                f"the {self.size} committed; another writer changed it."
            )
        return out

    def scores_at(
        self, fixed_query: np.ndarray, positions: Sequence[int], grid_bits: int
    ) -> np.ndarray:
        """Exact integer scores of ``fixed_query`` at ``positions`` only (rows fetched by
        position from a source): what a selection that needs only some slots asks."""
        from ragprivacy.audit.noise import integer_scores

        return integer_scores(self.fixed_at(positions), fixed_query, grid_bits)


def verify_opening(
    root: bytes,
    size: int,
    position: int,
    vector_bytes: bytes,
    proof: Sequence[bytes],
    *,
    salt: bytes,
    doc_id: str,
    content: str,
) -> bool:
    """Check that the document (``vector_bytes``, ``doc_id``, ``content``) sits at
    ``position`` of the committed tenant index, under its leaf ``salt``."""
    leaf = index_leaf(salt, vector_bytes, doc_id, content)
    return verify_inclusion(leaf, position, size, proof, root)


#: how an audited query's noise is derived from its bits (:attr:`AuditPolicy.noise`)
NOISE_DERIVATIONS = ("full", "lazy")

#: the fields an account's committed policy may set (only lower: :meth:`AuditPolicy.for_account`)
POLICY_OVERRIDES = ("epsilon_acc", "delta_acc", "rate_limit", "sigma", "top_k")


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditPolicy:
    """The policy bound by C_policy (eq. 5.1) and the estimator's parameters.

    Attributes:
        epsilon_acc, delta_acc: the per-account budget.
        rate_limit: r, queries per account per window (the n of eq. 3.1).
        k_max: the declared coalition cap.
        delta_policy: the final joint failure probability; must exceed k_max·δ_acc.
        window_id, window_start, window_end: the audit window W (integer timestamps).
        top_k: K.
        sigma: σ on the scores (default: eq. 3.4 from the budget and r).
        theta: cosine threshold of the coalition estimator (§5.4).
        tau: its sliding window (same units as timestamps; None = the whole window).
        stamp_unit: records are stamped ``window_start`` plus a whole multiple of it
            (same units as timestamps): what anyone learns of when an account asked. The
            audit needs only that a record lies in W and that stamps do not decrease
            along the ledger (τ covers the whole window), so a deployment sets it as
            coarse as its operators can bear (the service: an hour).
        grid_bits: resolution 2^-grid_bits of the integer scores the noise is added to.
        score_range: the public interval every score is clipped to before noise (the
            retrieval rule of :meth:`mechanism`). Neighbouring
            relation: replace the document held by one slot of a tenant index (see
            docs/dp.md); clipping makes one score change by at most
            :attr:`sensitivity` = high − low whatever the embeddings, and σ (eq. 3.4) is
            calibrated with that Δ. Default :data:`~ragprivacy.dp.DEFAULT_SCORE_RANGE`
            (−1, 1), the cosine range, Δ = 2; ``(0.0, 1.0)`` gives the paper's Δ = 1
            (§2.2) honestly.
        noise: how z_q is derived from its bits (the wire format of A2):
            ``"lazy"`` (the default) draws only the slots whose noise can change the
            output where :func:`~ragprivacy.dp.lazy_suits` admits it, from public
            parameters (n, K, σ, the range), and every slot otherwise;
            ``"full"`` draws every slot, always (windows committed before the lazy
            derivation: their C_policy has no ``noise`` field and reads as ``"full"``).
    """

    epsilon_acc: float
    delta_acc: float
    rate_limit: int
    k_max: int
    delta_policy: float
    window_id: str
    window_start: int
    window_end: int
    top_k: int = 5
    sigma: float | None = None
    theta: float = 0.8
    tau: int | None = None
    stamp_unit: int = 1
    grid_bits: int = 20
    score_range: tuple[float, float] = DEFAULT_SCORE_RANGE
    noise: str = "lazy"

    def __post_init__(self) -> None:
        check_positive("epsilon_acc", self.epsilon_acc)
        for name in ("delta_acc", "delta_policy"):
            v = getattr(self, name)
            if not 0 < float(v) < 1:
                raise ConfigError(f"The '{name}' parameter must be in (0, 1); got {v!r}.")
        check_positive_int("rate_limit", self.rate_limit)
        check_positive_int("k_max", self.k_max)
        check_positive_int("top_k", self.top_k)
        if self.delta_policy <= self.k_max * self.delta_acc * (1 + 1e-12):
            raise ConfigError(
                f"Ill-formed audit policy: delta_policy must exceed k_max*delta_acc "
                f"(= {self.k_max * self.delta_acc:g}, §5.2); got {self.delta_policy!r}. Raise "
                "delta_policy or lower k_max."
            )
        if not isinstance(self.window_id, str) or not self.window_id:
            raise ConfigError(
                f"The 'window_id' must be a non-empty string; got {self.window_id!r}."
            )
        if int(self.window_end) <= int(self.window_start):
            raise ConfigError(
                f"The window must end after it starts; got [{self.window_start}, "
                f"{self.window_end}]."
            )
        if self.sigma is not None:
            check_positive("sigma", self.sigma)
        if not 0 < float(self.theta) <= 1:
            raise ConfigError(f"The 'theta' parameter must be in (0, 1]; got {self.theta!r}.")
        if self.tau is not None:
            check_positive_int("tau", self.tau)
        check_positive_int("stamp_unit", self.stamp_unit)
        if not 8 <= int(self.grid_bits) <= 30:
            raise ConfigError(f"The 'grid_bits' must be in [8, 30]; got {self.grid_bits!r}.")
        object.__setattr__(self, "score_range", check_score_range(self.score_range))
        if self.noise not in NOISE_DERIVATIONS:
            raise ConfigError(
                f"The 'noise' derivation must be one of {', '.join(NOISE_DERIVATIONS)}; got "
                f"{self.noise!r}."
            )

    @property
    def account(self) -> AccountPolicy:
        """The per-account policy this audit policy commits to (calibration eq. 3.4)."""
        return AccountPolicy(
            rate_limit=self.rate_limit,
            epsilon=self.epsilon_acc,
            delta=self.delta_acc,
            sigma=self.sigma,
            calibration="paper",
            score_range=self.score_range,
        )

    @property
    def sensitivity(self) -> float:
        """Δ of one score under replace-one-slot: high − low of ``score_range``.

        The clipped integer scores differ by at most ⌊hi·2^b⌋ − ⌈lo·2^b⌉ ≤ (hi − lo)·2^b
        grid units, so the Gaussian noise of σ is (Δ/σ)-GDP per query with this Δ.
        """
        return float(self.account.sensitivity)  # type: ignore[arg-type]  # resolved

    @property
    def noise_sigma(self) -> float:
        """σ on every score (eq. 3.4 with Δ = :attr:`sensitivity` unless set explicitly)."""
        return self.mechanism().sigma

    def stamp(self, ts: int) -> int:
        """``ts`` rounded down to the committed :attr:`stamp_unit` from the window's start."""
        start = int(self.window_start)
        return start + (int(ts) - start) // int(self.stamp_unit) * int(self.stamp_unit)

    def mechanism(self) -> GaussianNoisyTopK:
        """The account's noise-then-select this policy commits to: σ, K, the score range
        and the grid of 2^-grid_bits; its :meth:`~ragprivacy.dp.GaussianNoisyTopK.select_units`
        is the retrieval rule the provider runs and the verifier re-executes."""
        return self.account.mechanism(self.top_k, grid=Grid(self.grid_bits))

    def for_account(self, overrides: Mapping[str, Any] | None) -> AuditPolicy:
        """An account's own policy: this window policy with ``overrides`` (of
        :data:`POLICY_OVERRIDES`), which may only lower ε_acc, δ_acc and r — the window
        policy states the largest per-account budget, which ε_audit (eq. 5.2) is computed
        from. The one per-account policy shape of a window (the provider's and the
        verifier's)."""
        if not overrides:
            return self
        unknown = sorted(set(overrides) - set(POLICY_OVERRIDES))
        if unknown:
            raise ConfigError(
                f"An account policy may set {', '.join(POLICY_OVERRIDES)}; got "
                f"{', '.join(unknown)}."
            )
        mine = replace(self, **dict(overrides))
        if (
            mine.epsilon_acc > self.epsilon_acc * (1 + 1e-12)
            or mine.delta_acc > self.delta_acc * (1 + 1e-12)
            or mine.rate_limit > self.rate_limit
        ):
            raise ConfigError(
                "An account's epsilon_acc, delta_acc and rate_limit may not exceed the window "
                "policy's (the window states the largest per-account budget); raise the "
                "window's."
            )
        return mine

    def overrides_for(self, **values: Any) -> dict[str, Any]:
        """The committed overrides that give an account ``values`` (of
        :data:`POLICY_OVERRIDES`) under this window policy: those that differ from it, the
        inverse of :meth:`for_account`, which checks them (only lower)."""
        differ = {
            k: v for k, v in values.items() if k not in POLICY_OVERRIDES or getattr(self, k) != v
        }
        self.for_account(differ)
        return differ

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sigma"] = self.noise_sigma
        out["score_range"] = list(self.score_range)
        if self.noise == "full":  # the wire format of windows before the lazy derivation
            del out["noise"]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditPolicy:
        """The policy of :meth:`to_dict`; one without a ``noise`` field is a window's from
        before the lazy derivation, so its noise is ``"full"``."""
        return cls(**{"noise": "full", **dict(data)})

    def commitment(self) -> bytes:
        """C_policy = H(ε_acc ‖ δ_acc ‖ σ ‖ k_max ‖ δ_policy ‖ W ‖ estimator settings)."""
        d = self.to_dict()
        if not all(math.isfinite(v) for v in (d["sigma"], d["epsilon_acc"])):
            raise ConfigError("Policy values must be finite.")
        return commit_hash("C_policy", canonical_json(d))


def check_score_range(value: Any) -> tuple[float, float]:
    """A validated (low, high) score interval (:func:`~ragprivacy.dp.score_sensitivity`'s
    checks: finite, low < high), also within [-4, 4]."""
    # a committed policy always clips: no trusted-Δ mode (a None range) here
    resolved = score_sensitivity(value).score_range if value is not None else None
    if resolved is None:
        raise ConfigError("The 'score_range' parameter must be a pair (low, high); got None.")
    lo, hi = resolved
    if not -4.0 <= lo < hi <= 4.0:
        raise ConfigError(
            f"The 'score_range' parameter must lie within [-4, 4]; got {value!r}. "
            f"Use (-1.0, 1.0) for cosine scores or (0.0, 1.0) for the paper's Δ = 1."
        )
    return lo, hi


EMPTY_LEDGER = EMPTY_ROOT  # C_ledger,0 = H(⊥): the empty RFC 9162 tree
