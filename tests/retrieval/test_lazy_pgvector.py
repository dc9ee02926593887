"""Private retrieval over pgvector candidates is distributed exactly as full noise.

The lazy noise-then-select (:func:`ragprivacy.retrieval.lazy_index_topk`) over a
``PgvectorIndex`` in a real PostgreSQL server: candidates from pgvector's HNSW search, the
other documents scored in the database (primary-key look-ups, or one sequential scan for
the fallback). Two-sample χ² test of homogeneity on the ordered top-2 against the
full-noise reference (``GaussianNoisyTopK`` in simulation mode over the exact score vector
the database computes), false-alarm rate α = 1e-4 per test, fixed seeds; as for the
in-process path (tests/retrieval/test_lazy_noisy.py), with the cosine bound u = 1 (mostly
the fallback), the rounds at large σ, and a tight per-tenant bound (one round). Planted
bugs must be rejected: noising only the candidates, and a bound that is not certified.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from ragprivacy.corpus import Corpus
from ragprivacy.dp import AccountPolicy, GaussianNoisyTopK
from ragprivacy.embed import HashingEmbedder
from ragprivacy.index import PgvectorIndex
from ragprivacy.retrieval import (
    KnowledgeBase,
    NoisyTopKRetriever,
    TenantAccessError,
    TenantRetriever,
    lazy_index_topk,
)
from ragprivacy.types import Document

N, DIM, K, C = 60, 8, 2, 6
RANGE = (-1.0, 1.0)
DRAWS = 2000  # per lazy sample (each draw queries the database); the reference has more
REFERENCE = 20000


@pytest.fixture(scope="module")
def tenant(postgres_url: str) -> Iterator[tuple[PgvectorIndex, np.ndarray, np.ndarray]]:
    """One tenant's index: 60 unit vectors, a query near one of them; returns the index,
    the query and the exact (clipped) score vector the database computes."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((N, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[0] + 0.3 * rng.standard_normal(DIM).astype(np.float32)
    q /= np.linalg.norm(q)
    index = PgvectorIndex(postgres_url, dim=DIM, m=4, ef_construction=8, ef_search=1)
    index.add(x, [f"d{i}" for i in range(N)])
    scores = np.clip(index.scores(q)[0].astype(np.float64), *RANGE)
    yield index, q, scores
    index.drop()


def _lazy(
    tenant: tuple[PgvectorIndex, np.ndarray, np.ndarray],
    sigma: float,
    bound: float,
    *,
    seed: int,
    frac: float,
    draws: int = DRAWS,
) -> tuple[list[tuple[int, ...]], int, int]:
    index, q, _ = tenant
    gen = np.random.default_rng(seed)
    out, fell, multi = [], 0, 0
    for _ in range(draws):
        sel = lazy_index_topk(
            index,
            q,
            K,
            sigma,
            candidates=C,
            bound=bound,
            score_range=RANGE,
            sensitivity=2.0,
            max_reveal_fraction=frac,
            rng=gen,
        )
        out.append(tuple(sel.indices.tolist()))
        fell += sel.fell_back
        multi += sel.rounds > 1
    return out, fell, multi


def _full(scores: np.ndarray, sigma: float, *, seed: int) -> list[tuple[int, ...]]:
    mech = GaussianNoisyTopK(sigma=sigma, k=K, simulation=True, sensitivity=2.0)
    sel = mech.select(np.tile(scores, (REFERENCE, 1)), rng=seed)
    return [tuple(row) for row in sel.indices.tolist()]


