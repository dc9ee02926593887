"""An append-only Merkle log compatible with RFC 9162 (Certificate Transparency v2).

The collusion paper's query ledger (§5.3, primitive G2) is a Merkle tree over the query
records r_q; the verifier checks that the window's final root is an append-only
extension of the root published at window open (§5.5, check 3) and that every honest
receipt is included at its position. This module follows RFC 9162 §2.1 exactly (as RFC
6962 §2.1 did), so any transparency-log verifier can check its proofs:

* leaf hash ``SHA-256(0x00 ‖ d)``, node hash ``SHA-256(0x01 ‖ left ‖ right)``;
* the tree over ``n`` leaves splits at ``k``, the largest power of two smaller than ``n``;
* the empty tree's root is ``SHA-256()``;
* inclusion proofs (RFC 9162 §2.1.3) and consistency proofs (§2.1.4) are lists of 32-byte
  hashes, checked by :func:`verify_inclusion` and :func:`verify_consistency` with the
  RFC's verification algorithms (§2.1.3.2, §2.1.4.2).

:class:`MerkleLog` keeps every complete, aligned subtree hash, so appending costs
O(log n) hashes and a root or a proof costs O(log n) node lookups. With a ``path`` it
stores leaves and nodes in SQLite (WAL, ``synchronous=FULL``: a committed append survives
a crash or power loss) and reloads them when reopened; with a ``storage`` it keeps them
where that :class:`ragprivacy.audit.LedgerStorage` says (e.g. PostgreSQL rows that
several service replicas share, their appends ordered by the window's row lock).

Durable appends are group-committed: the threads appending to one log at the same time
share one SQLite transaction, so one sync of the disk (a leader/follower scheme, see
:class:`ragprivacy._sqlite.GroupCommit`). Each append's guard still runs alone, in
queue order, on the log caught up with every earlier append of its batch, and may
refuse that append without touching the others; an append returns only once the
transaction that holds it committed, and a failed commit fails every append of it
(nothing of theirs is written, the in-memory tree is rolled back). Readers see the
committed leaves only (:attr:`MerkleLog.size`): a batch in flight is visible to its own
guards alone, so no root, proof or tree head ever covers a leaf that may be rolled back,
and reads of the committed prefix do not wait for a commit in flight.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from pathlib import Path

from ragprivacy._sqlite import CommitTicket, GroupCommit
from ragprivacy.audit.ledger_store import LedgerStorage, SqliteLedgerStorage
from ragprivacy.errors import ConfigError, DataError, LogSealedError, VerificationError

__all__ = [
    "EMPTY_ROOT",
    "LogSealedError",
    "MerkleLog",
    "PackedMerkleTree",
    "leaf_hash",
    "node_hash",
    "root_from_leaf_hashes",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    """RFC 9162 leaf hash: SHA-256(0x00 ‖ data)."""
    return hashlib.sha256(b"\x00" + bytes(data)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node hash: SHA-256(0x01 ‖ left ‖ right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (n ≥ 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def _subtree_hash(node: Callable[[int, int], bytes], start: int, end: int) -> bytes:
    """MTH of leaves [start, end) from the stored complete subtrees ``node(level, i)``
    (the hash over leaves [i·2^level, (i+1)·2^level)); ``start`` is aligned to every
    split below it."""
    n = end - start
    if n & (n - 1) == 0:  # complete subtree: stored
        level = n.bit_length() - 1
        return node(level, start >> level)
    k = _split(n)
    return node_hash(_subtree_hash(node, start, start + k), _subtree_hash(node, start + k, end))


def _audit_path(node: Callable[[int, int], bytes], m: int, start: int, end: int) -> list[bytes]:
    """PATH(m, D[start:end]) of RFC 9162 §2.1.3.1 from the stored subtrees ``node``."""
    n = end - start
    if n == 1:
        return []
    k = _split(n)
    if m < k:
        return [*_audit_path(node, m, start, start + k), _subtree_hash(node, start + k, end)]
    return [*_audit_path(node, m - k, start + k, end), _subtree_hash(node, start, start + k)]


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """MTH of RFC 9162 §2.1.1 over leaf hashes (a direct, independent recursion)."""
    n = len(hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[0]
    k = _split(n)
    return node_hash(root_from_leaf_hashes(hashes[:k]), root_from_leaf_hashes(hashes[k:]))


def _check_hash(name: str, value: bytes) -> bytes:
    if not isinstance(value, bytes | bytearray) or len(value) != HASH_SIZE:
        raise ConfigError(
            f"The '{name}' parameter must be a 32-byte SHA-256 hash; got "
            f"{type(value).__name__} of length {len(value) if hasattr(value, '__len__') else '?'}."
        )
    return bytes(value)


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """Check an inclusion proof with the algorithm of RFC 9162 §2.1.3.2.

    Args:
        leaf: the leaf's *data* (it is hashed with :func:`leaf_hash` here).
        index: the leaf's position (0-based).
        size: the tree size the proof and ``root`` are for.
        proof: the audit path, a list of 32-byte hashes.
        root: the tree head the leaf should be included in.

    Returns ``True`` only if the proof is valid; malformed input gives ``False``.
    """
    try:
        path = [_check_hash("proof", p) for p in proof]
        root = _check_hash("root", root)
    except ConfigError:
        return False
    if not (isinstance(index, int) and isinstance(size, int)) or index < 0 or index >= size:
        return False
    fn, sn = index, size - 1
    r = leaf_hash(leaf)
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Check a consistency proof with the algorithm of RFC 9162 §2.1.4.2.

    ``old_size == new_size`` needs an empty proof and equal roots; ``old_size == 0`` an
    empty proof (every tree extends the empty one). Malformed input gives ``False``.
    """
    try:
        path = [_check_hash("proof", p) for p in proof]
        old_root = _check_hash("old_root", old_root)
        new_root = _check_hash("new_root", new_root)
    except ConfigError:
        return False
    if not (isinstance(old_size, int) and isinstance(new_size, int)):
        return False
    if old_size < 0 or new_size < old_size:
        return False
    if old_size == new_size:
        return not path and old_root == new_root
    if old_size == 0:
        return not path and old_root == EMPTY_ROOT
    if not path:
        return False
    if old_size & (old_size - 1) == 0:  # an exact power of two: the old root is a node
        path = [old_root, *path]
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0


