"""MerkleLog against the RFC 6962 / RFC 9162 test vectors, and tamper properties."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragprivacy.audit import MerkleLog, verify_consistency, verify_inclusion
from ragprivacy.audit.merkle import EMPTY_ROOT, leaf_hash, root_from_leaf_hashes
from ragprivacy.errors import ConfigError, LogSealedError, VerificationError

# The eight leaves and tree heads of the Certificate Transparency reference tests
# (RFC 6962 hashing, unchanged in RFC 9162).
LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = {
    1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    4: "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    5: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    6: "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}
INCLUSION = [  # (leaf index, tree size, audit path)
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
]
CONSISTENCY = [  # (old size, new size, proof)
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]  # fmt: skip


@pytest.fixture
def log8() -> MerkleLog:
    log = MerkleLog()
    for d in LEAVES:
        log.append(d)
    return log


def test_empty_root_is_sha256_of_nothing() -> None:
    assert EMPTY_ROOT.hex() == hashlib.sha256(b"").hexdigest()
    assert MerkleLog().root() == EMPTY_ROOT


@pytest.mark.parametrize("size", sorted(ROOTS))
def test_tree_heads_match_vectors(log8: MerkleLog, size: int) -> None:
    assert log8.root(size).hex() == ROOTS[size]
    assert root_from_leaf_hashes([leaf_hash(d) for d in LEAVES[:size]]).hex() == ROOTS[size]


@pytest.mark.parametrize(("index", "size", "path"), INCLUSION)
def test_inclusion_vectors(log8: MerkleLog, index: int, size: int, path: list[str]) -> None:
    proof = log8.inclusion_proof(index, size)
    assert [p.hex() for p in proof] == path
    assert verify_inclusion(LEAVES[index], index, size, proof, bytes.fromhex(ROOTS[size]))


@pytest.mark.parametrize(("old", "new", "path"), CONSISTENCY)
def test_consistency_vectors(log8: MerkleLog, old: int, new: int, path: list[str]) -> None:
    proof = log8.consistency_proof(old, new)
    assert [p.hex() for p in proof] == path
    assert verify_consistency(old, new, bytes.fromhex(ROOTS[old]), bytes.fromhex(ROOTS[new]), proof)


def test_every_proof_of_small_trees_verifies(log8: MerkleLog) -> None:
    for n in range(1, 9):
        for i in range(n):
            assert verify_inclusion(LEAVES[i], i, n, log8.inclusion_proof(i, n), log8.root(n))
    for n in range(9):
        for m in range(n + 1):
            proof = log8.consistency_proof(m, n)
            assert verify_consistency(m, n, log8.root(m), log8.root(n), proof)


def test_bad_arguments(log8: MerkleLog) -> None:
    with pytest.raises(ConfigError):
        log8.root(9)
    with pytest.raises(ConfigError):
        log8.inclusion_proof(8, 8)
    with pytest.raises(ConfigError):
        log8.consistency_proof(5, 3)
    assert not verify_inclusion(b"x", 0, 0, [], EMPTY_ROOT)
    assert not verify_inclusion(b"x", 0, 1, [b"short"], EMPTY_ROOT)
    assert not verify_consistency(3, 2, EMPTY_ROOT, EMPTY_ROOT, [])
    assert not verify_consistency(2, 5, log8.root(2), log8.root(5), [])


@settings(max_examples=60, deadline=None)
@given(
    leaves=st.lists(st.binary(max_size=12), min_size=1, max_size=40),
    data=st.data(),
)
def test_tampered_inclusion_proofs_fail(leaves: list[bytes], data: st.DataObject) -> None:
    log = MerkleLog()
    log.append_many(leaves)
    n = len(leaves)
    size = data.draw(st.integers(1, n))
    i = data.draw(st.integers(0, size - 1))
    proof, root = log.inclusion_proof(i, size), log.root(size)
    assert verify_inclusion(leaves[i], i, size, proof, root)
    assert not verify_inclusion(leaves[i] + b"!", i, size, proof, root)
    if proof:
        j = data.draw(st.integers(0, len(proof) - 1))
        bad = list(proof)
        bad[j] = bytes([bad[j][0] ^ 1]) + bad[j][1:]
        assert not verify_inclusion(leaves[i], i, size, bad, root)
        assert not verify_inclusion(leaves[i], i, size, proof[:-1], root)
    if size > 1 and leaves[i] != leaves[(i + 1) % size]:
        assert not verify_inclusion(leaves[i], (i + 1) % size, size, proof, root)


@settings(max_examples=60, deadline=None)
@given(
    leaves=st.lists(st.binary(max_size=12), min_size=2, max_size=40),
    data=st.data(),
)
def test_tampered_consistency_proofs_fail(leaves: list[bytes], data: st.DataObject) -> None:
    log = MerkleLog()
    log.append_many(leaves)
    new = data.draw(st.integers(2, len(leaves)))
    old = data.draw(st.integers(1, new - 1))
    proof = log.consistency_proof(old, new)
    old_root, new_root = log.root(old), log.root(new)
    assert verify_consistency(old, new, old_root, new_root, proof)
    j = data.draw(st.integers(0, len(proof) - 1))
    bad = list(proof)
    bad[j] = bytes([bad[j][0] ^ 0x80]) + bad[j][1:]
    assert not verify_consistency(old, new, old_root, new_root, bad)
    # A log that rewrote history: change one old leaf, keep the new size.
    forged = MerkleLog()
    forged.append_many([b"forged", *leaves[1:]])
    assert not verify_consistency(old, new, old_root, forged.root(new), proof)
    assert not verify_consistency(
        old, new, old_root, forged.root(new), forged.consistency_proof(old, new)
    )


def test_sqlite_log_is_durable_and_detects_edits(tmp_path) -> None:
    path = tmp_path / "ledger.sqlite"
    with MerkleLog(path) as log:
        log.append_many(LEAVES[:5])
        log.append(LEAVES[5])
        root6 = log.root()
    with MerkleLog(path) as again:
        assert again.size == 6 and again.root() == root6
        again.append_many(LEAVES[6:])
        assert again.root().hex() == ROOTS[8]
        again.verify_storage()
        assert again.leaf(3) == LEAVES[3]
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("UPDATE leaves SET data = ? WHERE idx = 2", (b"changed",))
    db.commit()
    db.close()
    with MerkleLog(path) as damaged, pytest.raises(VerificationError, match="leaf 2"):
        damaged.verify_storage()


def test_two_writers_on_one_file_share_one_log(tmp_path) -> None:
    """Two processes' logs on one SQLite file (as two service workers): each append first
    loads the other's leaves, so indices never collide and both see one tree."""
    path = tmp_path / "ledger.sqlite"
    a, b = MerkleLog(path), MerkleLog(path)
    got = []
    for i in range(10):
        got.append((a if i % 2 else b).append(f"r{i}".encode()))
    assert got == list(range(10))
    assert a.refresh() == b.refresh() == 10
    assert (
        a.root()
        == b.root()
        == root_from_leaf_hashes([leaf_hash(f"r{i}".encode()) for i in range(10)])
    )

    def refuse(log: MerkleLog) -> None:
        if log.size >= 10:
            raise ValueError("full")

    with pytest.raises(ValueError, match="full"):
        a.append(b"late", guard=refuse)
    assert MerkleLog(path).size == 10  # the refused append wrote nothing
    a.close()
    b.close()


