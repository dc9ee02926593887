"""DP voting calibrated at a δ > 0: the discoveries are composed by the exact accountant
(Kairouz, Oh & Viswanath 2015) instead of the pure sum, each discovery is its own
AboveThreshold instance (re-drawn threshold), and the answer's event states ≤ ε at δ."""

from __future__ import annotations

from typing import Any

import pytest
from tests._voting_llm import VOCAB, FakeLLM

import ragprivacy.dp.token_vote as token_vote_module
from ragprivacy.corpus import Corpus
from ragprivacy.dp import (
    PureDpEvent,
    SelfComposedEvent,
    calibrate_pure_steps,
    event_epsilon,
    max_pure_steps,
)
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Prompt
from ragprivacy.rag import DPVoteConfig, DPVoteRAG, MuRAG, NaiveMultiRAG, dp_vote_generate
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Document


@pytest.fixture()
def kb() -> KnowledgeBase:
    docs = [Document(f"s{i}", "the secret alpha is kept in the vault") for i in range(6)]
    docs += [Document(f"o{i}", f"unrelated note number {i} about gardens") for i in range(6)]
    return KnowledgeBase.build(Corpus(docs), embedder="hashing")


def test_config_calibrates_the_sarus_setting() -> None:
    cfg = DPVoteConfig(delta=1e-3, max_discoveries=100)
    eps0 = cfg.step_epsilon(1.0)
    assert eps0 == pytest.approx(0.039, rel=1e-2) and eps0 > 1.0 / 100
    assert cfg.discoveries(1.0) == 100 and cfg.accounting == "optimal"
    event = cfg.event(1.0)
    assert event == SelfComposedEvent(PureDpEvent(eps0), 100)
    eps, delta = event_epsilon(event, 1e-3)
    assert delta == 1e-3 and 0.999 < eps <= 1.0
    assert cfg.epsilon_of(1.0) == eps
    # pure (δ = 0): ε/c per discovery, one pure event c·ε_0, as Alg. 4
    pure = DPVoteConfig(max_discoveries=100)
    assert pure.step_epsilon(1.0) == 0.01 and pure.event(1.0) == PureDpEvent(1.0)
    assert pure.accounting == "pure"


def test_config_counts_discoveries_at_a_delta() -> None:
    assert DPVoteConfig(epsilon_token=2.0).discoveries(10.0) == 5  # ⌊ε/ε_0⌋ (unchanged)
    tight = DPVoteConfig(epsilon_token=0.01, delta=1e-3)
    assert tight.discoveries(1.0) == max_pure_steps(1.0, 1e-3, 0.01) > 1000  # vs 100
    assert tight.step_epsilon(1.0) == 0.01
    assert event_epsilon(tight.event(1.0), 1e-3)[0] <= 1.0
    with pytest.raises(ConfigError, match="delta"):
        DPVoteConfig(delta=1.0)
    with pytest.raises(ConfigError, match="max_discoveries"):
        DPVoteConfig(max_discoveries=0)
    with pytest.raises(ConfigError, match="below one discovery"):
        DPVoteConfig(epsilon_token=2.0, delta=1e-9).event(1.0)


