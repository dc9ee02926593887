"""The contract every retriever meets, parametrised over every registered retriever (and
the multi-tenant router): see the factory entries in ``conftest.py``.

A retrieval's hits index into the knowledge base; its event says whether it is private
(a DP event with a positive, finite ε) or not (``NonPrivateEvent``), never ε = 0 for a
retrieval that read private data; secure mode refuses a user seed for the noise; a batch
is all or nothing, a released retrieval gives its budget back, an empty batch is free.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from ragprivacy.dp import event_epsilon
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.retrieval import KnowledgeBase, Retriever, retriever_names
from ragprivacy.types import NonPrivateEvent, NoOpEvent, Retrieval

BIG = 50  # a budget no test exhausts unless it means to


def _build(contract: SimpleNamespace, name: str, kb: KnowledgeBase, **kw: Any) -> Retriever:
    options = {"budget": BIG, "simulation": True, "rng": 0, **kw}
    return contract.spec(name).build(kb, **options)


class ExplodingIndex:
    """The knowledge base's index, failing whenever it scores the trigger query (a backend
    error in the middle of a batch)."""

    def __init__(self, index: Any, poison: np.ndarray) -> None:
        self._index = index
        self._poison = poison

    def __len__(self) -> int:
        return len(self._index)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    def _check(self, vectors: Any) -> None:
        q = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if np.any(np.all(np.isclose(q, self._poison, atol=1e-6), axis=1)):
            raise RuntimeError("index backend failed")

    def scores(self, vectors: Any) -> Any:
        self._check(vectors)
        return self._index.scores(vectors)

    def search(self, vectors: Any, k: int) -> Any:
        self._check(vectors)
        return self._index.search(vectors, k)


def test_every_registered_retriever_has_a_factory_entry(contract: SimpleNamespace) -> None:
    for name in retriever_names():
        contract.spec(name)  # fails naming the retriever that has none


def test_retrieve_and_retrieve_batch_agree(
    contract: SimpleNamespace, kb: KnowledgeBase, retriever_name: str
) -> None:
    spec = contract.spec(retriever_name)
    one, many = _build(contract, retriever_name, kb), _build(contract, retriever_name, kb)
    singles = [one.retrieve(q, account=contract.ACCOUNT) for q in contract.QUERIES]
    batch = many.retrieve_batch(contract.QUERIES, account=contract.ACCOUNT)
    assert len(batch) == len(contract.QUERIES)
    for a, b in zip(singles, batch):
        assert isinstance(a, Retrieval) and isinstance(b, Retrieval)
        assert len(a) == len(b) and len(a) <= contract.K
        if spec.full:
            assert len(a) == contract.K
        assert type(a.event) is type(b.event)
        if spec.deterministic:
            assert a.ids == b.ids and a.indices == b.indices
            np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-6)


def test_hits_index_into_the_knowledge_base(
    contract: SimpleNamespace, kb: KnowledgeBase, retriever_name: str
) -> None:
    spec = contract.spec(retriever_name)
    r = _build(contract, retriever_name, kb)
    base = r.knowledge_base_for(contract.ACCOUNT)
    assert base is kb
    for q, got in zip(
        contract.QUERIES, r.retrieve_batch(contract.QUERIES, account=contract.ACCOUNT)
    ):
        assert len(set(got.indices)) == len(got.indices)  # no document twice
        assert all(0 <= i < len(kb) for i in got.indices)
        assert got.ids == tuple(kb.index.ids[i] for i in got.indices)
        assert all(math.isfinite(s) for s in got.scores)
        assert list(got.scores) == sorted(got.scores, reverse=True)  # best first
        if spec.exact_scores:
            truth = kb.index.scores(kb.embedder.encode([q]))[0]
            np.testing.assert_allclose(got.scores, truth[list(got.indices)], atol=1e-5)
            if spec.full:  # the best documents, not merely true scores of some
                assert got.scores[-1] >= np.sort(truth)[::-1][contract.K - 1] - 1e-5


def test_the_event_says_whether_a_retrieval_is_private(
    contract: SimpleNamespace, kb: KnowledgeBase, retriever_name: str
) -> None:
    spec = contract.spec(retriever_name)
    r = _build(contract, retriever_name, kb)
    for got in r.retrieve_batch(contract.QUERIES, account=contract.ACCOUNT):
        event = got.event
        assert event == spec.event_of(r)
        if not spec.private:
            assert event == NonPrivateEvent()
            assert event_epsilon(event, 1e-6)[0] == math.inf
            continue
        assert event.guaranteed and event.flatten(), f"{event!r} charges nothing"
        assert not isinstance(event, (NoOpEvent, NonPrivateEvent))
        delta = r.delta_for(contract.ACCOUNT)
        eps, _ = event_epsilon(event, delta if delta is not None else 1e-6)
        assert 0 < eps < math.inf


def test_secure_mode_refuses_a_seed_for_the_noise(
    contract: SimpleNamespace, kb: KnowledgeBase, noisy_retriever: str
) -> None:
    spec = contract.spec(noisy_retriever)
    if spec.seed == "refused":
        with pytest.raises(ConfigError, match="Secure mode refuses 'rng'"):
            _build(contract, noisy_retriever, kb, simulation=False, rng=5)
        return
    # The seed fixes only public randomness (dp_projection's matrix R): two retrievers
    # built with it draw different secure noise, so their noisy scores differ.
    assert spec.seed == "public"
    a = _build(contract, noisy_retriever, kb, simulation=False, rng=5)
    b = _build(contract, noisy_retriever, kb, simulation=False, rng=5)
    ra = a.retrieve_batch(contract.QUERIES, account=contract.ACCOUNT)
    rb = b.retrieve_batch(contract.QUERIES, account=contract.ACCOUNT)
    assert [x.scores for x in ra] != [x.scores for x in rb]


def test_secure_mode_is_the_default_and_retrieves(
    contract: SimpleNamespace, kb: KnowledgeBase, noisy_retriever: str
) -> None:
    spec = contract.spec(noisy_retriever)
    r = spec.build(kb, budget=BIG, simulation=False, rng=None)
    assert getattr(r, "simulation", False) is False
    got = r.retrieve(contract.QUERIES[0], account=contract.ACCOUNT)
    assert len(got) == contract.K if spec.full else len(got) <= contract.K
    assert got.event == spec.event_of(r)


def test_a_batch_over_budget_is_refused_whole(
    contract: SimpleNamespace, kb: KnowledgeBase, refusing_retriever: str
) -> None:
    spec = contract.spec(refusing_retriever)
    r = _build(contract, refusing_retriever, kb, budget=3)
    r.retrieve_batch(contract.QUERIES[:2], account=contract.ACCOUNT)
    before = spec.spent(r)
    assert before == 2
    with pytest.raises(BudgetExhaustedError):
        r.retrieve_batch(contract.QUERIES[:2], account=contract.ACCOUNT)
    assert spec.spent(r) == before  # nothing of the refused batch was charged
    r.retrieve(contract.QUERIES[0], account=contract.ACCOUNT)  # the last query still fits
    assert spec.spent(r) == before + 1


def test_a_batch_that_fails_midway_charges_nothing(
    contract: SimpleNamespace, kb: KnowledgeBase, budgeted_retriever: str
) -> None:
    spec = contract.spec(budgeted_retriever)
    poison_query = f"{contract.QUERIES[1]} {contract.TRIGGER}"
    poison = kb.embedder.encode([poison_query])[0]
    broken = KnowledgeBase(kb.corpus, kb.embedder, ExplodingIndex(kb.index, poison))  # type: ignore[arg-type]
    r = _build(contract, budgeted_retriever, broken)
    r.retrieve(contract.QUERIES[0], account=contract.ACCOUNT)
    before = spec.spent(r)
    assert before > 0
    with pytest.raises(RuntimeError, match="index backend failed"):
        r.retrieve_batch([contract.QUERIES[2], poison_query], account=contract.ACCOUNT)
    assert spec.spent(r) == pytest.approx(before)


def test_release_gives_the_budget_back(
    contract: SimpleNamespace, kb: KnowledgeBase, budgeted_retriever: str
) -> None:
    spec = contract.spec(budgeted_retriever)
    r = _build(contract, budgeted_retriever, kb)
    kept = r.retrieve(contract.QUERIES[0], account=contract.ACCOUNT)
    before = spec.spent(r)
    failed = r.retrieve_batch(contract.QUERIES[1:], account=contract.ACCOUNT)
    assert spec.spent(r) > before
    r.release(failed, account=contract.ACCOUNT)  # their request failed: nothing was released
    assert spec.spent(r) == pytest.approx(before)
    r.release([], account=contract.ACCOUNT)
    assert spec.spent(r) == pytest.approx(before)
    assert kept.ids  # the kept retrieval is still charged
    assert before > 0


def test_an_empty_batch_returns_nothing_and_charges_nothing(
    contract: SimpleNamespace, kb: KnowledgeBase, retriever_name: str
) -> None:
    spec = contract.spec(retriever_name)
    r = _build(contract, retriever_name, kb)
    before = spec.spent(r) if spec.spent else None
    assert r.retrieve_batch([], account=contract.ACCOUNT) == []
    if spec.spent is not None:
        assert spec.spent(r) == before
        r.retrieve(contract.QUERIES[0], account=contract.ACCOUNT)
        assert spec.spent(r) > before  # the reading above would see a charge
