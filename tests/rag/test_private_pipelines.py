"""Private RAG pipelines pinned to Private-RAG Alg. 1, 2/6, 4, 5 and kNN-LM."""

from __future__ import annotations

import pytest
from tests._voting_llm import VOCAB, FakeLLM

from ragprivacy.corpus import Corpus
from ragprivacy.dp import SqliteBudgetStore
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.generate import Prompt, TokenDistribution, tokenize
from ragprivacy.rag import (
    KNNLM,
    DPVoteConfig,
    MuRAG,
    MuRAGAda,
    NaiveMultiRAG,
    create_system,
    dp_vote_generate,
    knn_datastore,
)
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Document


def test_dp_vote_discoveries_and_stop() -> None:
    llm = FakeLLM()
    prompt = Prompt("answer", "what is the secret?")
    voters = [("secret alpha",)] * 8
    cfg = DPVoteConfig(epsilon_token=100.0, simulation=True)
    # c = ⌊1000/100⌋ = 10: 'alpha' is a discovery (count of the non-RAG token 'I' is 0),
    # then every voter votes ⟨EOS⟩: a second discovery that ends the answer.
    r = dp_vote_generate(llm, prompt, voters, 1000.0, cfg, vocabulary=VOCAB, rng=0)
    assert r.completion.tokens == ("alpha",)
    assert r.discoveries == 2 and r.max_discoveries == 10
    assert r.event.epsilon == pytest.approx(1000.0)
    # voters share one batched generate call; only the non-RAG voter needs a distribution
    assert llm.generate_calls == 1 and llm.prompts == 2 and r.calls <= 3
    # c = 1: the answer stops as soon as the one discovery is spent (Alg. 4 line 16)
    r1 = dp_vote_generate(llm, prompt, voters, 100.0, cfg, vocabulary=VOCAB, rng=0)
    assert r1.completion.tokens == ("alpha",) and r1.discoveries == 1
    # every voter empty (all padding): the count of the non-RAG token is m > θ̂, so the
    # answer is the non-RAG answer with no discovery
    r0 = dp_vote_generate(llm, prompt, [("",)] * 8, 1000.0, cfg, vocabulary=VOCAB, rng=0)
    assert r0.completion.text == "I don't know." and r0.discoveries == 0
    with pytest.raises(ConfigError, match="below one discovery"):
        dp_vote_generate(llm, prompt, voters, 50.0, cfg, vocabulary=VOCAB, rng=0)


def test_dp_vote_discoveries_never_exceed_c() -> None:
    llm = FakeLLM()
    prompt = Prompt("answer", "q")
    cfg = DPVoteConfig(epsilon_token=0.5, simulation=True, max_tokens=30)
    for seed in range(20):
        r = dp_vote_generate(
            llm, prompt, [("secret alpha",), ("",)] * 3, 1.7, cfg, vocabulary=VOCAB, rng=seed
        )
        assert r.discoveries <= 3 == r.max_discoveries  # c = ⌊1.7/0.5⌋


@pytest.fixture()
def kb() -> KnowledgeBase:
    docs = [Document(f"s{i}", "the secret alpha is kept in the vault") for i in range(6)]
    docs += [Document(f"o{i}", f"unrelated note number {i} about gardens") for i in range(6)]
    return KnowledgeBase.build(Corpus(docs), embedder="hashing")


def test_naive_multi_refuses_before_generation(kb: KnowledgeBase) -> None:
    llm = FakeLLM()
    sys = NaiveMultiRAG(
        TopKRetriever(kb, k=6),
        llm,
        epsilon_q=4.0,
        total_epsilon=8.0,
        epsilon_token=2.0,
        simulation=True,
        vocabulary=VOCAB,
        rng=0,
    )
    a = sys.answer("where is the secret alpha?", account="u")
    assert a.privacy.epsilon == 4.0 and a.privacy.cumulative_epsilon == 4.0
    sys.answer("where is the secret alpha?", account="u")
    calls = llm.generate_calls
    with pytest.raises(BudgetExhaustedError, match="Nothing was spent"):
        sys.answer("where is the secret alpha?", account="u")
    assert llm.generate_calls == calls and sys.spent("u") == 8.0
    assert sys.answer("secret?", account="v").privacy.cumulative_epsilon == 4.0


