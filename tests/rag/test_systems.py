from __future__ import annotations

import math

import pytest

from ragprivacy.corpus import background_texts, synthesize
from ragprivacy.errors import ConfigError, UnknownBackendError
from ragprivacy.eval.metrics import longest_verbatim_run, match
from ragprivacy.generate import Task, create_generator, tokenize
from ragprivacy.rag import NonRAG, Query, StandardRAG, create_system
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import NonPrivateEvent


@pytest.fixture(scope="module")
def world():
    corpus = synthesize("knowledge", 400, seed=21)
    kb = KnowledgeBase.build(corpus, embedder="lsa")
    reader = create_generator("reference", background=background_texts("knowledge", 200, seed=5))
    return corpus, kb, reader


def test_rag_answers_what_non_rag_cannot(world) -> None:
    corpus, kb, reader = world
    singles = [q for q in corpus.questions if q.hops == 1][:60]
    rag = StandardRAG(TopKRetriever(kb, k=5), reader)
    non = NonRAG(reader)
    rag_hits = sum(
        match(r.text, q.answers)
        for q, r in zip(singles, rag.answer_batch([q.question for q in singles]))
    )
    non_hits = sum(
        match(r.text, q.answers)
        for q, r in zip(singles, non.answer_batch([q.question for q in singles]))
    )
    assert rag_hits >= 0.8 * len(singles)
    assert non_hits <= 0.05 * len(singles)


def test_response_records_retrieval_but_public_view_hides_it(world) -> None:
    corpus, kb, reader = world
    q = next(q for q in corpus.questions if q.hops == 1)
    r = StandardRAG(TopKRetriever(kb, k=3), reader).answer(q.question)
    assert len(r.retrieved_ids) == 3 and q.support_ids[0] in r.retrieved_ids
    assert r.logprobs is not None and len(r.logprobs) == len(r.tokens)
    assert r.public().retrieval is None and r.public().text == r.text
    # plain RAG has no guarantee: it says so, with an infinite ε, never ε = 0
    assert isinstance(r.privacy.event, NonPrivateEvent) and r.privacy.epsilon == math.inf
    assert not r.privacy.guaranteed


def test_continuation_query_copies_the_retrieved_document() -> None:
    corpus = synthesize("medical", 80, seed=3)
    kb = KnowledgeBase.build(corpus, embedder="lsa")
    reader = create_generator("reference", background=background_texts("medical", 80, seed=9))
    rag = StandardRAG(TopKRetriever(kb, k=2), reader)
    doc = corpus[10]
    toks = tokenize(doc.text)
    prefix = " ".join(toks[:24])
    r = rag.answer(Query(prefix, task=Task.CONTINUE, options={"max_tokens": 30}))
    assert doc.id in r.retrieved_ids
    assert longest_verbatim_run(r.text, toks[24:]) >= 20
    # the retrieval text can differ from the prompt text
    r2 = rag.answer(Query("Please continue.", task=Task.CONTINUE, retrieval_text=prefix))
    assert doc.id in r2.retrieved_ids


def test_system_registry(world) -> None:
    _corpus, kb, reader = world
    assert isinstance(create_system("non-rag", generator=reader), NonRAG)
    assert isinstance(
        create_system("rag", retriever=TopKRetriever(kb), generator=reader), StandardRAG
    )
    with pytest.raises(UnknownBackendError, match="non-rag"):
        create_system("nope", generator=reader)


def test_factory_options_are_checked_before_building(world) -> None:
    """A misspelt option is a ConfigError that lists the accepted ones, not a TypeError."""
    _corpus, kb, reader = world
    with pytest.raises(ConfigError, match=r"rag.*retriever, generator"):
        create_system("rag", retriever=TopKRetriever(kb), generator=reader, topk=3)
    with pytest.raises(ConfigError, match="epsilon_q"):
        create_system("naive_multi", retriever=TopKRetriever(kb), generator=reader, epsilon=5)
    with pytest.raises(ConfigError, match=r"'eps'.*epsilon_q.*epsilon_token"):  # via **kw
        create_system("murag", retriever=TopKRetriever(kb), generator=reader, eps=5)


def test_query_validation() -> None:
    with pytest.raises(TypeError):
        Query(3)  # type: ignore[arg-type]
    assert Query.of("x").task is Task.ANSWER
    with pytest.raises(ValueError):
        Query("x", task="bogus")  # type: ignore[arg-type]
