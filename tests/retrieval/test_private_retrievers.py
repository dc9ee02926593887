"""Private retrievers pinned to their pseudocode: noisy top-K (collusion paper eq. 2.1,
3.1, 3.4), threshold screening (Private-RAG Alg. 1, 2/6, 3), random projection and
DP-RP-G (RP paper Alg. 1–2, App. B–C)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragprivacy.corpus import Corpus
from ragprivacy.dp import (
    GaussianEvent,
    NonPrivateEvent,
    NoOpEvent,
    SqliteBudgetStore,
    account_sigma_exact,
    collusion_sigma,
    gaussian_epsilon,
)
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.retrieval import (
    DPProjectionRetriever,
    KnowledgeBase,
    NoisyTopKRetriever,
    ProjectionRetriever,
    ThresholdRetriever,
    TopKRetriever,
    adaptive_screen,
    create_retriever,
    dp_rp_sigma,
    expected_projected_cosine,
    pad_top_k,
    projection_matrix,
    projection_sanity,
    score_bins,
    simulate_top1_flip,
    top1_flip_bound,
)
from ragprivacy.types import Document

TEXTS = [
    "red apples and green pears in the orchard",
    "blue sky over the quiet harbour at night",
    "green pears ripen slowly in autumn",
    "the harbour master counts fishing boats",
    "apples and pears make a fine autumn pie",
    "night trains cross the northern plain",
]


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    docs = [Document(f"d{i}", t) for i, t in enumerate(TEXTS)]
    return KnowledgeBase.build(Corpus(docs), embedder="hashing")


# ----------------------------------------------------------------------------- noisy top-K


def test_calibration_paper_and_exact(kb: KnowledgeBase) -> None:
    paper = NoisyTopKRetriever(kb, epsilon_acc=1.0, delta_acc=1e-6, queries_per_account=10_000)
    exact = NoisyTopKRetriever(
        kb, epsilon_acc=1.0, delta_acc=1e-6, queries_per_account=10_000, calibration="exact"
    )
    # Default cosine range, Δ = 2; secure scores are clipped to grid points inside the
    # range, so the event charges Δ exactly and σ is calibrated with it.
    assert paper.sigma == collusion_sigma(1.0, 1e-6, 10_000, 2.0)
    assert exact.sigma == account_sigma_exact(1.0, 1e-6, 10_000, 2.0)
    assert paper.sigma / exact.sigma == pytest.approx(8.48, abs=0.05)


def test_score_range_sets_sensitivity_and_sigma(kb: KnowledgeBase) -> None:
    # Default: the cosine range (−1, 1), Δ = 2 (dp.DEFAULT_SCORE_RANGE).
    wide = NoisyTopKRetriever(kb, queries_per_account=100, simulation=True, rng=0)
    assert wide.score_range == (-1.0, 1.0) and wide.sensitivity == 2.0
    assert wide.config()["sensitivity_source"] == "score_range"
    assert wide.sigma == pytest.approx(collusion_sigma(1.0, 1e-6, 100, 2.0), rel=1e-12)
    # Scores clipped into (0, 1): the paper's Δ = 1 made true, and σ halves.
    unit = NoisyTopKRetriever(
        kb, queries_per_account=100, score_range=(0.0, 1.0), simulation=True, rng=0
    )
    assert unit.sensitivity == 1.0 and wide.sigma == pytest.approx(2 * unit.sigma, rel=1e-12)
    # No clipping: Δ taken on trust, and said so.
    trusted = NoisyTopKRetriever(
        kb, score_range=None, sensitivity=1.0, queries_per_account=100, simulation=True, rng=0
    )
    assert trusted.mechanism.score_range is None
    assert trusted.config()["sensitivity_source"] == "trusted"
    with pytest.raises(ConfigError, match="got neither"):
        NoisyTopKRetriever(kb, score_range=None)
    with pytest.raises(ConfigError, match="at least the width"):
        NoisyTopKRetriever(kb, score_range=(-1.0, 1.0), sensitivity=1.0)
    # Secure and unclipped: σ is calibrated with the Δ of the event (one grid unit more).
    secure = NoisyTopKRetriever(
        kb, queries_per_account=100, calibration="exact", score_range=None, sensitivity=1.0
    )
    delta_event = secure.mechanism.event.sensitivity
    assert delta_event > 1.0 and secure.sigma == pytest.approx(
        account_sigma_exact(1.0, 1e-6, 100, delta_event), rel=1e-12
    )
    mu = math.sqrt(100) * delta_event / secure.sigma  # n queries compose to one Gaussian
    assert gaussian_epsilon(mu, 1e-6) == pytest.approx(1.0, rel=1e-6)


@pytest.mark.parametrize("lazy", [False, True])
def test_scores_are_clipped_into_the_range(kb: KnowledgeBase, lazy: bool) -> None:
    # "green pears autumn" scores d5 at about −0.03 (hashing embeddings).
    raw = kb.index.scores(kb.embedder.encode(["green pears autumn"]))[0]
    assert raw[5] < -0.01

    def noisy_d5(score_range: tuple[float, float]) -> float:
        r = NoisyTopKRetriever(
            kb, k=6, sigma=1e-7, simulation=True, rng=0, score_range=score_range, lazy=lazy
        ).retrieve("green pears autumn")
        return dict(zip(r.ids, r.scores))["d5"]

    assert noisy_d5((0.0, 1.0)) == pytest.approx(0.0, abs=1e-5)
    assert noisy_d5((-1.0, 1.0)) == pytest.approx(float(raw[5]), abs=1e-5)


def test_lazy_retriever_with_buckets(kb: KnowledgeBase) -> None:
    from ragprivacy.retrieval import BucketBounds

    bb = BucketBounds.build(kb.index.vectors(), buckets=3, rng=0)
    exact = set(TopKRetriever(kb, k=2).retrieve("green pears autumn").ids)
    r = NoisyTopKRetriever(
        kb, k=2, sigma=1e-3, simulation=True, lazy=True, candidates=2, buckets=bb, rng=0
    )
    assert set(r.retrieve("green pears autumn").ids) == exact
    assert r.config()["buckets"] == bb.count
    with pytest.raises(ConfigError, match="cover"):
        NoisyTopKRetriever(
            kb,
            simulation=True,
            lazy=True,
            buckets=BucketBounds.build(np.eye(4, dtype=np.float32), buckets=2, rng=0),
        )


def test_account_counter_refuses_before_anything(kb: KnowledgeBase) -> None:
    r = NoisyTopKRetriever(kb, k=2, queries_per_account=3, simulation=True, rng=0, sigma=0.1)
    calls = []
    original = kb.embedder.encode

    def spy(texts, **kw):  # type: ignore[no-untyped-def]
        calls.append(len(texts))
        return original(texts, **kw)

    kb.embedder.encode = spy  # type: ignore[method-assign]
    try:
        r.retrieve_batch(["apples", "harbour"], account="a")
        with pytest.raises(BudgetExhaustedError, match="used 2 of its 3"):
            r.retrieve_batch(["pears", "night"], account="a")  # 2 more do not fit: all refused
        assert calls == [2]  # nothing was embedded for the refused request
        assert r.counter.used("a") == 2
        r.retrieve("pears", account="a")  # one still fits
        with pytest.raises(BudgetExhaustedError):
            r.retrieve("pears", account="a")
        r.retrieve("pears", account="b")  # other accounts are separate
    finally:
        kb.embedder.encode = original  # type: ignore[method-assign]


def test_noisy_topk_modes(kb: KnowledgeBase) -> None:
    with pytest.raises(ConfigError, match="Secure mode refuses"):
        NoisyTopKRetriever(kb, rng=1)
    with pytest.raises(ConfigError, match="simulation=True"):
        NoisyTopKRetriever(kb, lazy=True)
    secure = NoisyTopKRetriever(kb, k=2, sigma=1e-3)
    r = secure.retrieve("green pears autumn")
    assert r.event.sigma == 1e-3 and len(r.ids) == 2
    exact = set(TopKRetriever(kb, k=2).retrieve("green pears autumn").ids)
    assert set(r.ids) == exact  # tiny noise keeps the exact top 2
    a = NoisyTopKRetriever(kb, k=3, sigma=0.5, simulation=True, rng=4).retrieve("apples")
    b = NoisyTopKRetriever(kb, k=3, sigma=0.5, simulation=True, rng=4).retrieve("apples")
    assert a == b
    lazy = create_retriever("noisy_topk", kb, k=2, sigma=1e-3, simulation=True, lazy=True, rng=0)
    assert set(lazy.retrieve("green pears autumn").ids) == exact


# ----------------------------------------------------------------------------- threshold


def test_pad_top_k_alg3() -> None:
    full = pad_top_k(np.array([3, 1, 7, 5]), np.array([0.1, 0.9, 0.5, 0.5]), 3)
    assert full.positions.tolist() == [1, 5, 7] and full.padding == 0  # ties: lower position
    short = pad_top_k(np.array([2]), np.array([0.3]), 4)
    assert short.positions.tolist() == [2] and short.padding == 3 and short.slots == 4
    empty = pad_top_k(np.array([], dtype=np.int64), np.array([]), 2)
    assert empty.padding == 2


def test_murag_fixed_threshold_budget_decrements(kb: KnowledgeBase) -> None:
    r = ThresholdRetriever(kb, k=4, mode="fixed", tau=0.2, epsilon_q=2.0, max_retrievals=2)
    scores = kb.index.scores(kb.embedder.encode(["green pears autumn"]))[0]
    above = {f"d{i}" for i in np.flatnonzero(scores > 0.2)}
    s1 = r.screen(scores)
    assert set(s1.charged) == above and all(v == 2.0 for v in s1.charged.values())
    assert s1.padding == 4 - len(above)
    assert r.filter.spent(sorted(above)).tolist() == [2.0] * len(above)
    others = sorted({f"d{i}" for i in range(6)} - above)
    assert r.filter.spent(others).tolist() == [0.0] * len(others)  # below τ: nothing paid
    r.screen(scores)  # M = 2: a second retrieval is allowed
    s3 = r.screen(scores)  # budgets M·ε_q spent: every screened document is inactive
    assert s3.charged == {} and s3.padding == 4 and len(s3.retrieval) == 0
    assert r.filter.spent(sorted(above)).tolist() == [4.0] * len(above)


def test_threshold_budgets_persist_in_sqlite(kb: KnowledgeBase, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "budgets.sqlite"
    r = ThresholdRetriever(kb, k=2, tau=0.2, epsilon_q=1.0, store=SqliteBudgetStore(path, 1.0))
    first = r.retrieve("green pears autumn")
    assert len(first) > 0
    again = ThresholdRetriever(kb, k=2, tau=0.2, epsilon_q=1.0, store=SqliteBudgetStore(path, 1.0))
    assert len(again.retrieve("green pears autumn")) == 0


def test_score_bins_and_adaptive_stop_bin() -> None:
    edges = score_bins(0.1, top=1.0, bottom=0.0)
    assert edges.size == 11 and edges[0] == 1.0 and edges[-1] == pytest.approx(0.0)
    scores = np.array([0.95, 0.93, 0.74, 0.72, 0.71, 0.55, 0.3, 0.1])
    active = np.ones(scores.size, dtype=bool)
    # Secure discrete Laplace with scale 1/50: the noise is 0 except with probability
    # ~1e-21, so s̃ = 2 after bin [0.9, 1), 2 after [0.8, 0.9), 5 ≥ k = 4 after
    # [0.7, 0.8): stop there and release τ = 0.7.
    s = adaptive_screen(scores, active, 4, 50.0, edges, simulation=False)
    assert s.stop_bin == 2 and s.tau == pytest.approx(0.7)
    assert s.released.tolist() == [0, 1, 2, 3, 4]
    assert s.bin_counts[:3].tolist() == [2, 0, 3]
    inactive = active.copy()
    inactive[[2, 3]] = False  # exhausted documents are not counted (Alg. 2 line 5)
    s2 = adaptive_screen(scores, inactive, 4, 50.0, edges, simulation=False)
    assert s2.tau == pytest.approx(0.5) and s2.released.tolist() == [0, 1, 4, 5]
    never = adaptive_screen(scores, active, 50, 50.0, edges, simulation=False)
    assert never.stop_bin is None and never.released.size == scores.size


def test_murag_ada_charges_thr_and_rag(kb: KnowledgeBase) -> None:
    r = ThresholdRetriever(
        kb,
        k=2,
        mode="adaptive",
        epsilon_q=3.0,
        epsilon_thr=1.0,
        max_retrievals=1,
        bin_size=0.05,
        simulation=True,
        rng=0,
    )
    assert r.epsilon_rag == 2.0
    scores = kb.index.scores(kb.embedder.encode(["green pears autumn"]))[0]
    s = r.screen(scores)
    assert s.charged and set(s.charged.values()) <= {1.0, 3.0}
    for doc, paid in s.charged.items():
        assert r.filter.spent([doc])[0] == pytest.approx(paid)
    with pytest.raises(ConfigError, match="epsilon_thr"):
        ThresholdRetriever(kb, mode="adaptive", epsilon_q=1.0, epsilon_thr=1.0)


# ----------------------------------------------------------------------------- projection


def test_projection_variance_is_one_over_k() -> None:
    r = projection_matrix(400, 50, rng=0).astype(np.float64)
    assert r.shape == (50, 400)
    assert r.var() == pytest.approx(1 / 50, rel=0.03) and abs(r.mean()) < 0.002
    rad = projection_matrix(400, 50, kind="rademacher", rng=0)
    assert set(np.unique(np.round(rad * math.sqrt(50), 6)).tolist()) == {-1.0, 1.0}
    other = projection_matrix(400, 50, variance=0.04, rng=0)
    assert other.var() == pytest.approx(0.04, rel=0.03)


def test_projection_retrievers(kb: KnowledgeBase) -> None:
    rp = ProjectionRetriever(kb, k=2, dim=64, rng=0)
    assert rp.projected.shape == (6, 64)  # projected once, offline
    assert rp.retrieve("green pears autumn").event == NonPrivateEvent()  # no guarantee
    dp = DPProjectionRetriever(
        kb, k=2, dim=16, epsilon=5.0, delta=1e-4, clip=0.5, simulation=True, rng=0
    )
    assert np.linalg.norm(dp.clipped, axis=1).max() <= 0.5 + 1e-6
    # Replace-one neighbours: Δ = 2c, so σ is twice RP Alg. 2 line 9's σ
    assert dp.sigma == pytest.approx(2 * 0.5 * math.sqrt(2 * math.log(1.25 / 1e-4)) / 5.0)
    ev = dp.retrieve("apples").event
    assert ev.sigma == dp.sigma and ev.sensitivity == 1.0
    once = DPProjectionRetriever(kb, k=2, dim=16, noise="once", simulation=True, rng=0)
    events = [once.retrieve(q).event for q in ("apples", "night", "harbour")]
    assert isinstance(events[0], GaussianEvent)
    assert events[1:] == [NoOpEvent(), NoOpEvent()]  # one release in total
    clip = DPProjectionRetriever(kb, k=2, dim=16, clip_only=True, simulation=True, rng=0)
    assert clip.config()["simulation"] is True  # reports say the noise was simulated
    assert clip.retrieve("apples").event == NonPrivateEvent()
    assert dp_rp_sigma(1.0, 1e-5, 1.0, calibration="analytic") < dp_rp_sigma(1.0, 1e-5, 1.0)
    # RP Alg. 2 line 9 with Δ = 2c, for every ε (the paper's ε ∈ {1, 5, 10, 20} included)
    for eps in (0.3, 1.0, 5.0, 20.0):
        expected = 2 * 0.7 * math.sqrt(2 * math.log(1.25 / 1e-4)) / eps
        assert dp_rp_sigma(eps, 1e-4, 0.7) == expected
    with pytest.raises(ConfigError, match="'delta'"):
        dp_rp_sigma(1.0, 1.0, 1.0)


def test_sanity_distance_ratio_and_cosine_error_shrink_with_k() -> None:
    rng = np.random.default_rng(1)
    x, e = rng.standard_normal((5, 64)), rng.standard_normal((20, 64))
    rows = projection_sanity(x, e, [8, 32, 128], trials=8, rng=2)
    assert [r.k for r in rows] == [8, 32, 128]
    for r in rows:
        assert r.jl_low < r.l2_ratio_mean < r.jl_high
        assert abs(r.l2_ratio_mean - 1) < 0.1
    errs = [r.cosine_error for r in rows]
    assert errs[0] > errs[1] > errs[2]
    assert rows[0].l2_ratio_std > rows[2].l2_ratio_std


def test_expected_projected_cosine_vs_simulation() -> None:
    rho, k, d, n = 0.6, 10, 40, 4000
    u = np.zeros(d)
    u[0] = 1.0
    v = np.zeros(d)
    v[0], v[1] = rho, math.sqrt(1 - rho**2)
    gen = np.random.default_rng(3)
    r = gen.standard_normal((n, k, d)) / math.sqrt(k)
    a, b = r @ u, r @ v
    sim = float(np.mean(np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)))
    se = 0.3 / math.sqrt(n)
    classical = expected_projected_cosine(rho, k, form="classical")
    paper = expected_projected_cosine(rho, k, form="paper")
    assert abs(sim - classical) < 5 * se + 2 / k**2  # the classical O(1/k) term holds
    assert classical < rho and paper < rho  # both predict a downward bias


def test_top1_flip_bound_against_simulation() -> None:
    d = 32
    u = np.zeros(d)
    u[0] = 1.0
    v1 = np.zeros(d)
    v1[0], v1[1] = 0.8, 0.6
    vj = np.zeros(d)
    vj[0], vj[2] = 0.75, math.sqrt(1 - 0.75**2)
    delta = float(np.linalg.norm(v1 - vj))
    for k in (16, 64):
        sim = simulate_top1_flip(u, v1, vj, k, trials=1500, rng=k)
        bound = top1_flip_bound(delta, 0.8, k, eta_max=0.9)
        assert sim >= bound - 0.03  # eq. (18) is a (approximate) lower bound
    assert top1_flip_bound(0.1, 0.8, 16) > top1_flip_bound(0.1, 0.8, 256)
    assert top1_flip_bound(0.0, 0.8, 16) == pytest.approx(0.5)
    with pytest.raises(ConfigError):
        top1_flip_bound(0.1, 0.8, 3)


def test_threshold_renyi_filter_admits_more_small_charges(kb: KnowledgeBase) -> None:
    # ε_q = 0.1, M = 100: the pure filter admits exactly M = 100 retrievals of a document
    # (budget 10). A Rényi filter with the same (ε = 10, δ = 1e-6) target composes the
    # randomized-response curves of the charges and admits more, never exceeding ε.
    def retrievals(accounting: str) -> tuple[int, float]:
        r = ThresholdRetriever(
            kb, k=1, tau=-1.0, epsilon_q=0.1, max_retrievals=100, accounting=accounting
        )
        scores = np.full(len(kb), -2.0)
        scores[0] = 0.9  # only d0 passes the threshold
        count = 0
        while r.screen(scores).charged:
            count += 1
        return count, float(r.document_epsilon(["d0"])[0])

    pure, eps_pure = retrievals("pure")
    renyi, eps_renyi = retrievals("renyi")
    assert pure == 100 and eps_pure == pytest.approx(10.0)
    assert renyi > 150 and eps_renyi <= 10.0 + 1e-9
    with pytest.raises(ConfigError, match="accounting"):
        ThresholdRetriever(kb, accounting="zcdp")
