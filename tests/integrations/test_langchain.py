"""The LangChain PrivateRetriever against the real langchain-core: in a chain with the
library's fake chat model, offline."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.language_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough

from ragprivacy.corpus import Corpus
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.integrations.langchain import ACCOUNT_KEY, PrivateRetriever
from ragprivacy.retrieval import KnowledgeBase, NoisyTopKRetriever, TopKRetriever
from ragprivacy.types import Document

DOCS = [
    Document("rec-001", "Velmora General admitted a patient with chest pain on Monday."),
    Document("rec-002", "The tide tables for Ostrava harbour are printed weekly."),
    Document("rec-003", "A prescription of amoxicillin was renewed for the Velmora patient."),
    Document("rec-004", "Quarterly budget figures for the harbour authority."),
]


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return KnowledgeBase.build(Corpus(DOCS), embedder="hashing")


def _noisy(kb: KnowledgeBase, queries: int) -> NoisyTopKRetriever:
    return NoisyTopKRetriever(kb, k=2, queries_per_account=queries, simulation=True, rng=0)


def test_is_a_langchain_retriever_with_our_ids_and_privacy(kb: KnowledgeBase) -> None:
    retriever = PrivateRetriever(retriever=_noisy(kb, 5), account="alice")
    assert isinstance(retriever, BaseRetriever)
    docs = retriever.invoke("Velmora patient")
    assert len(docs) == 2
    ids = {d.metadata["ragprivacy_id"] for d in docs}
    assert ids <= {d.id for d in DOCS}
    for doc in docs:
        assert doc.id == doc.metadata["ragprivacy_id"]
        assert doc.page_content == next(d.text for d in DOCS if d.id == doc.id)
        privacy = doc.metadata["privacy"]
        assert privacy["account"] == "alice"
        assert privacy["guaranteed"] is True
        assert 0 < privacy["epsilon"] < float("inf")
        assert 0 < privacy["delta"] < 1
    # The exact retriever releases without a guarantee: its ε is reported as None (∞).
    exact = PrivateRetriever(retriever=TopKRetriever(kb, k=1)).invoke("tide tables")
    assert exact[0].metadata["ragprivacy_id"] == "rec-002"
    assert exact[0].metadata["privacy"]["epsilon"] is None


def _chain(retriever: PrivateRetriever, answers: list[str]):  # type: ignore[no-untyped-def]
    prompt = ChatPromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    llm = FakeListChatModel(responses=answers)

    def fmt(docs: list) -> str:  # type: ignore[type-arg]
        return "\n".join(d.page_content for d in docs)

    return (
        {"context": retriever | fmt, "question": RunnablePassthrough()}
        | prompt
        | llm
        | StrOutputParser()
    )


def test_chain_answers_then_surfaces_budget_exhaustion(kb: KnowledgeBase) -> None:
    noisy = _noisy(kb, 2)
    chain = _chain(PrivateRetriever(retriever=noisy, account="bob"), ["one", "two", "three"])
    assert chain.invoke("Velmora patient") == "one"
    assert chain.invoke("harbour") == "two"
    with pytest.raises(BudgetExhaustedError):
        chain.invoke("amoxicillin")
    # The refused query spent nothing: another account still has its full budget.
    assert noisy.retrieve("harbour", account="carol").ids


def test_account_comes_from_the_run_configuration(kb: KnowledgeBase) -> None:
    noisy = _noisy(kb, 1)
    retriever = PrivateRetriever(retriever=noisy, account="default")
    docs = retriever.invoke("harbour", config={"metadata": {ACCOUNT_KEY: "dana"}})
    assert docs[0].metadata["privacy"]["account"] == "dana"
    with pytest.raises(BudgetExhaustedError):  # dana's single query is spent
        retriever.invoke("harbour", config={"metadata": {ACCOUNT_KEY: "dana"}})
    assert retriever.invoke("harbour")[0].metadata["privacy"]["account"] == "default"
    with pytest.raises(ConfigError, match=ACCOUNT_KEY):
        retriever.invoke("harbour", config={"metadata": {ACCOUNT_KEY: 7}})


def test_async_twin(kb: KnowledgeBase) -> None:
    retriever = PrivateRetriever(retriever=_noisy(kb, 3), account="eve")
    chain = _chain(retriever, ["async answer"])
    assert asyncio.run(chain.ainvoke("Velmora")) == "async answer"
    docs = asyncio.run(retriever.ainvoke("Velmora", config={"metadata": {ACCOUNT_KEY: "fay"}}))
    assert docs[0].metadata["privacy"]["account"] == "fay"


def test_bad_construction_is_a_clear_error(kb: KnowledgeBase) -> None:
    with pytest.raises(ConfigError, match="exactly one of"):
        PrivateRetriever()
    with pytest.raises(ConfigError, match="must be a ragprivacy Retriever"):
        PrivateRetriever(retriever="not a retriever")
