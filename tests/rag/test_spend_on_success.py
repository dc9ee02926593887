"""Spend only on success: a request that fails after reserving budget gives it back.

Every private system is run against a generator that is down: the call fails, and the
budget it reads afterwards (account ε, per-document filters, per-account query counts)
must equal what it was before. The same call with the generator up then spends, so each
check would notice a system that tracks nothing. MURAG under a race screens again
without the documents another writer exhausted, and no error names a document.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from ragprivacy.corpus import Corpus
from ragprivacy.dp import AccountPolicy, MemoryBudgetStore, SqliteBudgetStore
from ragprivacy.errors import BackendError
from ragprivacy.generate import Generator, Prompt, TokenDistribution, tokenize
from ragprivacy.rag import (
    DPVoteRAG,
    MuRAG,
    MuRAGAda,
    NaiveMultiRAG,
    RAGSystem,
    StandardRAG,
)
from ragprivacy.retrieval import (
    KnowledgeBase,
    NoisyTopKRetriever,
    TenantRetriever,
    ThresholdRetriever,
    TopKRetriever,
)
from ragprivacy.types import Completion, Document

QUESTION = "what is the secret of record 3?"


class FlakyLLM(Generator):
    """Answers 'alpha'; every call fails while ``down`` is set."""

    name = "flaky"

    def __init__(self) -> None:
        self.down = False
        self.seen = ""

    def _check(self) -> None:
        if self.down:
            # a backend error that quotes its prompt, as HTTP 400 bodies may
            raise BackendError(f"The generator did not answer; prompt held {self.seen!r}.")

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return self.generate_batch([prompt])[0]

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        self.seen = " ".join(d for p in prompts for d in p.context)
        self._check()
        return [Completion("alpha", ("alpha",)) for _ in prompts]

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        self._check()
        return TokenDistribution(("alpha", "</s>"), (0.6, 0.4))

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        self._check()
        toks = tokenize(continuation)
        return Completion(continuation, tuple(toks), tuple(-1.0 for _ in toks))


def _kb() -> KnowledgeBase:
    docs = [Document(f"d{i}", f"record {i} holds the secret {i % 3} of subject") for i in range(12)]
    return KnowledgeBase.build(Corpus(docs), embedder="hashing")


KB = _kb()
IDS = list(KB.index.ids)
VOTE = {"epsilon_token": 100.0, "max_tokens": 2, "vocabulary": ["alpha", "</s>"]}

# Each case builds (system, spend) where spend() reads the budget the system keeps.
Case = Callable[[FlakyLLM, object], tuple[RAGSystem, Callable[[], float]]]


def _noisy(**kw: object) -> NoisyTopKRetriever:
    return NoisyTopKRetriever(KB, k=2, queries_per_account=50, simulation=True, rng=0, **kw)


def _rag_noisy(llm: FlakyLLM, tmp: object) -> tuple[RAGSystem, Callable[[], float]]:
    r = _noisy()
    return StandardRAG(r, llm), lambda: float(r.counter.used("alice"))


def _rag_threshold(llm: FlakyLLM, tmp: object) -> tuple[RAGSystem, Callable[[], float]]:
    r = ThresholdRetriever(KB, k=2, tau=0.0, epsilon_q=1.0, max_retrievals=5, simulation=True)
    return StandardRAG(r, llm), lambda: float(r.filter.store.spent(IDS).sum())


def _dp_vote(llm: FlakyLLM, tmp: object) -> tuple[RAGSystem, Callable[[], float]]:
    r = _noisy()
    system = DPVoteRAG(r, llm, epsilon=200.0, simulation=True, rng=0, **VOTE)
    return system, lambda: float(r.counter.used("alice"))


def _naive(llm: FlakyLLM, tmp: object) -> tuple[RAGSystem, Callable[[], float]]:
    system = NaiveMultiRAG(
        TopKRetriever(KB, k=2),
        llm,
        epsilon_q=200.0,
        total_epsilon=2000.0,
        simulation=True,
        rng=0,
        **VOTE,
    )
    return system, lambda: system.spent("alice")


def _naive_noisy(llm: FlakyLLM, tmp: object) -> tuple[RAGSystem, Callable[[], float]]:
    r = _noisy()
    system = NaiveMultiRAG(r, llm, epsilon_q=200.0, simulation=True, rng=0, **VOTE)
    return system, lambda: system.spent("alice") + r.counter.used("alice")


def _murag(cls: type[MuRAG], store: str) -> Case:
    def build(llm: FlakyLLM, tmp: object) -> tuple[RAGSystem, Callable[[], float]]:
        budget = 5 * 200.0
        kept = (
            SqliteBudgetStore(tmp / "budgets.db", budget)  # type: ignore[operator]
            if store == "sqlite"
            else MemoryBudgetStore(budget)
        )
        system = cls(
            TopKRetriever(KB, k=2),
            llm,
            tau=0.0,
            epsilon_q=200.0,
            epsilon_thr=1.0,
            max_retrievals=5,
            bin_size=0.05,
            store=kept,
            simulation=True,
            rng=0,
            **VOTE,
        )
        return system, lambda: float(kept.spent(IDS).sum())

    return build


def _tenant(llm: FlakyLLM, tmp: object) -> tuple[RAGSystem, Callable[[], float]]:
    svc = TenantRetriever(k=2, simulation=True, rng=0)
    svc.add_tenant("acme", KB)
    svc.add_account("alice", "acme", AccountPolicy(rate_limit=5, epsilon=8.0))
    return StandardRAG(svc, llm), lambda: float(5 - svc.remaining("alice"))


CASES = [
    pytest.param(_rag_noisy, id="rag+noisy_topk"),
    pytest.param(_rag_threshold, id="rag+threshold"),
    pytest.param(_dp_vote, id="dp_vote+noisy_topk"),
    pytest.param(_naive, id="naive_multi"),
    pytest.param(_naive_noisy, id="naive_multi+noisy_topk"),
    pytest.param(_murag(MuRAG, "memory"), id="murag"),
    pytest.param(_murag(MuRAG, "sqlite"), id="murag+sqlite"),
    pytest.param(_murag(MuRAGAda, "memory"), id="murag_ada"),
    pytest.param(_tenant, id="multi-tenant"),
]


@pytest.mark.parametrize("case", CASES)
def test_a_failed_request_spends_nothing(case: Case, tmp_path: object) -> None:
    llm = FlakyLLM()
    system, spend = case(llm, tmp_path)
    llm.down = True
    for _ in range(3):
        with pytest.raises(BackendError, match="refunded and spent nothing") as err:
            system.answer(QUESTION, account="alice")
        # the backend's message (which quoted the retrieved documents) never reaches the
        # caller; it stays on the error for the provider's own debugging
        assert "record" not in str(err.value) and "did not answer" not in str(err.value)
        assert isinstance(err.value.withheld, BackendError)  # type: ignore[attr-defined]
    assert spend() == 0.0
    llm.down = False
    system.answer(QUESTION, account="alice")
    after_one = spend()
    assert after_one > 0.0  # the successful answer spent: the check above can fail
    llm.down = True
    with pytest.raises(BackendError):
        system.answer(QUESTION, account="alice")
    assert spend() == pytest.approx(after_one)


@pytest.mark.parametrize("case", CASES)
def test_a_cancelled_request_spends_nothing(case: Case, tmp_path: object) -> None:
    """Ctrl-C during generation: the reservation goes back as for an error."""

    class Interrupted(FlakyLLM):
        def _check(self) -> None:
            if self.down:
                raise KeyboardInterrupt

    llm = Interrupted()
    system, spend = case(llm, tmp_path)
    llm.down = True
    with pytest.raises(KeyboardInterrupt):
        system.answer(QUESTION, account="alice")
    assert spend() == 0.0


class RacingStore(MemoryBudgetStore):
    """Before the first charge lands, another writer spends some documents' budgets."""

    def __init__(self, capacity: float, victims: Sequence[str]) -> None:
        super().__init__(capacity)
        self.victims = list(victims)
        self.raced = False

    def charge(self, doc_ids, amount, *, charge_id=None):  # type: ignore[no-untyped-def]
        if not self.raced:
            self.raced = True
            super().charge(self.victims, float(self.capacity[0]))  # the other writer
        return super().charge(doc_ids, amount, charge_id=charge_id)


@pytest.mark.parametrize("cls", [MuRAG, MuRAGAda])
def test_murag_under_a_race_drops_the_exhausted_documents(cls: type[MuRAG]) -> None:
    victims = IDS[:6]
    store = RacingStore(1000.0, victims)
    system = cls(
        TopKRetriever(KB, k=2),
        FlakyLLM(),
        tau=-1.0,  # every document passes the fixed threshold
        epsilon_q=200.0,
        epsilon_thr=1.0,
        bin_size=0.05,
        max_retrievals=5,
        store=store,
        simulation=True,
        rng=0,
        **VOTE,
    )
    response = system.answer(QUESTION, account="alice")  # no DocumentBudgetExhaustedError
    assert store.raced
    charged = set(response.privacy.per_document)
    assert charged and not charged & set(victims)
    assert not set(response.retrieved_ids) & set(victims)
    # the victims paid only the other writer's charge: the refused attempt left nothing
    np.testing.assert_allclose(store.spent(victims)[:, 0], 1000.0)
