"""A failure is an answer: a request that fails after its retrieval is charged.

Every private system is run against a generator that fails once it has the documents:
the failure must cost what an answer costs (account ε, per-document filters,
per-account query counts), and its error must name no document. A generator that was
never reached (``GeneratorUnavailableError``) and a refusal before retrieval (a prompt
that could overflow the context) spend nothing. Each check is paired with its opposite,
so a system that tracks nothing, or charges everything, fails it. MURAG under a race
screens again without the documents another writer exhausted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from ragprivacy.corpus import Corpus
from ragprivacy.dp import AccountPolicy, MemoryBudgetStore, SqliteBudgetStore
from ragprivacy.errors import (
    BackendError,
    ChargedFailureError,
    ConfigError,
    GeneratorUnavailableError,
)
from ragprivacy.generate import (
    Generator,
    Prompt,
    PromptBudget,
    TokenDistribution,
    note_prompt_used,
    tokenize,
)
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
    """Answers 'alpha'; every call fails while ``down`` is set (``unreached``: before
    the prompt left, as a refused connection does), or once ``calls_left`` calls were
    answered. A call that answers notes its prompt used, as a remote generator does."""

    name = "flaky"

    def __init__(self) -> None:
        self.down = False
        self.unreached = False
        self.seen = ""
        self.calls_left: int | None = None

    def _check(self) -> None:
        if self.calls_left is not None:
            if self.calls_left == 0:
                self.down = True
            self.calls_left -= 1
        if self.down and self.unreached:
            raise GeneratorUnavailableError("connection refused")
        if self.down:
            # a backend error that quotes its prompt, as HTTP 400 bodies may
            raise BackendError(f"The generator did not answer; prompt held {self.seen!r}.")
        note_prompt_used()

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
def test_a_failure_after_retrieval_is_charged_like_an_answer(case: Case, tmp_path: object) -> None:
    llm = FlakyLLM()
    system, spend = case(llm, tmp_path)
    system.answer(QUESTION, account="alice")
    one_answer = spend()
    assert one_answer > 0.0  # an answer spends: the checks below can fail
    llm.down = True
    before = one_answer
    for _ in range(3):
        with pytest.raises(ChargedFailureError, match="charged like an answer") as err:
            system.answer(QUESTION, account="alice")
        # the backend's message (which quoted the retrieved documents) never reaches the
        # caller; it stays on the error for the operator's own debugging
        assert "record" not in str(err.value) and "did not answer" not in str(err.value)
        assert isinstance(err.value.withheld, BackendError)
        assert spend() >= before  # never given back
        before = spend()
    # charged as answers are (MURAG-ADA's noisy screening may charge no document at all on
    # one query, so the three together must have charged)
    assert spend() > one_answer


@pytest.mark.parametrize("case", CASES)
def test_a_generator_never_reached_spends_nothing(case: Case, tmp_path: object) -> None:
    llm = FlakyLLM()
    system, spend = case(llm, tmp_path)
    llm.down = llm.unreached = True
    for _ in range(3):
        with pytest.raises(GeneratorUnavailableError):
            system.answer(QUESTION, account="alice")
    assert spend() == 0.0
    llm.down = False
    system.answer(QUESTION, account="alice")
    assert spend() > 0.0


#: the systems that call the generator more than once per answer
MULTI_CALL = [c for c in CASES if c.id in {"dp_vote+noisy_topk", "naive_multi", "murag"}]


class Disagreeing(FlakyLLM):
    """Half the voters answer outside the vocabulary, so once a token is released the
    vote asks them again: an answer makes two generator calls."""

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        out = super().generate_batch(prompts, max_tokens=max_tokens)
        return [c if i % 2 else Completion("beta", ("beta",)) for i, c in enumerate(out)]


@pytest.mark.parametrize("case", MULTI_CALL)
def test_an_unreachable_generator_after_an_earlier_call_is_charged(
    case: Case, tmp_path: object
) -> None:
    """A generator that answered the first call of an answer (the documents left) and
    is unreachable at a later one: charged like an answer, never given back — whether
    the answer got to that call depends on what the first one said. Unreachable at the
    first call: still free."""
    llm = Disagreeing()
    system, spend = case(llm, tmp_path)
    llm.calls_left = 1
    llm.unreached = True
    with pytest.raises(ChargedFailureError, match="charged like an answer"):
        system.answer(QUESTION, account="alice")
    charged = spend()
    assert charged > 0.0 and llm.calls_left < 0  # it got to a second call
    llm.down, llm.calls_left = False, 0
    with pytest.raises(GeneratorUnavailableError):
        system.answer(QUESTION, account="alice")
    assert spend() == charged


@pytest.mark.parametrize("case", CASES)
def test_a_cancelled_request_is_charged(case: Case, tmp_path: object) -> None:
    """Ctrl-C during generation, after the documents were read: charged like an error."""

    class Interrupted(FlakyLLM):
        def _check(self) -> None:
            if self.down:
                raise KeyboardInterrupt

    llm = Interrupted()
    system, spend = case(llm, tmp_path)
    system.answer(QUESTION, account="alice")
    one_answer = spend()
    llm.down = True
    with pytest.raises(KeyboardInterrupt):
        system.answer(QUESTION, account="alice")
    assert spend() > one_answer


def test_a_prompt_that_could_overflow_is_refused_before_retrieval() -> None:
    """The check depends on the query and the budget only: refused for nothing, whatever
    the documents; a shorter query passes and spends."""
    r = _noisy()
    budget = PromptBudget(doc_tokens=64, context_tokens=400, overhead_tokens=16)
    system = StandardRAG(r, FlakyLLM(), prompt_budget=budget)
    with pytest.raises(ConfigError, match="Nothing was read or spent"):
        system.answer("why " * 60, account="alice")
    assert r.counter.used("alice") == 0
    response = system.answer(QUESTION, account="alice")
    assert r.counter.used("alice") == 1
    assert response.retrieved_ids


def test_budgeted_documents_have_one_size() -> None:
    """Each document in the prompt is cut and padded to its budget: the prompt's size is
    the same for every retrieval."""
    llm = FlakyLLM()
    seen: list[tuple[str, ...]] = []
    original = llm.generate_batch

    def spy(prompts: Sequence[Prompt], *, max_tokens: int | None = None) -> list[Completion]:
        seen.extend(p.context for p in prompts)
        return original(prompts, max_tokens=max_tokens)

    llm.generate_batch = spy  # type: ignore[method-assign]
    system = StandardRAG(TopKRetriever(KB, k=3), llm, prompt_budget=PromptBudget(doc_tokens=20))
    for q in (QUESTION, "subject", "record 11"):
        system.answer(q)
    assert seen and {len(d.encode()) for ctx in seen for d in ctx} == {20}


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