Guard = Callable[["MerkleLog"], None]
_Append = tuple[list[bytes], Guard | None]


class MerkleLog:
    """An append-only RFC 9162 Merkle log, in memory or durable in SQLite.

    ``levels[h][i]`` holds the hash of the complete subtree over leaves
    [i·2^h, (i+1)·2^h); appending a leaf completes at most ⌈log₂ n⌉ of them.

    >>> log = MerkleLog()
    >>> [log.append(d) for d in (b"a", b"b", b"c")]
    [0, 1, 2]
    >>> verify_inclusion(b"b", 1, 3, log.inclusion_proof(1, 3), log.root(3))
    True
    >>> verify_consistency(2, 3, log.root(2), log.root(), log.consistency_proof(2, 3))
    True

    Args:
        path: the SQLite file (default: in memory).
        storage: where the log is kept instead of ``path`` (e.g. a
            :class:`ragprivacy.audit.PostgresLedgerStorage`); the log closes it.
        group_commit: share one transaction among concurrent appends (default). ``False``
            commits every append alone (one sync each; kept as the benchmark's baseline).
        max_batch: the most appends one group commit takes.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        storage: LedgerStorage | None = None,
        group_commit: bool = True,
        max_batch: int = 256,
    ) -> None:
        self._lock = threading.RLock()  # appends, commits and catch-ups (not reads)
        self._levels: list[list[bytes]] = [[]]
        self._data: list[bytes] = []
        self._durable = 0  # leaves committed (the prefix readers see)
        self._leader: int | None = None  # the thread running a batch's guards
        self._db: LedgerStorage | None = None
        self._closed = False  # a durable log that was closed: it appends nothing any more
        self._before_commit: Callable[[], None] | None = None  # test hook (failure injection)
        self._group: GroupCommit[_Append, list[int]] | None = None
        if path is not None and storage is not None:
            raise ConfigError("Give a Merkle log a path or a storage, not both.")
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            storage = SqliteLedgerStorage(self.path)
        self._name = str(self.path) if storage is None else storage.name
        if storage is not None:
            self._open(storage)
            if group_commit:
                self._group = GroupCommit(self._commit_batch, max_batch=max_batch)

    # ------------------------------------------------------------------ storage
    def _open(self, storage: LedgerStorage) -> None:
        self._db = storage
        for expected, (idx, data, h) in enumerate(storage.leaves_from(0)):
            if idx != expected:
                raise DataError(
                    f"The Merkle log at {self._name} has a gap at leaf {expected} (found "
                    f"{idx}); the store is damaged — restore it from a backup."
                )
            self._data.append(data)
            self._levels[0].append(h)
        for level, idx, h in storage.nodes():
            while len(self._levels) <= level:
                self._levels.append([])
            if idx != len(self._levels[level]):
                raise DataError(
                    f"The Merkle log at {self._name} has a gap at node ({level}, {idx}); the "
                    "store is damaged — restore it from a backup."
                )
            self._levels[level].append(h)
        # The nodes were read after the leaves, in another statement: another process may
        # have appended in between, and its nodes above the leaves read here must not be
        # kept (the next catch-up recomputes them from their leaves, in their places).
        self._rollback(len(self._data))
        self._durable = len(self._data)

    def close(self) -> None:
        """Close the storage's connection (in-memory logs: no-op). A closed durable log
        refuses appends and seals (:class:`~ragprivacy.errors.LogSealedError`, as a sealed
        one does: nothing was written): made in memory, an append would be told a position
        that is never written and that the next writer is told too. (The service serves a
        request whose window's ledger closed meanwhile as one whose window closed.)"""
        if self._db is not None:
            self._closed = True
            self._db.close()
            self._db = None

    def _refuse_closed(self) -> None:
        if self._closed:
            raise LogSealedError(
                f"The Merkle log {self._name} is closed: nothing was written; reopen it."
            )

    def __enter__(self) -> MerkleLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ appends
    def _push(self, data: bytes, new_nodes: list[tuple[int, int, bytes]]) -> int:
        index = len(self._levels[0])
        h = leaf_hash(data)
        self._data.append(data)
        self._levels[0].append(h)
        level, i = 0, index
        while i & 1:  # this leaf completes a subtree at the next level
            left = self._levels[level][i - 1]
            h = node_hash(left, h)
            level += 1
            i >>= 1
            if len(self._levels) <= level:
                self._levels.append([])
            self._levels[level].append(h)
            new_nodes.append((level, i, h))
        return index

    def _rollback(self, count: int) -> None:
        del self._data[count:]
        for level, nodes in enumerate(self._levels):
            del nodes[count >> level :]

    def append(self, data: bytes, *, guard: Guard | None = None) -> int:
        """Append one leaf and return its index (durable once this returns)."""
        return self.append_many([data], guard=guard)[0]

    def append_many(self, items: Iterable[bytes], *, guard: Guard | None = None) -> list[int]:
        """Append several leaves in one transaction; returns their indices (durable once
        this returns).

        Several processes may append to one file: each transaction holds the file's write
        lock, first loads what the others appended, then adds its leaves. ``guard(log)``
        runs inside that step, on the caught-up log (with the appends committed in the
        same group before it), and may raise to refuse the append (nothing of it is
        written): a check-then-append that no other writer can interleave.
        """
        return self.submit(items, guard=guard).result()

    def submit(
        self, items: Iterable[bytes], *, guard: Guard | None = None
    ) -> CommitTicket[_Append, list[int]]:
        """Queue an append without waiting; ``.result()`` waits until it is durable and
        returns its indices (or raises what refused it). Appends submitted one after
        another (by one thread, or under one lock) land in that order. Without group
        commit (or in memory) the append is made here and the ticket holds its outcome."""
        datas = []
        for d in items:
            if not isinstance(d, bytes | bytearray | memoryview):
                raise ConfigError(
                    f"A Merkle log leaf must be bytes; got {type(d).__name__}. Encode it first."
                )
            datas.append(bytes(d))
        if self._group is not None and self._db is not None:
            return self._group.submit((datas, guard))
        ticket = GroupCommit(self._append_now).submit((datas, guard))
        with suppress(Exception):
            ticket.result()  # made now: the ticket keeps the outcome (or the error)
        return ticket

    def _append_now(self, batch: list[_Append]) -> list[list[int] | BaseException]:
        """One append, alone in its own transaction (or in memory)."""
        with self._lock:
            if self._db is not None or self._closed:
                return self._commit_batch(batch)
            out: list[list[int] | BaseException] = []
            for datas, guard in batch:
                try:
                    if guard is not None:
                        self._leader = threading.get_ident()
                        guard(self)
                except Exception as exc:
                    out.append(exc)
                    continue
                finally:
                    self._leader = None
                out.append([self._push(d, []) for d in datas])
                self._durable = len(self._data)
            return out

    def _commit_batch(self, batch: list[_Append]) -> list[list[int] | BaseException]:
        """Write a batch of appends in one transaction: each guard in turn on the log as
        it stands (caught up, plus the batch's earlier appends); an append its guard
        refuses (or that finds the log sealed) gets that error and writes nothing."""
        with self._lock:
            if self._db is None:
                raise LogSealedError(
                    f"The Merkle log {self._name} is closed: nothing was written; reopen it."
                )
            self._db.begin()  # one writer at a time, any process
            start = len(self._data)
            self._leader = threading.get_ident()  # its guards see the batch so far
            try:
                self._catch_up()
                start = len(self._data)
                sealed = self._db.sealed_size() is not None
                new_nodes: list[tuple[int, int, bytes]] = []
                out: list[list[int] | BaseException] = []
                for datas, guard in batch:
                    if sealed:
                        out.append(
                            LogSealedError(
                                f"The log {self._name} is sealed (its window closed); nothing "
                                "was appended."
                            )
                        )
                        continue
                    try:
                        if guard is not None:
                            guard(self)
                    except Exception as exc:  # refuses this append alone
                        out.append(exc)
                        continue
                    out.append([self._push(d, new_nodes) for d in datas])
                if len(self._data) == start:
                    self._db.rollback()
                    return out
                self._db.insert(
                    [(i, self._data[i], self._levels[0][i]) for i in range(start, len(self._data))],
                    new_nodes,
                )
                if self._before_commit is not None:
                    self._before_commit()
                self._db.commit()
                self._durable = len(self._data)  # before any of the batch's writers returns
            except BaseException:
                self._db.rollback()
                self._rollback(start)
                raise
            finally:
                self._leader = None
            return out

    def seal(self) -> int:
        """Refuse every later append, by any process, and return the final size.

        Taken under the file's write lock, after catching up: an append that was waiting
        for the lock finds the log sealed and writes nothing. Sealing twice returns the
        same size. (An in-memory log cannot be sealed.)"""
        self._refuse_closed()
        if self._db is None:
            raise ConfigError("Only a durable log can be sealed.")
        with self._lock:
            self._db.begin()
            try:
                self._catch_up()
                if self._db.sealed_size() is None:
                    self._db.set_sealed(len(self._data))
                self._db.commit()
            except BaseException:
                self._db.rollback()
                raise
            return len(self._data)

    @property
    def sealed(self) -> bool:
        """Whether the log was sealed (by this or another process)."""
        if self._db is None:
            return False
        with self._lock:
            return self._db.sealed_size() is not None

    def _catch_up(self) -> None:
        """Load the leaves another process appended to the same file since we last looked
        (their nodes are recomputed; each stored leaf hash is checked)."""
        assert self._db is not None
        for idx, data, h in self._db.leaves_from(len(self._data)):
            if idx != len(self._data) or leaf_hash(data) != h:
                raise DataError(
                    f"The Merkle log at {self._name} is damaged at leaf {idx}; restore it "
                    "from a backup."
                )
            self._push(data, [])
        self._durable = len(self._data)

    def refresh(self, *, wait: bool = True) -> int:
        """Catch up with appends made by other processes; returns the new size.

        ``wait=False`` skips the catch-up while this object commits a batch (that commit
        catches up anyway) instead of waiting for its sync."""
        if not self._lock.acquire(blocking=wait):
            return self._durable
        try:
            if self._db is not None:
                self._catch_up()
            return self._durable
        finally:
            self._lock.release()

    # ------------------------------------------------------------------ reads
    @property
    def size(self) -> int:
        """The number of committed leaves; inside a guard, also the earlier appends of
        the guard's batch (the log the guard decides on)."""
        if self._leader is not None and self._leader == threading.get_ident():
            return len(self._data)
        return self._durable

    @property
    def durable_size(self) -> int:
        """The number of committed leaves, also inside a guard."""
        return self._durable

    def __len__(self) -> int:
        return self.size

    def leaf(self, index: int) -> bytes:
        """The data of leaf ``index``."""
        self._check_index(index, self.size)
        return self._data[index]

    def leaf_hash_at(self, index: int) -> bytes:
        """The stored hash of leaf ``index``."""
        self._check_index(index, self.size)
        return self._levels[0][index]

    def _check_size(self, size: int | None) -> int:
        n = self.size if size is None else size
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.size:
            raise ConfigError(
                f"The 'size' parameter must be an integer in [0, {self.size}] (the log's "
                f"size); got {size!r}."
            )
        return n

    @staticmethod
    def _check_index(index: int, size: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < size:
            raise ConfigError(
                f"The 'index' parameter must be an integer in [0, {size}); got {index!r}."
            )

    def _subtree(self, start: int, end: int) -> bytes:
        """MTH of leaves [start, end); ``start`` is aligned to every split below it."""
        return _subtree_hash(self._node, start, end)

    def _node(self, level: int, index: int) -> bytes:
        return self._levels[level][index]

    def root(self, size: int | None = None) -> bytes:
        """The root (tree head) over the first ``size`` leaves (default: all).

        Reads of the committed prefix take no lock (appends only add to the stored
        levels, and a rollback removes only uncommitted entries), so they never wait for
        a commit in flight."""
        n = self._check_size(size)
        return EMPTY_ROOT if n == 0 else self._subtree(0, n)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The RFC 9162 audit path of leaf ``index`` in the tree of ``size`` leaves."""
        n = self._check_size(size)
        self._check_index(index, n)
        return self._path(index, 0, n)

    def _path(self, m: int, start: int, end: int) -> list[bytes]:
        return _audit_path(self._node, m, start, end)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """The RFC 9162 consistency proof between tree sizes ``old_size`` ≤ ``new_size``."""
        n = self._check_size(new_size)
        m = self._check_size(old_size)
        if m > n:
            raise ConfigError(
                f"The 'old_size' parameter must be <= new_size ({n}); got {old_size}."
            )
        if m == 0 or m == n:
            return []
        return self._subproof(m, 0, n, True)

    def _subproof(self, m: int, start: int, end: int, complete: bool) -> list[bytes]:
        n = end - start
        if m == n:
            return [] if complete else [self._subtree(start, end)]
        k = _split(n)
        if m <= k:
            return [*self._subproof(m, start, start + k, complete), self._subtree(start + k, end)]
        return [*self._subproof(m - k, start + k, end, False), self._subtree(start, start + k)]

    def verify_storage(self) -> None:
        """Recompute every leaf hash from the stored data and every stored node.

        Raises:
            VerificationError: naming the first leaf or node that does not match.
        """
        with self._lock:
            data, levels = self._data, self._levels
            if self._db is not None:  # read what is stored, not the in-memory copy
                rows = self._db.leaves_from(0)
                data = [d for _i, d, _h in rows]
                levels = [[h for _i, _d, h in rows]]
                for level, _idx, h in self._db.nodes():
                    while len(levels) <= level:
                        levels.append([])
                    levels[level].append(h)
                for level, nodes in enumerate(levels):  # nodes of leaves appended since
                    del nodes[len(data) >> level :]
            for i, d in enumerate(data):
                if leaf_hash(d) != levels[0][i]:
                    raise VerificationError(
                        f"Merkle log leaf {i} does not hash to its stored leaf hash: the "
                        "record was changed after it was appended."
                    )
            for level in range(1, len(levels)):
                for i, h in enumerate(levels[level]):
                    if node_hash(levels[level - 1][2 * i], levels[level - 1][2 * i + 1]) != h:
                        raise VerificationError(
                            f"Merkle log node ({level}, {i}) does not match its children."
                        )


class PackedMerkleTree:
    """An RFC 9162 Merkle tree over a fixed sequence of leaves, built once and held packed.

    Every complete, aligned subtree hash is kept, as :class:`MerkleLog` keeps them, but
    each level is one bytes buffer of 32-byte hashes: about 64 bytes a leaf (its hash and
    the interior nodes above it), not a Python object per hash, and not the leaves' data
    (an opening is checked by the hash of its recomputed data, :meth:`leaf_hash_at`).
    Roots and inclusion proofs are those of a :class:`MerkleLog` over the same leaves,
    checked by :func:`verify_inclusion`. What a committed index keeps beside its rows: it
    never grows after it is built, and is not stored.

    >>> tree = PackedMerkleTree([b"a", b"b", b"c"])
    >>> verify_inclusion(b"b", 1, 3, tree.inclusion_proof(1), tree.root())
    True

    Args:
        leaves: the leaves' data, in order (an iterator is read once, leaf by leaf).
    """

    def __init__(self, leaves: Iterable[bytes]) -> None:
        level = bytearray()
        for data in leaves:
            level += leaf_hash(data)
        self.size = len(level) // HASH_SIZE
        self._levels: list[bytearray] = [level]  # never written after this constructor
        count = self.size
        while count > 1:
            below, count = self._levels[-1], count // 2
            up = bytearray(count * HASH_SIZE)
            for i in range(count):
                at = 2 * i * HASH_SIZE
                up[i * HASH_SIZE : (i + 1) * HASH_SIZE] = node_hash(
                    bytes(below[at : at + HASH_SIZE]),
                    bytes(below[at + HASH_SIZE : at + 2 * HASH_SIZE]),
                )
            self._levels.append(up)

    def __len__(self) -> int:
        return self.size

    @property
    def nbytes(self) -> int:
        """Bytes of hashes held (every level)."""
        return sum(len(level) for level in self._levels)

    def _node(self, level: int, index: int) -> bytes:
        return bytes(self._levels[level][index * HASH_SIZE : (index + 1) * HASH_SIZE])

    def leaf_hash_at(self, index: int) -> bytes:
        """The hash of leaf ``index``."""
        MerkleLog._check_index(index, self.size)
        return self._node(0, index)

    def root(self) -> bytes:
        """The root over every leaf (SHA-256() for no leaves)."""
        return EMPTY_ROOT if self.size == 0 else _subtree_hash(self._node, 0, self.size)

    def inclusion_proof(self, index: int) -> list[bytes]:
        """The RFC 9162 audit path of leaf ``index`` in the whole tree."""
        MerkleLog._check_index(index, self.size)
        return _audit_path(self._node, index, 0, self.size)