def _pvalue(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> float:
    keys = sorted(set(a) | set(b))
    A, B = Counter(a), Counter(b)
    rows, other = [], [0, 0]
    for key in keys:
        if A[key] + B[key] >= 40:
            rows.append([A[key], B[key]])
        else:
            other[0] += A[key]
            other[1] += B[key]
    if sum(other):
        rows.append(other)
    return float(chi2_contingency(np.array(rows))[1])


def _tenant_bound(tenant: tuple[PgvectorIndex, np.ndarray, np.ndarray]) -> float:
    """A tight certified bound on every non-candidate's score (a tenant's own bound)."""
    index, q, scores = tenant
    cand = index.search(q, C).indices[0]
    return float(np.delete(scores, cand).max())


def test_candidates_come_from_the_hnsw_search(tenant: tuple) -> None:
    index, q, scores = tenant
    found = index.search(q, C)  # builds the graph and sets the session for searches
    plan = index._conn.execute(
        f"EXPLAIN SELECT pos FROM {index.table} ORDER BY embedding <#> %s LIMIT 6", (q,)
    ).fetchall()
    assert any("_hnsw" in str(row[0]) for row in plan)
    np.testing.assert_allclose(found.scores[0], scores[found.indices[0]], atol=1e-6)


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("sigma", "bound", "frac", "path"),
    [
        (0.3, 1.0, 0.1, "fallback"),  # cosine bound u = 1: mostly the full-scan fallback
        # large σ: intermediate levels, several rounds (about a quarter of the queries
        # fall back at once, where the first level would reveal over half the rest)
        (1.0, 1.0, 1.0, "rounds"),
        (0.1, None, 0.1, "one round"),  # a tight per-tenant bound: one threshold
    ],
)
def test_lazy_over_pgvector_matches_full_noise(
    tenant: tuple, sigma: float, bound: float | None, frac: float, path: str
) -> None:
    u = bound if bound is not None else _tenant_bound(tenant)
    lazy, fell, multi = _lazy(tenant, sigma, u, seed=1, frac=frac)
    if path == "fallback":
        assert DRAWS // 2 < fell < DRAWS  # both the fallback and the rounds ran
    elif path == "rounds":
        assert fell < DRAWS // 2 and multi > DRAWS // 4, (fell, multi)
    else:
        assert fell == 0 and multi < DRAWS // 10
    assert _pvalue(lazy, _full(tenant[2], sigma, seed=2)) > 1e-4


@pytest.mark.statistical
def test_planted_bugs_are_caught(tenant: tuple) -> None:
    index, q, scores = tenant
    full = _full(scores, 0.1, seed=4)
    gen = np.random.default_rng(3)
    cand = index.search(q, C).indices[0]
    planted = []  # the bug: noise only the candidates (select before noise)
    for _ in range(DRAWS):
        noisy = scores[cand] + gen.normal(0, 0.1, C)
        planted.append(tuple(cand[np.argsort(-noisy)[:K]].tolist()))
    assert _pvalue(planted, full) < 1e-4
    # A bound that is not certified (0.15 below the true maximum of the non-candidates).
    wrong, _, _ = _lazy(tenant, 0.1, _tenant_bound(tenant) - 0.15, seed=3, frac=0.1)
    assert _pvalue(wrong, full) < 1e-4


def test_private_retrieval_end_to_end_over_pgvector_tenants(postgres_url: str) -> None:
    # Two tenants, each a knowledge base over its own pgvector table; the lazy private
    # retriever over one, and the tenant router over both (full noise, exact scan).
    docs = {
        "acme": [Document(f"a{i}", f"acme note {i} about topic {i % 4}") for i in range(40)],
        "globex": [Document(f"g{i}", f"globex memo {i} on subject {i % 3}") for i in range(30)],
    }
    kbs = {
        name: KnowledgeBase.build(
            Corpus(d), embedder=HashingEmbedder(dim=256), index=f"pgvector:{postgres_url}"
        )
        for name, d in docs.items()
    }
    tables = {kb.index.table for kb in kbs.values()}  # type: ignore[attr-defined]
    assert len(tables) == 2
    lazy = NoisyTopKRetriever(
        kbs["acme"], k=3, sigma=1e-3, simulation=True, lazy=True, candidates=8, rng=0
    )
    plain = kbs["acme"].index.search(kbs["acme"].embedder.encode(["topic 2"]), 3)
    got = lazy.retrieve("topic 2", account="u1")
    assert got.ids == plain.ids[0]  # σ tiny: the noisy top-3 is the clean one
    assert got.event.sigma == pytest.approx(1e-3)
    router = TenantRetriever(k=2, simulation=True, rng=1)
    for name, kb in kbs.items():
        router.add_tenant(name, kb)
    router.add_account("alice", "acme", AccountPolicy(rate_limit=5, epsilon=8.0))
    assert all(i.startswith("a") for i in router.retrieve("subject 1", account="alice").ids)
    with pytest.raises(TenantAccessError):
        router.search(
            kbs["globex"].embedder.encode(["subject 1"]), account="alice", tenant="globex"
        )
    for kb in kbs.values():
        kb.index.drop()  # type: ignore[attr-defined]
