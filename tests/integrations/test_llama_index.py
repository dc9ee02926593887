"""The LlamaIndex PrivateRetriever against the real llama-index-core: in a
RetrieverQueryEngine with the library's MockLLM, offline."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from llama_index.core import Settings
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import BaseRetriever

from ragprivacy.corpus import Corpus
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.integrations.llama_index import PrivateRetriever
from ragprivacy.retrieval import KnowledgeBase, NoisyTopKRetriever
from ragprivacy.types import Document

DOCS = [
    Document("rec-001", "Velmora General admitted a patient with chest pain on Monday."),
    Document("rec-002", "The tide tables for Ostrava harbour are printed weekly."),
    Document("rec-003", "A prescription of amoxicillin was renewed for the Velmora patient."),
]


@pytest.fixture(autouse=True)
def offline_tokenizer() -> Iterator[None]:
    # LlamaIndex's default tokenizer is tiktoken, which downloads its encoding on first use.
    before = Settings._tokenizer
    Settings.tokenizer = str.split
    yield
    Settings._tokenizer = before


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return KnowledgeBase.build(Corpus(DOCS), embedder="hashing")


def test_nodes_carry_our_ids_and_privacy(kb: KnowledgeBase) -> None:
    noisy = NoisyTopKRetriever(kb, k=2, queries_per_account=3, simulation=True, rng=1)
    retriever = PrivateRetriever(noisy, account="alice")
    assert isinstance(retriever, BaseRetriever)
    nodes = retriever.retrieve("Velmora patient")
    assert len(nodes) == 2
    for n in nodes:
        assert n.node.node_id == n.node.metadata["ragprivacy_id"]
        assert n.node.get_content() == next(d.text for d in DOCS if d.id == n.node.node_id)
        assert n.score is not None
        assert n.node.metadata["privacy"]["account"] == "alice"
        assert 0 < n.node.metadata["privacy"]["epsilon"] < float("inf")
        # The privacy record is for the caller, not the prompt.
        assert "privacy" not in n.node.get_content(metadata_mode="llm")


def test_query_engine_answers_then_surfaces_budget_exhaustion(kb: KnowledgeBase) -> None:
    noisy = NoisyTopKRetriever(kb, k=1, queries_per_account=1, simulation=True, rng=2)
    engine = RetrieverQueryEngine.from_args(PrivateRetriever(noisy, account="bob"), llm=MockLLM())
    response = engine.query("tide tables")
    assert len(response.source_nodes) == 1
    assert response.source_nodes[0].node.metadata["privacy"]["account"] == "bob"
    # MockLLM echoes the prompt it was given: the retrieved text reached the LLM.
    assert response.source_nodes[0].node.get_content() in str(response)
    with pytest.raises(BudgetExhaustedError):
        engine.query("Velmora")


def test_bad_construction_is_a_clear_error(kb: KnowledgeBase) -> None:
    with pytest.raises(ConfigError, match="exactly one of"):
        PrivateRetriever()
    with pytest.raises(ConfigError, match="must be a ragprivacy Retriever"):
        PrivateRetriever("not a retriever")  # type: ignore[arg-type]
