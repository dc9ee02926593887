"""The knowledge world's QA contract, which the reference reader and retrieval rely on."""

from __future__ import annotations

import re
from functools import cache
from itertools import pairwise

import pytest
from faker import Faker

from ragprivacy.corpus import Corpus, QAItem, synthesize
from ragprivacy.corpus.synthetic._pools import real_name_words
from ragprivacy.corpus.synthetic._relations import (
    ORG_SUFFIXES,
    RELATIONS,
    SCHOOL_SUFFIXES,
    check_relations,
)
from ragprivacy.errors import ConfigError

_KEYWORDS = {r.name: set(r.keywords) for r in RELATIONS}


def _tokens(text: str) -> set[str]:
    return {t.lower() for t in re.findall(r"\w+", text)}


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.])\s+", text)


@cache
def _world(n: int = 600, seed: int = 4) -> Corpus:
    return synthesize("knowledge", n, seed=seed)


def _single(corpus: Corpus) -> list[QAItem]:
    return [q for q in corpus.questions if q.hops == 1]


def test_relation_table_contract() -> None:
    check_relations()  # raises on a broken table


def test_documents_state_one_fact_per_sentence_with_the_full_name() -> None:
    corpus = _world()
    kinds = {d.metadata["entity_type"] for d in corpus}
    assert kinds == {"person", "organization", "place"}
    for doc in corpus:
        name = doc.metadata["entity"]
        sentences = _sentences(doc.text)
        assert 3 <= len(sentences) <= 6
        assert len(sentences) == len(doc.metadata["facts"])
        assert all(name in s for s in sentences)
        for fact in doc.metadata["facts"]:
            assert fact["object"] in sentences[fact["sentence"]]
            if fact["object_id"] is not None:
                assert corpus[fact["object_id"]].metadata["entity"] == fact["object"]


def test_entity_names_are_unique_and_invented() -> None:
    corpus = _world()
    names = [d.metadata["entity"] for d in corpus]
    assert len(set(names)) == len(names)
    real = real_name_words(Faker("en_US"))
    for doc in corpus:
        name = doc.metadata["entity"]
        kind = doc.metadata["entity_type"]
        if kind == "place":
            assert " " not in name and name.lower() not in real
        elif kind == "organization":
            stem, suffix = name.split(" ")
            assert suffix in (SCHOOL_SUFFIXES if doc.metadata["school"] else ORG_SUFFIXES)
            assert stem.lower() not in real
        else:
            assert len(name.split()) == 2
    invented = {
        d.metadata["entity"].split()[0] for d in corpus if d.metadata["entity_type"] != "person"
    }
    assert len(invented) == sum(d.metadata["entity_type"] != "person" for d in corpus)


def test_single_hop_questions_follow_the_reader_contract() -> None:
    corpus = _world()
    single = _single(corpus)
    assert len(single) > 300
    phrasings = set()
    for q in single:
        (doc_id,) = q.support_ids
        doc = corpus[doc_id]
        subject = q.metadata["subject"]
        relation = q.metadata["relation"]
        assert subject == doc.metadata["entity"] and q.metadata["subject_id"] == doc_id
        assert subject in q.question
        sentences = _sentences(doc.text)
        fact = q.metadata["sentence"]
        assert fact in sentences and subject in fact
        others = set().union(*(_tokens(s) for s in sentences if s != fact))
        exact = (_tokens(q.question) & _tokens(fact) & _KEYWORDS[relation]) - others
        assert exact, (q.question, fact)
        (answer,) = q.answers
        assert answer in fact and answer in doc.text
        assert fact.endswith(answer + ".") or f"{answer} " in fact
        phrasings.add(q.question.replace(subject, "{s}"))
    # several phrasings per relation
    assert len(phrasings) >= 2 * len(RELATIONS)


def test_every_fact_of_a_sampled_entity_is_asked() -> None:
    corpus = _world()
    by_group: dict[str, set[str]] = {}
    for q in _single(corpus):
        if q.group and q.group.startswith("entity-"):
            by_group.setdefault(q.group, set()).add(q.metadata["relation"])
    assert len(by_group) == round(0.25 * len(corpus))
    for group, relations in by_group.items():
        doc = corpus[group.removeprefix("entity-")]
        assert relations == {f["relation"] for f in doc.metadata["facts"]}


def test_multi_hop_chains_are_consistent() -> None:
    corpus = _world()
    by_id = {q.id: q for q in corpus.questions}
    assert len(by_id) == len(corpus.questions)
    multi = [q for q in corpus.questions if q.hops > 1]
    assert len(multi) == len(corpus) // 20
    assert {q.hops for q in multi} == {2, 3}
    for q in multi:
        assert len(q.chain) == q.hops == len(q.support_ids)
        subs = [by_id[c] for c in q.chain]
        assert all(s.hops == 1 and s.group == q.group for s in subs)
        assert [s.support_ids[0] for s in subs] == list(q.support_ids)
        assert subs[-1].answers == q.answers
        for before, after in pairwise(subs):
            # each hop's answer is the next hop's subject
            assert before.answers[0] == after.metadata["subject"]
        assert q.metadata["subject"] in q.question
        assert len(set(q.support_ids)) == q.hops
        assert all(s in corpus for s in q.support_ids)


def test_questions_refer_only_to_corpus_documents() -> None:
    corpus = _world()
    assert all(s in corpus for q in corpus.questions for s in q.support_ids)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_tiny_worlds(n: int) -> None:
    corpus = synthesize("knowledge", n, seed=1)
    assert len(corpus) == n
    assert corpus.questions
    for doc in corpus:
        assert 3 <= len(_sentences(doc.text)) <= 6


def test_question_options() -> None:
    only_chains = synthesize("knowledge", 100, seed=2, question_fraction=0.0, n_chains=6)
    assert sum(q.hops > 1 for q in only_chains.questions) == 6
    groups = {q.group for q in only_chains.questions}
    assert all(g.startswith("chain-") for g in groups) and len(groups) == 6
    none = synthesize("knowledge", 30, seed=2, question_fraction=0.0, n_chains=0)
    assert none.questions == ()
    with pytest.raises(ConfigError, match=r"'question_fraction'"):
        synthesize("knowledge", 30, seed=2, question_fraction=2.0)
    with pytest.raises(ConfigError, match=r"'n_chains'"):
        synthesize("knowledge", 30, seed=2, n_chains=-1)


def test_large_world_keeps_the_contract() -> None:
    corpus = synthesize("knowledge", 2000, seed=8)
    names = [d.metadata["entity"] for d in corpus]
    assert len(set(names)) == 2000
    for q in _single(corpus):
        doc = corpus[q.support_ids[0]]
        fact = q.metadata["sentence"]
        others = set().union(*(_tokens(s) for s in _sentences(doc.text) if s != fact))
        assert (_tokens(q.question) & _tokens(fact) & _KEYWORDS[q.metadata["relation"]]) - others
