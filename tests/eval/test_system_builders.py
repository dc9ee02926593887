"""The places that build systems — ``RunContext.system``, the attack experiments'
``system_specs`` entries, ``private_rag``'s cells and the service's voting tenants — all
go through :func:`ragprivacy.rag.build_system`, and build the very systems they built
when each constructed its own: compared here, ``describe()`` for ``describe()``, with
the systems constructed by hand as those builders did."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from ragprivacy.corpus import synthesize
from ragprivacy.dp import PAPER_SCORE_RANGE
from ragprivacy.embed import create_embedder
from ragprivacy.eval import RunContext, parse_config
from ragprivacy.eval.experiments import create_experiment
from ragprivacy.eval.experiments._systems import build_entry, parse_system_specs
from ragprivacy.eval.experiments.private_rag import redundant_kb
from ragprivacy.generate import PromptBudget
from ragprivacy.rag import DPVoteRAG, MuRAG, MuRAGAda, NaiveMultiRAG, NonRAG, StandardRAG
from ragprivacy.retrieval import (
    DPProjectionRetriever,
    NoisyTopKRetriever,
    ProjectionRetriever,
    TopKRetriever,
)
from ragprivacy.service.voting import VotingTenants


def _config(experiment: dict[str, Any], corpus: str = "knowledge") -> dict[str, Any]:
    return {
        "name": "builders",
        "seed": 5,
        "workers": 1,
        "corpora": {"c": {"synthetic": corpus, "n": 40}},
        "models": {"background_n": 40},
        "experiments": [{"corpus": "c", **experiment}],
    }


@pytest.fixture(scope="module")
def ctx() -> RunContext:
    return RunContext(parse_config(_config({"type": "qa"}, corpus="medical")))


def test_run_context_builds_what_it_built(ctx: RunContext) -> None:
    gen, kb = ctx.generator("c"), ctx.knowledge_base("c")
    assert (
        ctx.system("rag", "c", k=3).describe()
        == StandardRAG(TopKRetriever(kb, k=3), gen).describe()
    )
    assert ctx.system("non-rag", "c").describe() == NonRAG(gen).describe()


def test_attack_entries_build_what_they_built(ctx: RunContext) -> None:
    gen, kb, seed = ctx.generator("c"), ctx.knowledge_base("c"), 11
    vocab = ctx.vocabulary("c")
    entries = parse_system_specs(
        [
            "non-rag",
            {"name": "rag", "retriever": "noisy_topk", "retriever_options": {"epsilon_acc": 2}},
            {"name": "dp_vote", "epsilon": 10},
            {"name": "murag_ada", "epsilon_q": 2.5},  # ε_RAG = 1.5: ε_0 = 1.5
            {"name": "projection", "retriever_options": {"dim": 8}},
        ],
        "systems",
    )
    by_hand = [
        NonRAG(gen),
        StandardRAG(
            NoisyTopKRetriever(
                kb,
                k=4,
                epsilon_acc=2,
                simulation=True,
                rng=seed,
                queries_per_account=7,
                calibration="exact",
                score_range=PAPER_SCORE_RANGE,
            ),
            gen,
        ),
        DPVoteRAG(
            TopKRetriever(kb, k=4), gen, epsilon=10, simulation=True, rng=seed + 1, vocabulary=vocab
        ),
        MuRAGAda(
            TopKRetriever(kb, k=4),
            gen,
            epsilon_q=2.5,
            epsilon_token=1.5,
            simulation=True,
            rng=seed + 1,
            vocabulary=vocab,
        ),
        StandardRAG(ProjectionRetriever(kb, k=4, dim=8, rng=seed), gen),
    ]
    for entry, want in zip(entries, by_hand, strict=True):
        got = build_entry(
            entry,
            kb=kb if entry.uses_data else None,
            generator=gen,
            k=4,
            queries=7,
            seed=seed,
            vocabulary=lambda: vocab,
        )
        assert got.describe() == want.describe(), entry.label


def _private_rag_by_hand(
    cell: dict[str, Any], kb: Any, gen: Any, vocab: Any, n: int, rng: Any
) -> Any:
    """The systems as ``PrivateRAGExperiment._system`` constructed them (options at their
    defaults: rag_k = 5, rp_dim = 100, dp_delta = 1e-4, ε_token = 2, τ = 0.5, ...)."""
    name, eps = cell["system"], cell.get("epsilon")
    vote = {
        "epsilon_token": 2.0,
        "docs_per_voter": 1,
        "max_tokens": 8,
        "vocabulary": vocab,
        "simulation": True,
        "rng": rng,
    }
    top = TopKRetriever(kb, k=4)
    if name == "rag":
        return StandardRAG(TopKRetriever(kb, k=5), gen)
    if name == "projection":
        return StandardRAG(ProjectionRetriever(kb, k=5, dim=100, kind="gaussian", rng=rng), gen)
    if name == "dp_projection":
        r = DPProjectionRetriever(
            kb, k=5, dim=100, epsilon=eps, delta=1e-4, clip=1.0, simulation=True, rng=rng
        )
        return StandardRAG(r, gen)
    if name == "noisy_topk":
        r = NoisyTopKRetriever(
            kb,
            k=5,
            epsilon_acc=eps,
            delta_acc=1e-6,
            queries_per_account=n,
            calibration="exact",
            score_range=PAPER_SCORE_RANGE,
            simulation=True,
            rng=rng,
        )
        return StandardRAG(r, gen)
    if name == "dp_vote":
        return DPVoteRAG(top, gen, epsilon=eps, **vote)
    if name == "naive_multi":
        return NaiveMultiRAG(top, gen, epsilon_q=eps, total_epsilon=n * eps, **vote)
    cls = MuRAG if name == "murag" else MuRAGAda
    if cls is MuRAGAda:
        vote["epsilon_token"] = min(2.0, eps - 1.0)
    return cls(top, gen, tau=0.5, epsilon_q=eps, epsilon_thr=1.0, max_retrievals=1, **vote)


def test_private_rag_cells_build_what_they_built() -> None:
    systems = ["non-rag", "rag", "projection", "dp_projection", "noisy_topk"]
    systems += ["dp_vote", "naive_multi", "murag", "murag_ada"]
    settings = {"type": "private_rag", "systems": systems, "k": 4, "copies": 2}
    config = parse_config(_config({**settings, "epsilons": [2.5, 10]}))
    exp = create_experiment(config.experiments[0], config, 0)
    ctx = RunContext(config)
    kb, _ = redundant_kb(ctx, "c", 2)
    gen, vocab = ctx.generator("c"), ctx.vocabulary("c")
    for cell in exp.cells():
        if cell["system"] == "non-rag":
            want = NonRAG(gen)
        else:
            want = _private_rag_by_hand(cell, kb, gen, vocab, 6, np.random.default_rng(3))
        got = exp._system(cell, ctx, kb, 6, np.random.default_rng(3))  # type: ignore[attr-defined]
        assert got.describe() == want.describe(), cell


class _State:
    """The part of the service state the voting tenants read."""

    def __init__(self) -> None:
        self.corpus = synthesize("medical", 12, seed=1)
        self.vectors = create_embedder("hashing").encode(list(self.corpus.texts))

    def documents(self, tenant: str, count: int) -> tuple[list[str], list[str], Any]:
        return list(self.corpus.ids), list(self.corpus.texts), self.vectors

    def tenants(self) -> dict[str, dict[str, Any]]:
        return {
            "v": {"mode": "dp_vote", "k": 2, "epsilon_q": 4.0},
            "m": {"mode": "murag", "k": 2, "epsilon_q": 2.0, "max_retrievals": 3, "tau": 0.0},
            "a": {
                "mode": "murag_ada",
                "k": 2,
                "epsilon_q": 4.0,
                "epsilon_thr": 1.0,
                "max_retrievals": 2,
            },
        }


def test_voting_tenants_build_what_they_built(ctx: RunContext) -> None:
    state = _State()
    budget = PromptBudget(doc_tokens=200)
    tenants = VotingTenants(
        state,  # type: ignore[arg-type]
        "w",
        {"v": 12, "m": 12, "a": 12},
        create_embedder("hashing"),
        prompt_budget=budget,
    )
    gen = ctx.generator("c")
    built = {t: tenants._build(t, gen) for t in ("v", "m", "a")}
    top = TopKRetriever(tenants._kb("v"), k=2)
    by_hand = {
        "v": DPVoteRAG(top, gen, epsilon=4.0, prompt_budget=budget),
        "m": MuRAG(
            top,
            gen,
            tau=0.0,
            epsilon_q=2.0,
            max_retrievals=3,
            prompt_budget=budget,
        ),
        "a": MuRAGAda(
            top,
            gen,
            epsilon_q=4.0,
            epsilon_thr=1.0,
            max_retrievals=2,
            prompt_budget=budget,
        ),
    }
    for tenant, system in built.items():
        assert system.describe() == by_hand[tenant].describe(), tenant
        assert system.vote.simulation is False  # secure mode
