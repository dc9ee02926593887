"""The multi-tenant retriever: tenant isolation, rate limits, noise before top-K, M4 switch,
and StandardRAG over it."""

from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.corpus import Corpus
from ragprivacy.dp import AccountPolicy, GaussianNoisyTopK, compose, exact_gaussian_epsilon
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.generate import Prompt, create_generator
from ragprivacy.rag import Query, StandardRAG
from ragprivacy.retrieval import KnowledgeBase, TenantAccessError, TenantRetriever
from ragprivacy.types import Document


def _kb(prefix: str, n: int = 8) -> KnowledgeBase:
    docs = [
        Document(f"{prefix}-{i}", f"{prefix} record {i} about subject {i % 4}") for i in range(n)
    ]
    return KnowledgeBase.build(Corpus(docs, name=prefix), embedder="hashing")


def _service(**kw) -> TenantRetriever:
    svc = TenantRetriever(k=3, **kw)
    svc.add_tenant("acme", _kb("acme"))
    svc.add_tenant("globex", _kb("globex"))
    svc.add_account("alice", "acme", AccountPolicy(rate_limit=5, epsilon=8.0))
    svc.add_account("bob", "globex", AccountPolicy(rate_limit=5, epsilon=8.0, sigma=1e-3))
    return svc


def test_queries_only_see_their_tenant_and_m4_is_off_by_default() -> None:
    svc = _service(simulation=True, rng=0)
    r = svc.retrieve("subject 1", account="alice")
    assert len(r) == 3 and all(i.startswith("acme-") for i in r.ids)
    with pytest.raises(TenantAccessError):
        svc.retrieve("subject 1", account="alice", tenant="globex")
    assert svc.remaining("alice") == 4  # the refused query was not charged
    m4 = _service(simulation=True, rng=0, shared_backend=True)
    r = m4.retrieve("subject 1", account="alice", tenant="globex")
    assert all(i.startswith("globex-") for i in r.ids)


def test_rate_limit_is_checked_before_charging() -> None:
    svc = _service(simulation=True, rng=0)
    svc.retrieve_batch(["a", "b", "c"], account="alice")
    with pytest.raises(BudgetExhaustedError):
        svc.retrieve_batch(["d", "e", "f"], account="alice")
    assert svc.remaining("alice") == 2
    svc.open_window()
    assert svc.remaining("alice") == 5


def test_policy_calibration_and_validation() -> None:
    # The paper's Δ = 1 as printed (no clipping) and honestly (scores clipped to [0, 1]).
    paper = AccountPolicy(rate_limit=10_000, epsilon=1.0, score_range=None, sensitivity=1.0)
    assert paper.noise_sigma == pytest.approx(3584, rel=1e-3)
    unit = AccountPolicy(rate_limit=10_000, epsilon=1.0, score_range=(0.0, 1.0))
    assert unit.sensitivity == 1.0 and unit.noise_sigma == paper.noise_sigma
    # Default: raw cosine scores in [-1, 1], replace-one-slot, Δ = 2, twice the σ.
    p = AccountPolicy(rate_limit=10_000, epsilon=1.0, delta=1e-6)
    assert p.score_range == (-1.0, 1.0) and p.sensitivity == 2.0
    assert p.noise_sigma == pytest.approx(2 * 3584.4, rel=1e-3)
    exact = AccountPolicy(
        rate_limit=10_000, epsilon=1.0, calibration="exact", score_range=(0.0, 1.0)
    ).noise_sigma
    assert exact == pytest.approx(422.5, rel=1e-2)
    with pytest.raises(ConfigError, match="at least the width"):
        AccountPolicy(rate_limit=10, epsilon=1.0, sensitivity=1.0)  # [-1, 1] needs Δ >= 2
    with pytest.raises(ConfigError, match="sensitivity"):
        AccountPolicy(rate_limit=10, epsilon=1.0, score_range=None)
    with pytest.raises(ConfigError):
        AccountPolicy(rate_limit=0, epsilon=1.0)
    with pytest.raises(ConfigError):
        TenantRetriever(rng=1)  # secure mode refuses a seed


def test_noise_is_added_before_selection() -> None:
    # With a tiny sigma the noisy top-K equals the clean top-K; with a large one it is
    # nearly uniform over the whole index (every score was noised, not only the winners).
    kb = _kb("acme", n=30)
    clean = set(np.argsort(-kb.index.scores(kb.embedder.encode(["subject 2"]))[0])[:3])
    svc = TenantRetriever(k=3, simulation=True, rng=4)
    svc.add_tenant("acme", kb)
    svc.add_account("quiet", "acme", AccountPolicy(rate_limit=10, epsilon=1.0, sigma=1e-6))
    svc.add_account("loud", "acme", AccountPolicy(rate_limit=2000, epsilon=1.0, sigma=50.0))
    assert set(svc.retrieve("subject 2", account="quiet").indices) == clean
    q = np.repeat(kb.embedder.encode(["subject 2"]), 2000, axis=0)
    sel = svc.search(q, account="loud")
    counts = np.bincount(sel.indices.ravel(), minlength=30)
    # 6,000 selections over 30 documents: ~200 each (select-before-noise: only 3 ever)
    assert counts.min() > 100 and counts.max() < 300