def test_vote_at_a_delta_redraws_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[dict[str, Any]] = []
    real = token_vote_module.AboveThreshold

    def spy(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(token_vote_module, "AboveThreshold", spy)
    llm, prompt, voters = (
        FakeLLM(),
        Prompt("answer", "what is the secret?"),
        [("secret alpha",)] * 8,
    )
    cfg = DPVoteConfig(delta=1e-5, max_discoveries=4, simulation=True)
    r = dp_vote_generate(llm, prompt, voters, 40.0, cfg, vocabulary=VOCAB, rng=0)
    assert made[-1]["resample_threshold"] is True and made[-1]["max_discoveries"] == 4
    assert r.accounting == "optimal" and r.max_discoveries == 4
    assert r.epsilon_token == pytest.approx(calibrate_pure_steps(40.0, 1e-5, 4))
    assert made[-1]["max_discoveries"] == 4 and r.discoveries <= 4
    assert r.event == SelfComposedEvent(PureDpEvent(r.epsilon_token), 4)
    assert r.completion.tokens == ("alpha",)
    pure = DPVoteConfig(epsilon_token=10.0, simulation=True)
    r0 = dp_vote_generate(llm, prompt, voters, 40.0, pure, vocabulary=VOCAB, rng=0)
    assert made[-1]["resample_threshold"] is False  # Alg. 4 line 2: one noisy threshold
    assert r0.event == PureDpEvent(40.0) and r0.accounting == "pure"


def test_dp_vote_rag_answer_states_its_tight_cost(kb: KnowledgeBase) -> None:
    """Per-discovery ε above ε/c, and the answer's event is ≤ ε at δ."""
    eps, delta, c = 2.0, 1e-4, 40
    sys = DPVoteRAG(
        TopKRetriever(kb, k=6),
        FakeLLM(),
        epsilon=eps,
        delta=delta,
        max_discoveries=c,
        max_tokens=4,
        simulation=True,
        vocabulary=VOCAB,
        rng=0,
    )
    r = sys.answer("where is the secret alpha kept?")
    assert r.metadata["vote_accounting"] == "optimal"
    assert r.metadata["max_discoveries"] == c
    assert r.metadata["epsilon_token"] > eps / c
    assert r.privacy.event == SelfComposedEvent(PureDpEvent(r.metadata["epsilon_token"]), c)
    assert r.privacy.delta == delta and eps * 0.999 < r.privacy.epsilon <= eps
    described = sys.describe()
    assert described["vote_accounting"] == "optimal" and described["delta"] == delta
    assert described["epsilon_token"] == r.metadata["epsilon_token"]
    # the pure default is unchanged: PureDpEvent(c·ε_0) at δ = 0
    plain = DPVoteRAG(
        TopKRetriever(kb, k=6),
        FakeLLM(),
        epsilon=eps,
        max_discoveries=c,
        simulation=True,
        vocabulary=VOCAB,
        rng=0,
    )
    p = plain.answer("where is the secret alpha kept?")
    assert p.privacy.event == PureDpEvent(eps) and p.privacy.delta == 0.0
    assert p.metadata["vote_accounting"] == "pure" and p.metadata["epsilon_token"] == eps / c


def test_naive_multi_charges_the_tight_per_query_cost(kb: KnowledgeBase) -> None:
    sys = NaiveMultiRAG(
        TopKRetriever(kb, k=6),
        FakeLLM(),
        epsilon_q=1.0,
        total_epsilon=2.0,
        delta=1e-3,
        epsilon_token=0.01,
        max_tokens=3,
        simulation=True,
        vocabulary=VOCAB,
        rng=0,
    )
    a = sys.answer("where is the secret alpha?", account="u")
    assert a.privacy.delta == 1e-3 and a.privacy.epsilon <= 1.0
    assert a.metadata["max_discoveries"] == max_pure_steps(1.0, 1e-3, 0.01)
    assert sys.spent("u") == pytest.approx(a.privacy.epsilon)


def test_murag_votes_purely(kb: KnowledgeBase) -> None:
    args: dict[str, Any] = {"simulation": True, "vocabulary": VOCAB, "rng": 0}
    with pytest.raises(ConfigError, match="delta"):
        MuRAG(TopKRetriever(kb, k=6), FakeLLM(), epsilon_q=4.0, delta=1e-6, **args)
    sys = MuRAG(
        TopKRetriever(kb, k=6), FakeLLM(), tau=0.3, epsilon_q=4.0, max_discoveries=4, **args
    )
    described = sys.describe()
    assert described["vote_accounting"] == "pure" and described["epsilon_token"] == 1.0
    r = sys.answer("where is the secret alpha kept?")
    assert r.metadata["vote_accounting"] == "pure" and r.metadata["max_discoveries"] == 4
    assert r.privacy.epsilon == 4.0