def test_murag_budgets_and_padding(kb: KnowledgeBase) -> None:
    llm = FakeLLM()
    sys = MuRAG(
        TopKRetriever(kb, k=6),
        llm,
        tau=0.3,
        epsilon_q=4.0,
        max_retrievals=1,
        epsilon_token=2.0,
        simulation=True,
        vocabulary=VOCAB,
        rng=0,
    )
    assert sys.total_epsilon == 4.0
    first = sys.answer("where is the secret alpha kept?")
    charged = dict(first.privacy.per_document)
    assert charged and set(charged.values()) == {4.0}
    assert all(d.startswith("s") for d in charged)  # only screened documents pay
    assert first.metadata["padding"] == 6 - len(first.retrieval)
    second = sys.answer("where is the secret alpha kept?")
    # M = 1: every relevant document is spent, so all K slots are padding (non-RAG answer)
    assert second.metadata["padding"] == 6 and second.privacy.per_document == {}
    assert "alpha" not in second.text and second.metadata["discoveries"] <= 2
    assert second.privacy.cumulative_epsilon == pytest.approx(4.0)


def test_murag_renyi_filter(kb: KnowledgeBase) -> None:
    # Rényi accounting: the guarantee is the filter's (ε, δ) target, charges are the
    # randomized-response curves of ε_q, and the reported per-document ε never exceeds it.
    sys = MuRAG(
        TopKRetriever(kb, k=6),
        FakeLLM(),
        tau=0.3,
        epsilon_q=0.5,
        max_retrievals=20,
        accounting="renyi",
        renyi_delta=1e-6,
        epsilon_token=0.5,
        simulation=True,
        vocabulary=VOCAB,
        rng=0,
    )
    assert sys.total_epsilon == 10.0 and sys.describe()["screening"]["accounting"] == "renyi"
    spent = [
        sys.answer("where is the secret alpha kept?").privacy.cumulative_epsilon for _ in range(5)
    ]
    assert 0 < spent[0] < spent[-1] <= 10.0
    assert spent == sorted(spent)


