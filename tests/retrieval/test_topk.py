from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.corpus import Corpus, synthesize
from ragprivacy.errors import ConfigError, DataError, UnknownBackendError
from ragprivacy.index import create_index
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever, create_retriever
from ragprivacy.types import Document, NonPrivateEvent


@pytest.fixture(scope="module")
def kb() -> KnowledgeBase:
    return KnowledgeBase.build(synthesize("knowledge", 300, seed=11), embedder="lsa")


def test_topk_matches_brute_force_over_full_scores(kb: KnowledgeBase) -> None:
    questions = [q.question for q in kb.corpus.questions[:20]]
    got = TopKRetriever(kb, k=5).retrieve_batch(questions)
    full = kb.index.scores(kb.embedder.encode(questions))
    for row, r in zip(full, got):
        expect = np.argsort(-row, kind="stable")[:5]
        assert list(r.indices) == expect.tolist()
        assert r.scores == pytest.approx(row[expect].tolist(), abs=1e-5)
        assert r.ids == tuple(kb.corpus.ids[i] for i in expect)
        assert r.event == NonPrivateEvent()  # plain top-K: no guarantee, said so


def test_single_hop_support_is_retrieved(kb: KnowledgeBase) -> None:
    singles = [q for q in kb.corpus.questions if q.hops == 1][:100]
    got = TopKRetriever(kb, k=5).retrieve_batch([q.question for q in singles])
    recall = np.mean([q.support_ids[0] in r.ids for q, r in zip(singles, got)])
    assert recall >= 0.9


def test_registry_and_validation(kb: KnowledgeBase) -> None:
    assert isinstance(create_retriever("topk", kb, k=2), TopKRetriever)
    with pytest.raises(UnknownBackendError, match="topk"):
        create_retriever("nope", kb)
    with pytest.raises(ConfigError, match="'k'"):
        TopKRetriever(kb, k=0)
    assert TopKRetriever(kb, k=3).retrieve_batch([]) == []


def test_knowledge_base_refuses_mismatched_parts(kb: KnowledgeBase) -> None:
    with pytest.raises(DataError, match="empty"):
        KnowledgeBase.build(Corpus([], name="void"))
    other = create_index("exact", dim=kb.embedder.dim)
    with pytest.raises(DataError, match="holds 0 vectors"):
        KnowledgeBase(kb.corpus, kb.embedder, other)
    docs = Corpus([Document("a", "one"), Document("b", "two")])
    idx = create_index("exact", dim=kb.embedder.dim)
    idx.add(kb.embedder.encode(["one", "two"]), ["b", "a"])
    with pytest.raises(DataError, match="in order"):
        KnowledgeBase(docs, kb.embedder, idx)
