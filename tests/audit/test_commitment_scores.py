"""A tenant commitment's exact scores without a float64 copy of its rows, its packed tree
and content hashes, and a resident source read once."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragprivacy.audit import (
    EmbeddingSource,
    MerkleLog,
    PackedHashes,
    TenantCommitment,
    verify_inclusion,
)
from ragprivacy.audit.commitments import (
    _SCORE_BLOCK_BYTES,
    FIXED_BITS,
    _block_scores,
    fixed_point,
    index_salt_key,
    verify_opening,
)
from ragprivacy.audit.merkle import PackedMerkleTree
from ragprivacy.errors import DataError

KEY = index_salt_key(bytes(range(32)))
EXTREME = 1 << 17  # |v_i| ≤ 4 at 2^-15: the largest coordinate a commitment takes


def _int64_scores(fixed: np.ndarray, q: np.ndarray, grid_bits: int) -> np.ndarray:
    """The plain int64 product, rounded to the grid as the audit rounds (half up)."""
    prod = fixed.astype(np.int64) @ q.astype(np.int64)
    shift = 2 * FIXED_BITS - grid_bits
    if shift <= 0:
        return prod << (-shift)
    return (prod + (1 << (shift - 1))) >> shift


def _query(d: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-EXTREME, EXTREME + 1, size=d).astype("<i4")


def _rows(n: int, d: int, seed: int) -> np.ndarray:
    """Random int32 fixed-point rows, a tenth of their entries at ±2^17 or 0."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(-EXTREME, EXTREME + 1, size=(n, d), dtype=np.int64)
    pick = rng.random((n, d)) < 0.1
    rows[pick] = rng.choice([-EXTREME, EXTREME, 0], size=int(pick.sum()))
    if n:
        rows[0] = EXTREME  # a row of the largest products, and its negative
        rows[-1] = -EXTREME
    return rows.astype("<i4")


@pytest.mark.parametrize("grid_bits", [8, 20, 30])
@pytest.mark.parametrize("n", [0, 1, 255, 256, 257, 3 * 256 + 5, 2000])
def test_block_scores_are_the_int64_product_bit_for_bit(n: int, grid_bits: int) -> None:
    d = 384  # 256 rows a block
    assert _SCORE_BLOCK_BYTES // (8 * d) == 256
    fixed = _rows(n, d, n)
    for q in (_query(d, 10_000 + n), np.full(d, EXTREME, "<i4"), np.full(d, -EXTREME, "<i4")):
        got = _block_scores(fixed, q, grid_bits)
        assert got.dtype == np.int64 and got.shape == (n,)
        assert np.array_equal(got, _int64_scores(fixed, q, grid_bits))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 700),
    d=st.integers(1, 1100),
    grid_bits=st.integers(8, 30),
    seed=st.integers(0, 2**32 - 1),
)
def test_block_scores_match_for_any_shape(n: int, d: int, grid_bits: int, seed: int) -> None:
    fixed = _rows(n, d, seed)
    q = _query(d, seed + 1)
    assert np.array_equal(_block_scores(fixed, q, grid_bits), _int64_scores(fixed, q, grid_bits))


