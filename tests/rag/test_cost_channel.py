"""One cost channel: every system's answer carries one typed event, and its reported ε is
checked against an independent composition of what the answer did (``dp_accounting``'s
closed forms, or the mechanism's own parameters).

A system without a guarantee says so (``NonPrivateEvent``, ε = ∞); one that used no
private data spends nothing (``NoOpEvent``, ε = 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import dp_accounting
import pytest

from ragprivacy.corpus import Corpus
from ragprivacy.dp import AccountPolicy, GaussianEvent, PureDpEvent, pld_epsilon
from ragprivacy.generate import Generator, Prompt, TokenDistribution, tokenize
from ragprivacy.rag import (
    KNNLM,
    DPVoteRAG,
    MuRAG,
    NaiveMultiRAG,
    NonRAG,
    StandardRAG,
    knn_datastore,
)
from ragprivacy.retrieval import KnowledgeBase, NoisyTopKRetriever, TenantRetriever, TopKRetriever
from ragprivacy.types import Completion, Document, NonPrivateEvent, NoOpEvent

QUESTION = "what does record 3 hold?"


class LLM(Generator):
    name = "fixed"

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return self.generate_batch([prompt])[0]

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        return [Completion("alpha", ("alpha",)) for _ in prompts]

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        return TokenDistribution(("alpha", "</s>"), (0.6, 0.4))

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        toks = tokenize(continuation)
        return Completion(continuation, tuple(toks), tuple(-1.0 for _ in toks))


KB = KnowledgeBase.build(
    Corpus([Document(f"d{i}", f"record {i} holds fact {i % 3}") for i in range(10)]),
    embedder="hashing",
)
VOTE = {"epsilon_token": 5.0, "max_tokens": 2, "vocabulary": ["alpha", "</s>"]}


def _noisy(sigma: float = 4.0) -> NoisyTopKRetriever:
    return NoisyTopKRetriever(
        KB, k=2, sigma=sigma, delta_acc=1e-5, score_range=(0.0, 1.0), simulation=True, rng=0
    )


def _gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    return float(dp_accounting.get_epsilon_gaussian(noise_multiplier, delta))


def test_no_guarantee_is_said_and_no_data_costs_nothing() -> None:
    plain = StandardRAG(TopKRetriever(KB, k=2), LLM()).answer(QUESTION)
    assert plain.privacy.event == NonPrivateEvent() and plain.privacy.epsilon == math.inf
    none = NonRAG(LLM()).answer(QUESTION)
    assert none.privacy.event == NoOpEvent() and none.privacy.epsilon == 0.0


def test_a_dp_retriever_under_standard_rag_reports_its_epsilon() -> None:
    r = _noisy()
    answer = StandardRAG(r, LLM()).answer(QUESTION, account="a")
    event = answer.privacy.event
    assert isinstance(event, GaussianEvent) and event == answer.retrieval.event  # type: ignore[union-attr]
    # the Δ of the clipped range (0, 1) is 1: one Gaussian with noise multiplier σ/Δ
    assert event.sensitivity == 1.0
    assert answer.privacy.delta == 1e-5
    assert answer.privacy.epsilon == pytest.approx(_gaussian_epsilon(4.0, 1e-5), rel=1e-6)
    # the guarantee covers which documents were retrieved, not the text read from them
    assert answer.privacy.scope == "retrieval"


def test_tenant_answers_report_the_account_gaussian_at_its_delta() -> None:
    svc = TenantRetriever(k=2, simulation=True, rng=0)
    svc.add_tenant("t", KB)
    svc.add_account("a", "t", AccountPolicy(rate_limit=5, epsilon=8.0, delta=1e-6))
    answer = StandardRAG(svc, LLM()).answer(QUESTION, account="a")
    event = answer.privacy.event
    assert isinstance(event, GaussianEvent) and answer.privacy.delta == 1e-6
    expected = _gaussian_epsilon(event.sigma / event.sensitivity, 1e-6)
    assert answer.privacy.epsilon == pytest.approx(expected, rel=1e-6)


def test_dp_voting_reports_the_vote_and_adds_a_private_retriever() -> None:
    plain = DPVoteRAG(TopKRetriever(KB, k=2), LLM(), epsilon=10.0, simulation=True, rng=0, **VOTE)
    answer = plain.answer(QUESTION)
    # c = ⌊ε/ε_token⌋ = 2 discoveries at most: ε = 2·5 (Alg. 4), the retrieval adds nothing
    assert answer.privacy.event == PureDpEvent(10.0) and answer.privacy.epsilon == 10.0
    assert answer.privacy.scope == "answer"  # the vote covers the whole released answer
    noisy = DPVoteRAG(_noisy(), LLM(), epsilon=10.0, simulation=True, rng=0, **VOTE)
    answer = noisy.answer(QUESTION, account="a")
    leaves = {type(leaf) for leaf, _ in answer.privacy.event.flatten()}
    assert leaves == {PureDpEvent, GaussianEvent}
    # RDP is an upper bound: at least the numerical PLD composition, at most the sum
    tight = pld_epsilon(answer.privacy.event, 1e-5)
    assert tight <= answer.privacy.epsilon <= 10.0 + _gaussian_epsilon(4.0, 1e-5) + 1e-9


def test_naive_multi_composes_sequentially() -> None:
    system = NaiveMultiRAG(
        TopKRetriever(KB, k=2), LLM(), epsilon_q=10.0, simulation=True, rng=0, **VOTE
    )
    costs = [system.answer(QUESTION, account="a").privacy for _ in range(3)]
    assert [c.epsilon for c in costs] == [10.0, 10.0, 10.0]
    assert [c.cumulative_epsilon for c in costs] == [10.0, 20.0, 30.0]


def test_murag_reports_each_documents_charge() -> None:
    system = MuRAG(
        TopKRetriever(KB, k=2),
        LLM(),
        tau=-1.0,
        epsilon_q=10.0,
        max_retrievals=3,
        simulation=True,
        rng=0,
        **VOTE,
    )
    cost = system.answer(QUESTION).privacy
    assert cost.event == PureDpEvent(10.0) and cost.epsilon == 10.0
    assert cost.per_document and set(cost.per_document.values()) == {10.0}


def test_knnlm_composes_one_search_per_token() -> None:
    corpus = Corpus([Document("a", "the vault code is seven nine two")])
    kb = KnowledgeBase.build(knn_datastore(corpus, window=3), embedder="hashing")
    noisy = NoisyTopKRetriever(kb, k=1, sigma=50.0, simulation=True, rng=0)
    answer = KNNLM(noisy, LLM(), lam=1.0, window=3, max_tokens=4, delta=1e-5).answer("vault")
    searches = answer.metadata["retrievals"]
    assert answer.privacy.event.flatten() == [(GaussianEvent(50.0, 2.0), searches)]
    expected = _gaussian_epsilon(25.0 / math.sqrt(searches), 1e-5)  # T Gaussians = one
    assert answer.privacy.epsilon == pytest.approx(expected, rel=1e-6)
    plain = KNNLM(TopKRetriever(kb, k=1), LLM(), lam=1.0, window=3, max_tokens=4)
    assert plain.answer("vault").privacy.epsilon == math.inf