def test_murag_persists_budgets(kb: KnowledgeBase, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "b.sqlite"
    args = {
        "tau": 0.3,
        "epsilon_q": 2.0,
        "epsilon_token": 2.0,
        "simulation": True,
        "vocabulary": VOCAB,
        "rng": 0,
    }
    s1 = MuRAG(TopKRetriever(kb, k=6), FakeLLM(), store=SqliteBudgetStore(path, 2.0), **args)
    assert s1.answer("secret alpha vault").privacy.per_document
    s2 = MuRAG(TopKRetriever(kb, k=6), FakeLLM(), store=SqliteBudgetStore(path, 2.0), **args)
    assert s2.answer("secret alpha vault").metadata["padding"] == 6


def test_murag_ada_splits_budget(kb: KnowledgeBase) -> None:
    sys = MuRAGAda(
        TopKRetriever(kb, k=6),
        FakeLLM(),
        epsilon_q=5.0,
        epsilon_thr=1.0,
        bin_size=0.05,
        epsilon_token=2.0,
        simulation=True,
        vocabulary=VOCAB,
        rng=0,
    )
    assert sys.screener.epsilon_rag == 4.0
    r = sys.answer("where is the secret alpha kept?")
    assert set(r.privacy.per_document.values()) <= {1.0, 5.0}
    assert r.privacy.epsilon == 5.0


def test_registry_builds_private_systems(kb: KnowledgeBase) -> None:
    llm = FakeLLM()
    for name in ("dp_vote", "naive_multi", "murag", "murag_ada"):
        sys = create_system(
            name,
            retriever=TopKRetriever(kb, k=4),
            generator=llm,
            simulation=True,
            vocabulary=VOCAB,
            rng=0,
        )
        assert sys.answer("secret alpha?").privacy.mechanism == name
        assert sys.describe()["name"] == name


def test_knnlm_copies_datastore_with_any_retriever() -> None:
    corpus = Corpus([Document("a", "the vault code is seven nine two")])
    store = knn_datastore(corpus, window=3)
    assert len(store) == len(tokenize(corpus[0].text))
    assert store[0].metadata["next"] == "vault"
    kb = KnowledgeBase.build(store, embedder="hashing")

    class Flat(FakeLLM):
        def next_token_distribution(self, prompt, prefix=()):  # type: ignore[no-untyped-def]
            return TokenDistribution(("the", "</s>"), (0.5, 0.5))

    sys = KNNLM(TopKRetriever(kb, k=1), Flat(), lam=1.0, window=3, max_tokens=4)
    out = sys.answer("the vault code")
    assert out.tokens[:2] == ("is", "seven")
    assert out.metadata["retrievals"] == len(out.tokens) + (len(out.tokens) < 4)


def test_vote_domain_is_cached_for_tuples_only() -> None:
    """The normalised vocabulary index is reused for one tuple, rebuilt for a list (a list
    may change in place under the same id)."""
    from ragprivacy.rag.dp_vote import EOS, _vocab

    frozen = ("Alpha", "beta", "alpha")
    assert _vocab(frozen) is _vocab(frozen)
    assert _vocab(frozen).tokens == ["Alpha", "beta", "alpha", EOS]
    words = ["a", "b"]
    first = _vocab(words)
    words.append("c")
    assert _vocab(words) is not first and _vocab(words).tokens == ["a", "b", "c", EOS]


def test_attack_experiments_give_knnlm_a_token_datastore() -> None:
    """``build_entry`` turns the document knowledge base into kNN-LM's token datastore
    (once per process), so neighbours vote for the next token of a stored record."""
    from ragprivacy.eval.experiments._systems import (
        build_entry,
        knn_knowledge_base,
        parse_system_specs,
    )

    corpus = Corpus([Document("a", "the vault code is seven nine two"), Document("b", "x y")])
    kb = KnowledgeBase.build(corpus, embedder="hashing")
    store = knn_knowledge_base(kb, window=3)
    assert store is knn_knowledge_base(kb, window=3) and store is knn_knowledge_base(store)
    assert len(store) == 9 and store.document(0).metadata["next"] == "vault"
    (entry,) = parse_system_specs([{"name": "knnlm", "window": 3, "lam": 1.0}], "systems")
    system = build_entry(entry, kb=kb, generator=FakeLLM(), k=1, queries=1, seed=0)
    assert system.retriever.kb is store
    assert system.answer("the vault code").tokens[:2] == ("is", "seven")


def _mix_argmax_by_definition(
    dist: TokenDistribution, knn: dict[str, float], lam: float
) -> tuple[str, str, float]:
    """RP paper §3.1 written out entry by entry: mix every normalised token, then take the
    first maximum (LM order, then neighbour order); the LM's written form wins."""
    mix = {t.casefold(): (1 - lam) * p for t, p in zip(dist.tokens, dist.probs)}
    forms = {t.casefold(): t for t in dist.tokens}
    for tok, p in knn.items():
        key = tok.casefold()
        mix[key] = mix.get(key, 0.0) + lam * p
        forms.setdefault(key, tok)
    best = max(mix, key=lambda t: mix[t])
    return best, forms[best], mix[best]


def test_knnlm_mixing_equals_the_entry_by_entry_definition() -> None:
    """The fast argmax (LM argmax + neighbour tokens only) picks the same token, form and
    probability as mixing the whole vocabulary, also with repeated forms and exact ties."""
    import numpy as np

    corpus = Corpus([Document("a", "alpha beta gamma")])
    kb = KnowledgeBase.build(knn_datastore(corpus, window=2), embedder="hashing")
    words = ["Alpha", "alpha", "BETA", "beta", "Gamma", "delta", "Eps", "</s>", "zeta", "ETA"]
    rng = np.random.default_rng(11)
    for trial in range(3000):
        lam = float(rng.choice([0.1, 0.5, 1.0, 0.0]))
        n = int(rng.integers(1, 9))
        toks = tuple(str(w) for w in rng.choice(words, size=n))
        # coarse probabilities make exact ties common
        probs = tuple(float(p) for p in rng.integers(0, 4, size=n) / 8)
        knn_toks = rng.choice([*words, "new", "NEW"], size=int(rng.integers(0, 5)))
        knn = {str(t): float(rng.integers(1, 4)) / 4 for t in knn_toks}
        system = KNNLM(TopKRetriever(kb, k=1), FakeLLM(), lam=lam, window=2)
        dist = TokenDistribution(toks, probs)
        got = system._mix_argmax(dist, knn)
        assert got == _mix_argmax_by_definition(dist, knn, lam), (trial, toks, probs, knn)