def test_a_commitment_scores_every_row_exactly_and_keeps_no_float_copy() -> None:
    n, d = 3000, 384
    fixed = _rows(n, d, 1)
    commitment = TenantCommitment(
        "t", fixed / (1 << FIXED_BITS), [f"d{i}" for i in range(n)], salt_key=KEY
    )
    assert np.array_equal(commitment.fixed, fixed) and commitment.fixed.dtype == np.int32
    q = _query(d, 2)
    tracemalloc.start()
    try:
        scores = commitment.scores(q, 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(scores, _int64_scores(fixed, q, 20))
    # one block's buffer and the scores, never the rows as float64 (n·d·8 bytes)
    assert peak < _SCORE_BLOCK_BYTES + 16 * n + 100_000 < n * d * 8 // 4
    assert not any(
        isinstance(v, np.ndarray) and v.dtype == np.float64 for v in vars(commitment).values()
    )
    assert np.array_equal(commitment.scores_at(q, [7, 0, 7], 20), scores[[7, 0, 7]])


class _Resident(EmbeddingSource):
    """Float32 rows read once, block by block, by the commitment."""

    resident = True

    def __init__(self, rows: np.ndarray, size: int | None = None) -> None:
        self.rows = rows
        self.size = len(rows) if size is None else size
        self.dim = rows.shape[1]
        self.blocks = 0

    def vectors_at(self, positions: Sequence[int]) -> np.ndarray:
        raise AssertionError("a resident source is never read by position")

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        for s in range(0, len(self.rows), rows):
            self.blocks += 1
            yield self.rows[s : s + rows]


def test_a_resident_source_is_read_once_and_kept_in_fixed_point() -> None:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((2500, 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    ids = [f"d{i}" for i in range(2500)]
    texts = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(2500)]
    source = _Resident(rows)
    held = TenantCommitment("t", source, ids, salt_key=KEY, contents=texts)
    plain = TenantCommitment("t", rows, ids, salt_key=KEY, contents=texts)
    assert source.blocks == 3  # 1024-row blocks, read when the commitment was made
    assert held.root == plain.root and np.array_equal(held.fixed, fixed_point(rows))
    q = fixed_point(rows[5])[0]
    assert np.array_equal(held.scores(q, 20), plain.scores(q, 20))
    vb, proof, salt = held.opening(2400)
    assert verify_opening(
        held.root, held.size, 2400, vb, proof, salt=salt, doc_id="d2400", content=texts[2400]
    )
    assert source.blocks == 3
    with pytest.raises(DataError, match="2400 embeddings, not 2500"):
        TenantCommitment("t", _Resident(rows[:2400], size=2500), ids, salt_key=KEY)
    with pytest.raises(DataError, match="more than 2400"):
        TenantCommitment("t", _Resident(rows, size=2400), ids[:2400], salt_key=KEY)


def test_content_hashes_read_back_as_given() -> None:
    rows = np.eye(4)
    ids = ["a", "b", "c", "e"]
    digests = [hashlib.sha256(x.encode()).hexdigest() for x in ids]
    for contents in (digests, None, [""] * 4, ["", *digests[1:]], [d.upper() for d in digests]):
        c = TenantCommitment("t", rows, ids, salt_key=KEY, contents=contents)
        want = list(contents) if contents is not None else [""] * 4
        assert list(c.contents) == want and c.contents[-1] == want[-1]
        assert c.contents[1:3] == want[1:3] and len(c.contents) == 4
        with pytest.raises(IndexError):
            c.contents[4]
    packed = TenantCommitment("t", rows, ids, salt_key=KEY, contents=digests)
    plain = TenantCommitment("t", rows, ids, salt_key=KEY, contents=[d.upper() for d in digests])
    assert packed.root != plain.root  # the strings are committed as given
    # raw digests handed over packed (a store hashing its texts) commit the same leaves
    raw = PackedHashes(b"".join(bytes.fromhex(d) for d in digests))
    given_packed = TenantCommitment("t", rows, ids, salt_key=KEY, contents=raw)
    assert given_packed.contents is raw and list(raw) == digests
    assert given_packed.root == packed.root


@settings(max_examples=60, deadline=None)
@given(size=st.integers(0, 70))
def test_the_packed_tree_is_the_logs_tree(size: int) -> None:
    leaves = [f"leaf {i}".encode() for i in range(size)]
    tree = PackedMerkleTree(iter(leaves))
    log = MerkleLog()
    log.append_many(leaves)
    assert tree.size == len(tree) == size and tree.root() == log.root()
    assert tree.nbytes <= 2 * 32 * size
    for i in range(size):
        proof = tree.inclusion_proof(i)
        assert proof == log.inclusion_proof(i) and tree.leaf_hash_at(i) == log.leaf_hash_at(i)
        assert verify_inclusion(leaves[i], i, size, proof, tree.root())
