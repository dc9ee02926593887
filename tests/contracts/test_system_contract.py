"""The contract every RAG system meets, parametrised over every registered system, and
for the systems that take any retriever over every retriever (``conftest.RETRIEVERS``).

One cost channel: an answer's ``privacy.event`` is the composition of what it consumed
(the vote, the per-document charge, each retrieval) and its ε is that composition's,
recomputed here independently with ``dp_accounting``; plain RAG says ε = ∞, no data
ε = 0. Secure by default: no system takes a user seed unless it simulates. A batch over
budget is refused and spends nothing. A failure is an answer: a generator that fails (at
once, midway, or on the last query of a batch) after private data was read leaves the
request charged and says so (``ChargedFailureError``); one that fails before anything was
read spends nothing; either way its error names no document. ``Response.public()``
carries no retrieval and no per-document detail.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import dp_accounting
import pytest

from ragprivacy.dp import GaussianEvent, MemoryBudgetStore, PureDpEvent
from ragprivacy.errors import BudgetExhaustedError, ChargedFailureError, ConfigError
from ragprivacy.generate import Generator
from ragprivacy.rag import (
    BackgroundRandomAPI,
    RAGSystem,
    create_system,
    synthetic_datastore,
    system_names,
)
from ragprivacy.rag.base import REPORT_DELTA
from ragprivacy.retrieval import KnowledgeBase, Retriever, retriever_names
from ragprivacy.types import NonPrivateEvent, NoOpEvent, PrivacyEvent, Response

EPS = 10.0  # the vote's budget: c = EPS / epsilon_token = 5 discoveries of 2
VOTE = {"epsilon_token": 2.0, "max_tokens": 3, "vocabulary": ["alpha", "beta", "</s>"]}
KNN_TOKENS = 3  # the stub's "alpha" always wins the kNN mix (λ = 0.1): 3 searches an answer
KNN_DELTA = 1e-5
ALL = [*sorted(retriever_names()), "tenant"]  # the multi-tenant router is a Retriever too

# Which retrievers each system is run over: every one where the system documents that any
# retriever works (standard RAG; DP voting: "any retriever works"); the non-private and a
# private one for the others (kNN-LM: "any retriever plugs in" over its datastore; the
# MURAG pipelines only borrow the retriever's knowledge base and k).
OVER: dict[str, list[str | None]] = {
    "non-rag": [None],
    "rag": [*ALL],
    "dp_vote": [*ALL],
    "naive_multi": ["topk", "noisy_topk"],
    "knnlm": ["topk", "noisy_topk", "projection", "dp_projection"],
    "murag": ["topk"],
    "murag_ada": ["topk"],
    "remote": [None],  # the endpoint retrieves on its side; ours is not used
    "pe": [None],  # it retrieves from its own synthetic datastore
}
VARIANTS = [
    pytest.param((s, r), id=s if r is None else f"{s}+{r}")
    for s in system_names()
    for r in OVER.get(s, ["<no factory entry>"])
]


Leaves = Counter  # leaf event -> how many times the answer consumed it


def leaves(event: PrivacyEvent) -> Leaves:
    out: Leaves = Counter()
    for leaf, count in event.flatten():
        out[leaf] += count
    return out


@dataclass
class Built:
    """A system under test and what it must report.

    ``expected``: the leaf events each answer consumes, built from the settings (not from
    the response's own event). ``delta``: δ at which a Gaussian part is stated.
    ``spent()``: the budget used so far (``None``: it keeps none). ``refuses``: an
    answer over budget is refused. ``deterministic``: the same query, the same answer.
    ``synthetic``: what it retrieves are synthetic documents, none of the corpus.
    """

    system: RAGSystem
    private: bool
    expected: Leaves
    delta: float | None = None
    spent: Callable[[], float] | None = None
    refuses: bool = False
    deterministic: bool = False
    retriever: Retriever | None = field(default=None)
    records_failures: bool = False  # a failed call is a Response with its outcome
    synthetic: bool = False


Builder = Callable[..., Built]


def _retriever(
    contract: SimpleNamespace, name: str, kb: KnowledgeBase, budget: int, sim: bool, rng: Any
) -> tuple[Any, Retriever]:
    spec = contract.spec(name)
    return spec, spec.build(kb, budget=budget, simulation=sim, rng=rng)


def _retrieval_part(spec: Any, r: Retriever, count: int = 1) -> Leaves:
    return Counter({spec.event_of(r): count}) if spec.private else Counter()


def _non_rag(ctx: SimpleNamespace, rname: None, gen: Generator, **_: Any) -> Built:
    system = create_system("non-rag", generator=gen)
    return Built(system, private=False, expected=Counter(), deterministic=True)


def _rag(
    ctx: SimpleNamespace, rname: str, gen: Generator, *, budget: int, sim: bool, rng: Any
) -> Built:
    spec, r = _retriever(ctx.contract, rname, ctx.kb, budget, sim, rng)
    system = create_system("rag", retriever=r, generator=gen)
    event = spec.event_of(r)
    return Built(
        system,
        private=spec.private,
        expected=leaves(event),
        delta=r.delta_for(ctx.contract.ACCOUNT),
        spent=(lambda: spec.spent(r)) if spec.spent else None,
        refuses=spec.refuses,
        deterministic=spec.deterministic,
        retriever=r,
    )


def _dp_vote(
    ctx: SimpleNamespace, rname: str, gen: Generator, *, budget: int, sim: bool, rng: Any
) -> Built:
    spec, r = _retriever(ctx.contract, rname, ctx.kb, budget, sim, rng)
    system = create_system(
        "dp_vote", retriever=r, generator=gen, epsilon=EPS, simulation=sim, rng=rng, **VOTE
    )
    return Built(
        system,
        private=True,
        expected=Counter({PureDpEvent(EPS): 1}) + _retrieval_part(spec, r),
        delta=r.delta_for(ctx.contract.ACCOUNT),
        spent=(lambda: spec.spent(r)) if spec.spent else None,
        refuses=spec.refuses,
        retriever=r,
    )


def _naive_multi(
    ctx: SimpleNamespace, rname: str, gen: Generator, *, budget: int, sim: bool, rng: Any
) -> Built:
    spec, r = _retriever(ctx.contract, rname, ctx.kb, budget, sim, rng)
    system = create_system(
        "naive_multi",
        retriever=r,
        generator=gen,
        epsilon_q=EPS,
        total_epsilon=budget * EPS,
        simulation=sim,
        rng=rng,
        **VOTE,
    )
    account = ctx.contract.ACCOUNT

    def spent() -> float:
        return system.spent(account) + (spec.spent(r) if spec.spent else 0.0)  # type: ignore[attr-defined]

    return Built(
        system,
        private=True,
        expected=Counter({PureDpEvent(EPS): 1}) + _retrieval_part(spec, r),
        delta=r.delta_for(account),
        spent=spent,
        refuses=True,
        retriever=r,
    )


def _knnlm(
    ctx: SimpleNamespace, rname: str, gen: Generator, *, budget: int, sim: bool, rng: Any
) -> Built:
    spec, r = _retriever(ctx.contract, rname, ctx.knn_kb, budget * KNN_TOKENS, sim, rng)
    system = create_system(
        "knnlm",
        retriever=r,
        generator=gen,
        lam=0.1,
        window=ctx.contract.KNN_WINDOW,
        max_tokens=KNN_TOKENS,
        delta=KNN_DELTA,
    )
    event = spec.event_of(r)
    return Built(
        system,
        private=spec.private,
        expected=Counter({leaf: c * KNN_TOKENS for leaf, c in leaves(event).items()}),
        delta=KNN_DELTA,
        spent=(lambda: spec.spent(r)) if spec.spent else None,
        refuses=spec.refuses,
        deterministic=spec.deterministic,
        retriever=r,
    )


def _murag(name: str) -> Builder:
    def build(
        ctx: SimpleNamespace, rname: str, gen: Generator, *, budget: int, sim: bool, rng: Any
    ) -> Built:
        _, r = _retriever(ctx.contract, rname, ctx.kb, budget, sim, rng)
        store = MemoryBudgetStore(budget * EPS)
        system = create_system(
            name,
            retriever=r,
            generator=gen,
            tau=-1.0,  # every document passes the fixed threshold
            bin_size=2.0,  # one bin: the adaptive threshold releases every document
            epsilon_q=EPS,
            epsilon_thr=1.0,
            max_retrievals=budget,
            store=store,
            simulation=sim,
            rng=rng,
            **VOTE,
        )
        ids = list(ctx.kb.index.ids)
        return Built(
            system,
            private=True,
            expected=Counter({PureDpEvent(EPS): 1}),
            spent=lambda: float(store.spent(ids).sum()),
            retriever=r,
        )

    return build


def _remote(ctx: SimpleNamespace, rname: None, gen: Generator, **_: Any) -> Built:
    # A deployed endpoint we do not run: we can state no guarantee for its answers
    # (NonPrivateEvent), and a failed call is recorded as such, not raised, so that one bad
    # call does not stop an audit of the endpoint (tests/rag/test_remote.py).
    system = create_system("remote", generator=gen)
    return Built(
        system,
        private=False,
        expected=Counter({NonPrivateEvent(): 1}),
        deterministic=True,
        records_failures=True,
    )


def _pe(
    ctx: SimpleNamespace, rname: None, gen: Generator, *, sim: bool, rng: Any, **_: Any
) -> Built:
    # Plain RAG over a DP synthetic datastore: the release is paid once when the datastore
    # is built; an answer reads only synthetic documents (here public background text,
    # varied by the identity) and spends nothing.
    store = synthetic_datastore(
        ctx.kb.corpus,
        random_api=BackgroundRandomAPI("medical"),
        variation_api=lambda texts, _rng: list(texts),
        epsilon=10.0,
        delta=1e-5,
        embedder="hashing",
        iterations=1,
        n_synthetic=6,
        simulation=sim,
        rng=rng,
    )
    system = create_system("pe", generator=gen, datastore=store, k=ctx.contract.K)
    return Built(system, private=False, expected=Counter(), deterministic=True, synthetic=True)


SYSTEMS: dict[str, Builder] = {
    "non-rag": _non_rag,
    "rag": _rag,
    "dp_vote": _dp_vote,
    "naive_multi": _naive_multi,
    "knnlm": _knnlm,
    "murag": _murag("murag"),
    "murag_ada": _murag("murag_ada"),
    "remote": _remote,
    "pe": _pe,
}


@pytest.fixture
def build(
    request: pytest.FixtureRequest,
    contract: SimpleNamespace,
    kb: KnowledgeBase,
    knn_kb: KnowledgeBase,
) -> Callable[..., Built]:
    """``build(generator, budget=50, simulation=True)`` builds this test's variant."""
    system_name, retriever_name = request.param
    builder = SYSTEMS.get(system_name)
    if builder is None or retriever_name == "<no factory entry>":
        pytest.fail(
            f"System {system_name!r} is registered but has no factory entry: add it to "
            "SYSTEMS and OVER in tests/contracts/test_system_contract.py."
        )
    ctx = SimpleNamespace(contract=contract, kb=kb, knn_kb=knn_kb)

    def make(gen: Generator, *, budget: int = 50, simulation: bool = True) -> Built:
        rng = 0 if simulation else None
        return builder(ctx, retriever_name, gen, budget=budget, sim=simulation, rng=rng)

    return make


def independent_epsilon(expected: Leaves, delta: float) -> tuple[float, float]:
    """Bounds on ε at ``delta`` of the composition of ``expected``, from ``dp_accounting``
    and the textbook rules only (no ragprivacy accounting): equal bounds where the
    composition is exact (pure sums; Gaussians compose to μ = √Σμ²); for pure and
    Gaussian parts together, at least the Gaussian part alone and the largest pure event
    alone (as randomized response), at most their sum (sequential composition)."""
    if any(isinstance(leaf, NonPrivateEvent) for leaf in expected):
        return math.inf, math.inf
    pure = [(leaf.epsilon, c) for leaf, c in expected.items() if isinstance(leaf, PureDpEvent)]
    mu_sq = sum(
        c * (leaf.sensitivity / leaf.sigma) ** 2
        for leaf, c in expected.items()
        if isinstance(leaf, GaussianEvent)
    )
    others = [
        leaf for leaf in expected if not isinstance(leaf, (PureDpEvent, GaussianEvent, NoOpEvent))
    ]
    assert not others, f"teach independent_epsilon the events {others}"
    pure_sum = sum(e * c for e, c in pure)
    gauss = dp_accounting.get_epsilon_gaussian(1 / math.sqrt(mu_sq), delta) if mu_sq else 0.0
    if not pure or not mu_sq:
        return pure_sum + gauss, pure_sum + gauss
    top = max(e for e, _ in pure)
    p = math.exp(top) / (1 + math.exp(top))
    rr = math.log((p - delta) / (1 - p))  # ε(δ) of ε-randomized response
    return max(gauss, rr), pure_sum + gauss


def _spent(built: Built) -> float:
    return built.spent() if built.spent is not None else 0.0


# --------------------------------------------------------------------------- the contracts


def test_every_registered_system_has_a_factory_entry() -> None:
    missing = sorted(set(system_names()) - set(SYSTEMS) | set(system_names()) - set(OVER))
    assert not missing, f"Add factory entries to SYSTEMS and OVER for: {missing}"


@pytest.mark.parametrize("build", VARIANTS, indirect=True)
def test_answer_and_answer_batch_return_responses(
    build: Callable[..., Built],
    contract: SimpleNamespace,
    generator: Generator,
) -> None:
    one, many = build(generator), build(generator)
    singles = [one.system.answer(q, account=contract.ACCOUNT) for q in contract.QUERIES]
    batch = many.system.answer_batch(contract.QUERIES, account=contract.ACCOUNT)
    assert len(batch) == len(contract.QUERIES)
    assert all(isinstance(r, Response) for r in [*singles, *batch])
    if one.deterministic:
        assert [r.text for r in singles] == [r.text for r in batch]
        assert [r.privacy.event for r in singles] == [r.privacy.event for r in batch]
    before = _spent(many)
    assert many.system.answer_batch([], account=contract.ACCOUNT) == []
    assert _spent(many) == before


@pytest.mark.parametrize("build", VARIANTS, indirect=True)
def test_the_answer_reports_the_composition_of_what_it_consumed(
    build: Callable[..., Built],
    contract: SimpleNamespace,
    generator: Generator,
) -> None:
    built = build(generator)
    for resp in built.system.answer_batch(contract.QUERIES, account=contract.ACCOUNT):
        cost = resp.privacy
        want = built.expected
        assert leaves(cost.event) == want
        if resp.retrieval is not None and resp.retrieval.event.guaranteed:
            # one cost channel: the retrieval's own event is part of the answer's
            assert not leaves(resp.retrieval.event) - leaves(cost.event)
        if not built.private:
            if not want:  # no private data used: it spends nothing, ε = 0
                assert cost.event == NoOpEvent() and cost.epsilon == 0.0
            else:  # no guarantee: said with NonPrivateEvent, ε = ∞, never 0
                assert not cost.event.guaranteed and cost.epsilon == math.inf
            continue
        assert cost.event.guaranteed and want, "a private answer charges a non-zero event"
        has_gaussian = any(isinstance(leaf, GaussianEvent) for leaf in want)
        if has_gaussian:
            assert cost.delta == (built.delta if built.delta is not None else REPORT_DELTA)
        low, high = independent_epsilon(want, cost.delta if has_gaussian else REPORT_DELTA)
        assert 0 < cost.epsilon < math.inf
        assert low * (1 - 1e-6) - 1e-9 <= cost.epsilon <= high * (1 + 1e-6) + 1e-9


@pytest.mark.parametrize("system_name", system_names())
def test_secure_mode_refuses_a_seed(
    system_name: str,
    contract: SimpleNamespace,
    kb: KnowledgeBase,
    generator: Generator,
) -> None:
    """No system takes a user seed without simulating: either it refuses it as insecure,
    or it has no 'rng' option at all (its randomness is its retriever's)."""
    topk = contract.spec("topk").build(kb, budget=50, simulation=False, rng=None)
    with pytest.raises(ConfigError, match=r"Secure mode refuses 'rng'|Bad options.*'rng'"):
        create_system(system_name, retriever=topk, generator=generator, rng=5)


@pytest.mark.parametrize("build", VARIANTS, indirect=True)
def test_secure_mode_is_the_default_and_answers(
    build: Callable[..., Built],
    contract: SimpleNamespace,
    generator: Generator,
) -> None:
    built = build(generator, simulation=False)
    for part in (built.system, built.retriever, getattr(built.system, "vote", None)):
        assert getattr(part, "simulation", False) is False
    resp = built.system.answer(contract.QUERIES[0], account=contract.ACCOUNT)
    assert leaves(resp.privacy.event) == built.expected


@pytest.mark.parametrize("build", VARIANTS, indirect=True)
def test_a_batch_over_budget_spends_only_what_it_answered(
    build: Callable[..., Built],
    contract: SimpleNamespace,
    generator: Generator,
) -> None:
    built = build(generator, budget=1)  # room for one answer
    if not built.refuses:
        # screened, not refused: a per-document filter drops what is spent (MURAG), a
        # system without a budget has nothing to refuse; the batch is answered whole
        out = built.system.answer_batch(contract.QUERIES[:2], account=contract.ACCOUNT)
        assert len(out) == 2
        return
    with pytest.raises(BudgetExhaustedError) as err:
        built.system.answer_batch(contract.QUERIES[:2], account=contract.ACCOUNT)
    answered = err.value.answered
    assert len(answered) <= 1
    if answered:  # refused partway: the first answer was paid for once, and is returned
        assert _spent(built) > 0 and answered[0].text is not None  # type: ignore[attr-defined]
        with pytest.raises(BudgetExhaustedError):  # nothing is left to answer with
            built.system.answer(contract.QUERIES[0], account=contract.ACCOUNT)
        return
    assert _spent(built) == 0, "a batch refused whole spent part of the budget"
    built.system.answer(contract.QUERIES[0], account=contract.ACCOUNT)  # one still fits
    assert _spent(built) > 0


def _assert_recorded_failure(
    built: Built, contract: SimpleNamespace, queries: list[str], answered: int = 0
) -> None:
    """A system that records failed calls: the batch returns, its first ``answered``
    responses are answers, the rest carry the failure as their outcome (text empty), and
    no error quotes the corpus."""
    out = built.system.answer_batch(queries, account=contract.ACCOUNT)
    assert [r.metadata["outcome"] for r in out[:answered]] == ["answer"] * answered
    for r in out[answered:]:
        assert r.metadata["outcome"] == "error" and r.text == ""
        assert not contract.error_leaks(Exception(r.metadata["error"]))


def _assert_failure_rule(built: Built, contract: SimpleNamespace, err: BaseException) -> None:
    """The error names no document, and says whether the request was charged: a
    ``ChargedFailureError`` spent (where the system keeps a budget to read), any other
    failure — before anything private was read — spent nothing beyond the answers of its
    batch made before it, which it carries (``answered``)."""
    assert not contract.error_leaks(err), "the error quotes the corpus"
    if built.spent is None:
        return
    if isinstance(err, ChargedFailureError) or getattr(err, "answered", ()):
        assert _spent(built) > 0, "a failure after retrieval was given back"
    else:
        assert _spent(built) == 0, "a failure before any read spent"


@pytest.mark.parametrize("build", VARIANTS, indirect=True)
def test_a_generator_that_is_down_is_charged_and_names_no_document(
    build: Callable[..., Built],
    contract: SimpleNamespace,
    failing_generator: Callable[..., Any],
) -> None:
    gen = failing_generator(down=True)
    built = build(gen)
    if built.records_failures:
        _assert_recorded_failure(built, contract, [contract.QUERIES[0]])
        return
    charged = []
    for _ in range(2):
        with pytest.raises(Exception) as err:
            built.system.answer(contract.QUERIES[0], account=contract.ACCOUNT)
        _assert_failure_rule(built, contract, err.value)
        charged.append(isinstance(err.value, ChargedFailureError))
    if built.spent is not None and charged[-1]:
        before = _spent(built)
        gen.down = False
        built.system.answer(contract.QUERIES[0], account=contract.ACCOUNT)
        assert _spent(built) > before  # an answer spends too: the checks can fail


@pytest.mark.parametrize("build", VARIANTS, indirect=True)
def test_a_generation_failing_midway_is_charged(
    build: Callable[..., Built],
    contract: SimpleNamespace,
    failing_generator: Callable[..., Any],
) -> None:
    gen = failing_generator(fail_after=1)  # the first call works, the next fails
    built = build(gen)
    try:
        built.system.answer(contract.QUERIES[0], account=contract.ACCOUNT)
    except Exception as err:
        _assert_failure_rule(built, contract, err)
    else:
        assert gen.calls <= 1  # the answer needed one generator call: nothing failed


@pytest.mark.parametrize("build", VARIANTS, indirect=True)
def test_a_batch_whose_last_generation_fails_is_charged(
    build: Callable[..., Built],
    contract: SimpleNamespace,
    failing_generator: Callable[..., Any],
) -> None:
    gen = failing_generator(trigger=contract.TRIGGER)
    built = build(gen)
    batch = [contract.QUERIES[0], f"{contract.QUERIES[1]} {contract.TRIGGER}"]
    if built.records_failures:
        _assert_recorded_failure(built, contract, batch, answered=1)
        return
    with pytest.raises(Exception) as err:
        built.system.answer_batch(batch, account=contract.ACCOUNT)
    _assert_failure_rule(built, contract, err.value)


@pytest.mark.parametrize("build", VARIANTS, indirect=True)
def test_the_public_view_holds_no_retrieval_and_no_per_document_detail(
    build: Callable[..., Built],
    contract: SimpleNamespace,
    generator: Generator,
) -> None:
    built = build(generator)
    for resp in built.system.answer_batch(contract.QUERIES, account=contract.ACCOUNT):
        pub = resp.public()
        assert pub.retrieval is None and pub.retrieved_ids == ()
        assert dict(pub.privacy.per_document) == {}
        assert dict(pub.metadata) == {}
        assert (pub.text, pub.tokens, pub.logprobs) == (resp.text, resp.tokens, resp.logprobs)
        assert pub.privacy.event == resp.privacy.event
        assert pub.privacy.epsilon == resp.privacy.epsilon or math.isnan(resp.privacy.epsilon)
        assert not contract.leaks(repr(pub))
        named = (resp.retrieval is not None and resp.retrieval.ids) or resp.privacy.per_document
        if named and not built.synthetic:
            assert contract.leaks(repr(resp))  # the full response does name documents


@pytest.mark.parametrize("knn_retriever", OVER.get("knnlm", []))
def test_a_knnlm_failure_quotes_nothing_it_read(
    knn_retriever: str,
    contract: SimpleNamespace,
    knn_kb: KnowledgeBase,
    failing_generator: Callable[..., Any],
) -> None:
    """kNN-LM feeds what it read from the datastore back to its LM as the prefix; a
    backend error quoting its request then quotes the documents. The caller sees none of
    it, and the searches made before the failure stay charged."""
    spec = contract.spec(knn_retriever)
    r = spec.build(knn_kb, budget=50, simulation=True, rng=0)
    gen = failing_generator(fail_after=1)  # fails on the second token
    system = create_system(
        "knnlm", retriever=r, generator=gen, lam=0.9, window=contract.KNN_WINDOW, max_tokens=4
    )
    with pytest.raises(Exception) as err:
        system.answer("Which patient holds access code", account=contract.ACCOUNT)
    assert gen.calls == 2
    assert not contract.error_leaks(err.value), "the error quotes the corpus"
    assert isinstance(err.value, ChargedFailureError)
    if spec.spent is not None:
        assert spec.spent(r) > 0
