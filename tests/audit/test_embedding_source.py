"""A tenant's committed embeddings read from a store instead of held in memory.

An :class:`EmbeddingSource` (the service's pgvector table) gives the same commitments,
the same selections and receipts as the in-memory rows, and a window served from it
verifies; the provider holds only the tree of hashes, reads rows in blocks and fetches
the selected positions; a store changed after the window opened is refused, not opened.
The selection seam :func:`exact_selection` asks ``score_at`` and selects as
``select_units`` over every slot.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from ragprivacy._typing import FloatArray
from ragprivacy.audit import (
    AuditorReexecution,
    AuditPolicy,
    AuditWindow,
    EmbeddingSource,
    ProviderKey,
    TenantCommitment,
    Verifier,
    answer_query,
    derived_noise,
    exact_selection,
    fixed_point,
)
from ragprivacy.audit.commitments import index_salt_key
from ragprivacy.audit.noise import integer_scores
from ragprivacy.errors import DataError

POLICY = AuditPolicy(
    epsilon_acc=2.0,
    delta_acc=1e-6,
    rate_limit=8,
    k_max=2,
    delta_policy=3e-6,
    window_id="W1",
    window_start=0,
    window_end=10**9,
    top_k=3,
)


class ArraySource(EmbeddingSource):
    """Rows of an array, counting what is read."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.rows = np.asarray(vectors, dtype=np.float32)
        self.size, self.dim = self.rows.shape
        self.fetched: list[list[int]] = []
        self.blocks = 0

    def vectors_at(self, positions: Sequence[int]) -> FloatArray:
        self.fetched.append([int(p) for p in positions])
        return self.rows[list(positions)]

    def chunks(self, rows: int) -> Iterator[FloatArray]:
        for start in range(0, self.size, rows):
            self.blocks += 1
            yield self.rows[start : start + rows]


def _vectors(n: int, d: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def _provider(tenants: dict) -> AuditWindow:
    p = AuditWindow(
        policy=POLICY,
        tenants=tenants,
        accounts={"a": "t0", "b": "t1"},
        key=ProviderKey.from_seed(bytes(32)),
        seed=bytes(range(32)),
    )
    p.commit(published_at=0)
    return p


def test_a_source_gives_the_same_window_as_rows_in_memory_and_it_verifies() -> None:
    rows = {"t0": _vectors(2500, 24, 1), "t1": _vectors(40, 24, 2)}
    ids = {t: [f"{t}-{i}" for i in range(len(v))] for t, v in rows.items()}
    sources = {t: ArraySource(v) for t, v in rows.items()}
    memory = _provider({t: (ids[t], rows[t]) for t in rows})
    stored = _provider({t: (ids[t], sources[t]) for t in rows})
    assert stored.commit(published_at=0).c_idx == memory.commit(published_at=0).c_idx
    assert all(c._fixed is None for c in stored._index.values())  # only the hash tree
    fetched_before = len(sources["t0"].fetched)
    blocks_before = sources["t0"].blocks
    for i in range(6):
        q = _vectors(1, 24, 100 + i)[0]
        for account in ("a", "b"):
            got = stored.query(account, vector=q, ts=10 + 2 * i + (account == "b"))
            want = memory.query(account, vector=q, ts=10 + 2 * i + (account == "b"))
            assert got.ids == want.ids and got.receipt.topk_hash == want.receipt.topk_hash
    # every query read only the rows its noise left in the race, by position (padded to
    # max(64, 8K) = 64), never a block of the store, then fetched its K openings
    assert sources["t0"].blocks == blocks_before
    assert [len(f) for f in sources["t0"].fetched[fetched_before:]] == [64, 3] * 6
    verdict = Verifier(mode="full").verify(stored.transcript(), (), stored.auditor_package())
    assert verdict.passed, verdict.failed_check()


def _commitment(tenant: str, rows: object) -> TenantCommitment:
    """The tenant's commitment with one id per row (what a window commits beside them)."""
    n = rows.size if isinstance(rows, ArraySource) else len(rows)  # type: ignore[arg-type]
    return TenantCommitment(
        tenant,
        rows,  # type: ignore[arg-type]
        [f"d{i}" for i in range(n)],
        salt_key=index_salt_key(bytes(range(32))),
    )


def test_a_store_changed_after_the_commitment_is_refused() -> None:
    rows = _vectors(30, 8, 3)
    source = ArraySource(rows)
    commitment = _commitment("t0", source)
    assert commitment.root == _commitment("t0", rows).root
    source.rows = source.rows.copy()
    source.rows[4] = _vectors(1, 8, 4)[0]
    with pytest.raises(DataError, match="position 4"):
        commitment.openings([1, 4])
    source.rows = source.rows[:20]
    source.size = 20
    with pytest.raises(DataError, match="20 embeddings"):
        commitment.scores(fixed_point(rows[0])[0], 20)


def test_exact_selection_asks_score_at_only_for_the_slots_its_noise_leaves() -> None:
    rows = _vectors(200, 16, 5)
    q = fixed_point(_vectors(1, 16, 6))[0]
    mech = POLICY.mechanism()
    scores = integer_scores(fixed_point(rows), q, POLICY.grid_bits)
    noise = derived_noise(bytes(range(32)), ("W1", "a", "t", "q", 1), mech, 200)
    asked: list[np.ndarray] = []

    def score_at(positions: np.ndarray) -> np.ndarray:
        asked.append(np.asarray(positions))
        return scores[positions]

    picked = exact_selection(mech, noise, score_at)
    assert np.array_equal(picked, mech.select_units(scores, noise))
    assert len(asked) == 1 and asked[0].size == 64  # max(64, 8K) of the 200 slots
    assert np.array_equal(asked[0], np.unique(asked[0])) and set(picked) <= set(asked[0])
    commitment = _commitment("t", ArraySource(rows))
    assert np.array_equal(commitment.scores(q, POLICY.grid_bits), scores)
    assert np.array_equal(commitment.scores_at(q, [5, 0, 5], POLICY.grid_bits), scores[[5, 0, 5]])


def test_answer_query_reads_the_scores_itself_when_none_are_given() -> None:
    rows = _vectors(300, 16, 8)
    source = ArraySource(rows)
    index = _commitment("t0", source)
    q = fixed_point(_vectors(1, 16, 9))[0]
    common = dict(
        salt="5a" * 32,
        window_id="W1",
        mechanism=POLICY.mechanism(),
        grid_bits=POLICY.grid_bits,
        index=index,
        seed=bytes(range(32)),
        account="a",
        tenant="t0",
        query_fixed=q,
        query_hash="h",
        query_text=None,
        seq=1,
        ts=5,
        proof_system=AuditorReexecution(),
    )
    blocks, fetched = source.blocks, len(source.fetched)
    read, witness = answer_query(**common)  # type: ignore[arg-type]
    # it read the 64 rows its noise left in the race by position (no block of the
    # store), then the K openings
    assert source.blocks == blocks
    assert [len(f) for f in source.fetched[fetched:]] == [64, POLICY.top_k]
    given, same = answer_query(**common, scores=index.scores(q, POLICY.grid_bits))  # type: ignore[arg-type]
    assert read == given and witness == same
    in_memory, _ = answer_query(**{**common, "index": _commitment("t0", rows)})  # type: ignore[arg-type]
    assert in_memory == read
