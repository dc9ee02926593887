"""Noise-first private retrieval in the retrievers: the full path's output from a handful of
scores, the budget untouched by the change, and the index's two score routes compared."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ragprivacy.corpus import Corpus
from ragprivacy.dp import AccountPolicy
from ragprivacy.embed import HashingEmbedder
from ragprivacy.index import create_index
from ragprivacy.index.exact import ExactIndex
from ragprivacy.retrieval import KnowledgeBase, NoisyTopKRetriever, TenantRetriever
from ragprivacy.types import Document

DIM = 32
N = 3000


class Counting(ExactIndex):
    """An exact index that counts what it scores; ``gathered_scan`` makes :meth:`scores`
    return the ``scores_at`` values of every position (the full path fed the very values
    the noise-first path reads); ``fail`` makes every scoring call raise."""

    def __init__(self, dim: int, *, gathered_scan: bool = False, fail: bool = False) -> None:
        super().__init__(dim)
        self.gathered_scan = gathered_scan
        self.fail = fail
        self.scanned = 0
        self.gathered = 0

    def scores(self, queries: Any) -> Any:
        if self.fail:
            raise RuntimeError("scan failed")
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        self.scanned += q.shape[0] * len(self)
        if not self.gathered_scan:
            return super().scores(q)
        every = np.arange(len(self))
        return np.stack([super(Counting, self).scores_at(v, every) for v in q])

    def scores_at(self, query: Any, positions: Any) -> Any:
        if self.fail:
            raise RuntimeError("lookup failed")
        self.gathered += np.asarray(positions).size
        return super().scores_at(query, positions)


def _dyadic(rng: np.random.Generator, rows: int) -> np.ndarray:
    # Entries in {0, ±1/8, ±1/4}: every product and partial sum is exact in float32, so
    # a scan and a gathered product give the same bits whatever order BLAS sums in.
    return rng.choice(np.array([0.0, 0.125, -0.125, 0.25, -0.25], dtype=np.float32), (rows, DIM))


def _kb(index: ExactIndex, vectors: np.ndarray) -> KnowledgeBase:
    ids = [f"d{i}" for i in range(len(vectors))]
    index.add(vectors, ids)
    corpus = Corpus([Document(i, f"text {i}") for i in ids])
    return KnowledgeBase(corpus, HashingEmbedder(dim=DIM), index)


def _unit(rng: np.random.Generator, rows: int) -> np.ndarray:
    x = rng.standard_normal((rows, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


QUERIES = [f"query {i} about topic {i % 3}" for i in range(6)]


@pytest.mark.parametrize("sigma", [0.01, 0.3, 3.0, None])  # None: the default calibration
def test_noisy_topk_retriever_gives_the_full_paths_output(sigma: float | None) -> None:
    kb = _kb(Counting(DIM, gathered_scan=True), _unit(np.random.default_rng(0), N))
    index = kb.index
    assert isinstance(index, Counting)
    common: dict[str, Any] = dict(k=5, sigma=sigma, simulation=True)
    fast = NoisyTopKRetriever(kb, **common, rng=11)
    full = NoisyTopKRetriever(kb, **common, rng=11, noise_first=False)
    assert fast.config()["noise_first"] and not full.config()["noise_first"]
    for batch in ([QUERIES[0]], QUERIES[1:4], QUERIES[4:]):
        index.scanned = index.gathered = 0
        a = fast.retrieve_batch(batch, account="u")
        lazy_scanned, gathered = index.scanned, index.gathered
        b = full.retrieve_batch(batch, account="u")
        assert a == b  # ids, positions, noisy scores (bit for bit), event, charge
        if sigma == 0.01:  # σ ≪ Δ: the fallback scores everything once
            assert lazy_scanned == len(batch) * N and gathered == 0
        elif sigma is None:  # σ ≈ 7,169: about K candidates, padded to max(64, 8K) = 64
            assert lazy_scanned == 0 and gathered == 64 * len(batch)
    assert fast.counter.used("u") == full.counter.used("u") == len(QUERIES)


@pytest.mark.parametrize("mode", ["float", "entropy"])
def test_tenant_retriever_gives_the_full_paths_output(mode: str) -> None:
    rng = np.random.default_rng(2)
    kb = _kb(Counting(DIM), _dyadic(rng, N))
    queries = _dyadic(rng, 3)
    modes: dict[str, dict[str, Any]] = {
        "float": {"simulation": True, "rng": 5},
        "entropy": {},
    }
    kw = modes[mode]
    routers = []
    for noise_first in (True, False):
        svc = TenantRetriever(k=5, noise_first=noise_first, **kw)
        svc.add_tenant("acme", kb)
        svc.add_account("alice", "acme", AccountPolicy(rate_limit=20, epsilon=1.0))
        svc.add_account("bob", "acme", AccountPolicy(rate_limit=20, epsilon=1.0, sigma=0.05))
        routers.append(svc)
    index = kb.index
    assert isinstance(index, Counting)
    for account in ("alice", "bob"):
        index.scanned = index.gathered = 0
        a = routers[0].search(queries, account=account)
        if account == "alice":  # σ in the thousands: ~K candidates, padded to 64
            assert index.scanned == 0 and index.gathered == 3 * 64
        else:  # σ = 0.05 < Δ = 2: every document is scored
            assert index.scanned == 3 * N
        b = routers[1].search(queries, account=account)
        if mode != "entropy":  # fresh OS entropy cannot be replayed
            np.testing.assert_array_equal(a.indices, b.indices)
            np.testing.assert_array_equal(a.noisy_scores, b.noisy_scores)
        assert a.event == b.event and a.indices.shape == b.indices.shape == (3, 5)
        assert routers[0].remaining(account) == routers[1].remaining(account) == 17
    assert routers[0].config()["noise_first"] and not routers[1].config()["noise_first"]


def test_a_failed_lookup_spends_nothing() -> None:
    kb = _kb(Counting(DIM, fail=True), _unit(np.random.default_rng(3), 200))
    r = NoisyTopKRetriever(kb, k=3, queries_per_account=5)
    with pytest.raises(RuntimeError, match="lookup failed"):
        r.retrieve("anything", account="u")
    assert r.counter.remaining("u") == 5
    svc = TenantRetriever(k=3)
    svc.add_tenant("t", kb)
    svc.add_account("a", "t", AccountPolicy(rate_limit=4, epsilon=1.0))
    with pytest.raises(RuntimeError, match="lookup failed"):
        svc.retrieve("anything", account="a")
    assert svc.remaining("a") == 4


def test_without_a_score_range_every_document_is_scored() -> None:
    kb = _kb(Counting(DIM), _unit(np.random.default_rng(4), 300))
    r = NoisyTopKRetriever(kb, k=3, score_range=None, sensitivity=2.0, simulation=True, rng=0)
    assert r.config()["noise_first"] is False
    r.retrieve("anything", account="u")
    index = kb.index
    assert isinstance(index, Counting) and index.scanned == 300 and index.gathered == 0


@pytest.mark.parametrize("backend", ["exact", "faiss-flat", "faiss-hnsw"])
def test_the_two_score_routes_of_the_in_process_indices(backend: str) -> None:
    """scores_at is the one-query scan's product over gathered rows: the same value to
    float32 rounding (bit for bit except where BLAS used its tail kernel; how often they
    differ is measured in benchmarks/bench_retrieval.py, not asserted here)."""
    if backend.startswith("faiss"):
        pytest.importorskip("faiss")
    rng = np.random.default_rng(5)
    vectors, queries = _unit(rng, 2000), _unit(rng, 4)
    index = create_index(backend, dim=DIM)
    index.add(vectors, [str(i) for i in range(2000)])
    pos = np.sort(rng.choice(2000, 37, replace=False))
    for q in queries:
        one = index.scores(q)[0]
        got = index.scores_at(q, pos)
        assert got.dtype == np.float32 and got.shape == (37,)
        np.testing.assert_allclose(got, one[pos], rtol=0, atol=4 * float(np.finfo(np.float32).eps))
    # Exactly representable products: both routes agree bit for bit.
    dy = _dyadic(rng, 500)
    index = create_index(backend, dim=DIM)
    index.add(dy, [str(i) for i in range(500)])
    q = _dyadic(rng, 1)[0]
    np.testing.assert_array_equal(index.scores_at(q, np.arange(500)), index.scores(q)[0])


def test_noise_first_over_pgvector(postgres_url: str) -> None:
    """The database scores the candidates (primary-key look-ups); the output is the full
    path's over the database's own scan, and the retriever's is unchanged by the switch."""
    from ragprivacy.dp import ChaCha20Bits, GaussianNoisyTopK
    from ragprivacy.index import PgvectorIndex

    rng = np.random.default_rng(6)
    n = 400
    index = PgvectorIndex(postgres_url, dim=DIM, m=4, ef_construction=8)
    try:
        index.add(_unit(rng, n), [f"d{i}" for i in range(n)])
        q = _unit(rng, 1)[0]
        for simulation in (True, False):
            for sigma in (0.05, 3.0, 500.0):
                mech = GaussianNoisyTopK(sigma=sigma, k=3, simulation=simulation)
                for seed in range(3):

                    def noise(seed: int = seed, sim: bool = simulation) -> dict[str, Any]:
                        if sim:
                            return {"rng": seed}
                        return {"bits": ChaCha20Bits.derived(bytes(32), ("pg", seed))}

                    asked: list[int] = []

                    def at(_: int, p: Any, asked: list[int] = asked) -> Any:
                        asked.append(len(p))
                        return index.scores_at(q, p)

                    full = mech.select(index.scores(q)[0], **noise())
                    lazy = mech.select_noise_first(
                        n, at, score_all=lambda: index.scores(q)[0], **noise()
                    )
                    np.testing.assert_array_equal(lazy.indices, full.indices)
                    np.testing.assert_array_equal(lazy.noisy_scores, full.noisy_scores)
                    assert bool(asked) == (sigma >= 3.0)  # σ = 0.05: one scan instead
                    assert sum(asked) <= n / 16
        ids = [f"d{i}" for i in range(n)]
        kb = KnowledgeBase(
            Corpus([Document(i, f"text {i}") for i in ids]), HashingEmbedder(dim=DIM), index
        )
        fast = NoisyTopKRetriever(kb, k=3, simulation=True, rng=1)
        full_r = NoisyTopKRetriever(kb, k=3, simulation=True, rng=1, noise_first=False)
        assert fast.retrieve_batch(QUERIES[:2], account="u") == full_r.retrieve_batch(
            QUERIES[:2], account="u"
        )
    finally:
        index.drop()