def test_a_sealed_log_refuses_appends_from_every_writer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ragprivacy.audit import LogSealedError

    path = tmp_path / "ledger.sqlite"
    with MerkleLog(path) as writer, MerkleLog(path) as closer:
        writer.append(b"r0")
        writer.append(b"r1")
        assert closer.seal() == 2 and closer.seal() == 2  # sealing twice: the same size
        assert writer.sealed
        with pytest.raises(LogSealedError, match="sealed"):
            writer.append(b"r2")  # another writer, another connection
        assert writer.size == 2 and writer.root() == closer.root()
    with MerkleLog(path) as reopened:
        assert reopened.size == 2 and reopened.sealed
        with pytest.raises(LogSealedError):
            reopened.append_many([b"r2", b"r3"])
    with pytest.raises(ConfigError, match="durable"):
        MerkleLog().seal()


def test_a_log_opened_while_another_process_appends_stores_only_true_nodes(
    tmp_path: Path,
) -> None:
    """A log reads its leaves, then its nodes, in two statements: another process's
    append in between left nodes above the leaves read, in the wrong places, and the next
    append stored a node that does not match its children (seen with 3 PostgreSQL
    replicas × 20 threads). The other process is played here by a second log on the same
    file, appending between the two reads."""
    from ragprivacy.audit import SqliteLedgerStorage

    path = tmp_path / "ledger.sqlite"
    writer = MerkleLog(path)
    for i in range(32):
        writer.append(f"a{i}".encode())
    storage = SqliteLedgerStorage(path)
    read_nodes = storage.nodes

    def nodes_after_another_append() -> list[tuple[int, int, bytes]]:
        storage.nodes = read_nodes  # type: ignore[method-assign]  # once, when opened
        for i in range(4):
            writer.append(f"b{i}".encode())
        return read_nodes()

    storage.nodes = nodes_after_another_append  # type: ignore[method-assign]
    reader = MerkleLog(storage=storage)
    assert reader.size == 32
    for i in range(8):  # catches up with b0..b3, then appends at 36..43
        reader.append(f"c{i}".encode())
    reader.verify_storage()
    assert reader.size == 44 and reader.root() == MerkleLog(path).root()
    writer.close()
    reader.close()


@pytest.mark.parametrize("group_commit", [True, False])
def test_a_closed_durable_log_refuses_appends(tmp_path: Path, group_commit: bool) -> None:
    """An append through a durable log that was closed (a window's ledger closed while a
    request still held it) must fail, not be made in memory: the in-memory copy would tell
    it a position that is never written and that the next writer is told too."""
    path = tmp_path / "ledger.sqlite"
    log = MerkleLog(path, group_commit=group_commit)
    assert log.append(b"a") == 0
    log.close()
    with pytest.raises(LogSealedError, match="closed"):
        log.append(b"b")
    with pytest.raises(LogSealedError, match="closed"):
        log.submit([b"c"]).result()
    assert log.size == 1
    other = MerkleLog(path)
    assert other.append(b"d") == 1 and other.size == 2
    other.close()
    with pytest.raises(LogSealedError, match="closed"):
        log.seal()