def test_scores_are_clipped_to_the_policy_range() -> None:
    kb = _kb("acme", n=30)
    q = kb.embedder.encode(["subject 2"])
    scores = kb.index.scores(q)[0]
    best = int(np.argmax(scores))
    assert scores[best] > 0.3 and (scores > 0.3).sum() >= 2
    svc = TenantRetriever(k=1, simulation=True, rng=2)
    svc.add_tenant("acme", kb)
    pol = {"rate_limit": 400, "epsilon": 1.0, "sigma": 1e-3}
    svc.add_account("raw", "acme", AccountPolicy(**pol))
    svc.add_account("low", "acme", AccountPolicy(**pol, score_range=(-1.0, 0.3)))
    raw = svc.search(np.repeat(q, 200, axis=0), account="raw")
    assert set(raw.indices.ravel()) == {best} and raw.event.sensitivity == 2.0
    low = svc.search(np.repeat(q, 200, axis=0), account="low")
    # every score above 0.3 is clipped to 0.3: the noise now picks among them
    assert len(set(low.indices.ravel())) == int((scores >= 0.3).sum())
    assert low.event.sensitivity == pytest.approx(1.3)
    assert svc.describe()["accounts"]["low"]["score_range"] == (-1.0, 0.3)


def test_secure_noise() -> None:
    secure = _service()
    r = secure.retrieve("subject 3", account="bob")  # sigma 1e-3: noise cannot reorder
    assert len(r) == 3 and r.event is not None
    assert r.ids[0] == _service(simulation=True, rng=1).retrieve("subject 3", account="bob").ids[0]
    assert len(secure.retrieve("subject 3", account="alice")) == 3


def test_tenant_rag_system_answers_for_an_account() -> None:
    svc = _service(simulation=True, rng=0)
    gen = create_generator("reference", background=["plain background text about things"])
    system = StandardRAG(svc, gen)
    resp = system.answer("what is record 2 about?", account="alice")
    assert isinstance(resp.text, str)
    assert resp.retrieval is not None and all(i.startswith("acme-") for i in resp.retrieval.ids)
    with pytest.raises(ConfigError):
        system.answer("x")


def test_simulated_noise_is_the_seeded_stream_in_query_order() -> None:
    """One mechanism per account draws, search after search, the same noise a fresh
    GaussianNoisyTopK per search would draw from the same seeded stream."""
    kb = _kb("acme", n=12)
    svc = TenantRetriever(k=3, simulation=True, rng=11)
    svc.add_tenant("acme", kb)
    policies = {
        "a": AccountPolicy(rate_limit=20, epsilon=8.0, sigma=0.05),
        "b": AccountPolicy(rate_limit=20, epsilon=8.0, sigma=0.3, score_range=(0.0, 1.0)),
    }
    for name, policy in policies.items():
        svc.add_account(name, "acme", policy)
    reference = np.random.default_rng(11)
    for i in range(4):
        for name, policy in policies.items():
            vectors = np.asarray(
                kb.embedder.encode([f"subject {i}", f"record {i + 2}"]), np.float32
            )
            got = svc.search(vectors, account=name)
            want = GaussianNoisyTopK(
                sigma=policy.noise_sigma,
                k=3,
                sensitivity=policy.sensitivity,
                score_range=policy.score_range,
                simulation=True,
            ).select(kb.index.scores(vectors), rng=reference)
            np.testing.assert_array_equal(got.indices, want.indices)
            np.testing.assert_array_equal(got.noisy_scores, want.noisy_scores)
            assert got.event == want.event_per_query


def test_tenant_answers_are_generated_from_the_retrieved_documents() -> None:
    """Same seed, same retrievals; each answer is the generator's on the query's prompt."""
    gen = create_generator("reference", background=["plain background text about things"])
    system = StandardRAG(_service(simulation=True, rng=5), gen, instruction="Be brief.")
    twin = _service(simulation=True, rng=5)
    queries = ["what is record 2 about?", Query("subject 3", retrieval_text="record 3")]
    answers = system.answer_batch(queries, account="alice")
    retrievals = twin.retrieve_batch(["what is record 2 about?", "record 3"], account="alice")
    kb = twin.knowledge_base("acme")
    for query, answer, retrieval in zip(queries, answers, retrievals):
        q = Query.of(query)
        assert answer.retrieval == retrieval
        prompt = Prompt(q.task, q.text, kb.texts(retrieval.indices), "Be brief.", q.options)
        assert answer.text == gen.generate_batch([prompt])[0].text
        assert answer.privacy.mechanism == "tenant"
    assert system.answer_batch([], account="alice") == []


@pytest.mark.parametrize("simulation", [False, True])
def test_account_events_never_exceed_the_account_epsilon(simulation: bool) -> None:
    """σ is calibrated for the Δ the events charge, so the tight ("exact") calibration
    composes to ε_acc and no more (secure scores are clipped to grid points inside the
    range, so the secure Δ is the range's width, as in simulation)."""
    svc = TenantRetriever(k=3, simulation=simulation, rng=0 if simulation else None)
    svc.add_tenant("acme", _kb("acme"))
    policy = AccountPolicy(rate_limit=5, epsilon=2.0, delta=1e-6, calibration="exact")
    svc.add_account("alice", "acme", policy)
    events = [svc.retrieve(f"subject {i}", account="alice").event for i in range(5)]
    spent = exact_gaussian_epsilon(compose(events), 1e-6)
    assert spent <= 2.0 * (1 + 1e-9)
    assert spent == pytest.approx(2.0, rel=1e-6)  # and the calibration is still tight
