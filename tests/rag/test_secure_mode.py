"""Secure by default, enforced once: every private mechanism, retriever and system refuses a
user seed unless it simulates, through the one check ``ragprivacy.dp.simulation_rng``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ragprivacy.corpus import Corpus
from ragprivacy.dp import GaussianNoisyTopK, exponential_mechanism, simulation_rng
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Prompt, create_generator
from ragprivacy.rag import DPVoteConfig, DPVoteRAG, MuRAG, MuRAGAda, NaiveMultiRAG, dp_vote_generate
from ragprivacy.rag.dp_vote import _partition
from ragprivacy.retrieval import (
    KnowledgeBase,
    NoisyTopKRetriever,
    TenantRetriever,
    ThresholdRetriever,
    TopKRetriever,
)
from ragprivacy.types import Document

KB = KnowledgeBase.build(
    Corpus([Document(f"d{i}", f"record {i} about topic {i % 3}") for i in range(8)]),
    embedder="hashing",
)
GEN = create_generator("reference")

SECURE_WITH_SEED: list[Callable[[], object]] = [
    lambda: GaussianNoisyTopK(sigma=1.0, k=2, sensitivity=1.0, score_range=(0.0, 1.0)).select(
        [[0.1, 0.2, 0.3]], rng=5
    ),
    lambda: exponential_mechanism([0.1, 0.2], 1.0, rng=5),
    lambda: NoisyTopKRetriever(KB, k=2, rng=5),
    lambda: ThresholdRetriever(KB, k=2, rng=5),
    lambda: TenantRetriever(rng=5),
    lambda: DPVoteRAG(TopKRetriever(KB, k=2), GEN, rng=5),
    lambda: NaiveMultiRAG(TopKRetriever(KB, k=2), GEN, rng=5),
    lambda: MuRAG(TopKRetriever(KB, k=2), GEN, rng=5),
    lambda: MuRAGAda(TopKRetriever(KB, k=2), GEN, rng=5),
    lambda: dp_vote_generate(
        GEN, Prompt("answer", "topic 1?"), [("record 1",)], 10.0, DPVoteConfig(), rng=5
    ),
    lambda: TenantRetriever(simulation=False, rng=5),
]


@pytest.mark.parametrize("build", SECURE_WITH_SEED)
def test_secure_mode_refuses_a_seed(build: Callable[[], object]) -> None:
    with pytest.raises(ConfigError, match="Secure mode refuses 'rng'"):
        build()


def test_simulation_takes_the_seed_and_refuses_bits() -> None:
    a, b = simulation_rng(9, simulation=True), simulation_rng(9, simulation=True)
    assert a is not None and b is not None and a.integers(1 << 30) == b.integers(1 << 30)
    assert simulation_rng(None, simulation=False) is None
    with pytest.raises(ConfigError, match="do not pass 'bits'"):
        simulation_rng(None, simulation=True, bits=object())


def test_secure_voting_partitions_from_the_os_csprng() -> None:
    system = DPVoteRAG(TopKRetriever(KB, k=4), GEN, docs_per_voter=2)
    assert system._gen is None  # no numpy stream in secure mode
    parts = _partition(["a", "b", "c"], 2, 2, None)
    assert sorted(x for p in parts for x in p) == ["", "a", "b", "c"]
    assert {len(p) for p in parts} == {2}


def test_the_refusal_lives_in_one_place() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "ragprivacy"
    hits = [
        p.relative_to(src).as_posix()
        for p in sorted(src.rglob("*.py"))
        if "Secure mode refuses" in p.read_text(encoding="utf-8")
    ]
    assert hits == ["dp/randomness.py"]
