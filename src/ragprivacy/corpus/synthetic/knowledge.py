"""A fictional world whose facts exist only in the corpus, with single- and multi-hop QA.

Why. Utility of a private RAG system (Private-RAG, Sec. 4: match accuracy on NQ,
TriviaQA and the correlated multi-hop MQuAKE questions) is only meaningful when the
answers cannot come from the generator's own knowledge. Here every fact is a random
relation among invented entities, so only retrieval can answer.

The world. ``n`` entities — about half people, a quarter organisations (some of them
schools) and a quarter places — one document each. People have unique Faker full names;
organisations ("Quenlith Dynamics") and places ("Velmora") have invented names that
match no real name Faker knows. A document has 3–6 sentences, each stating one fact and
containing the entity's full name, e.g. "Marta Olsen was born in Velmora.", "The chief
executive of Quenlith Dynamics is Ivo Petrak.". Relations and surface forms are listed
in :mod:`ragprivacy.corpus.synthetic._relations`.

The QA contract (relied on by the reference reader, which picks the context sentence
with the largest word overlap with the question and answers with its words not in the
question, and by retrieval over the question text):

* every single-hop question repeats the subject's full name and at least one relation
  word that occurs with the same surface form (case-insensitively) in its fact sentence
  and in no other sentence of that document; its gold answer is the object exactly as
  written in the sentence; ``support_ids`` is the one document; ``metadata`` holds the
  ``relation``, the ``subject``, the ``subject_id`` and the fact ``sentence``;
* multi-hop questions compose 2 or 3 relations like MQuAKE ("Where was the chief
  executive of Quenlith Dynamics born?"), with ``hops``, ``chain`` (ids of single-hop
  sub-questions, also in the question list), ``support_ids`` (the documents stating the
  chain's facts, in order) and ``group`` shared with their sub-questions.

Single-hop questions are asked about every fact of a sample of entities
(``question_fraction``), each with its entity's ``group`` (questions about one document
are correlated); ``n_chains`` multi-hop chains are added, alternating 2 and 3 hops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ragprivacy._validation import check_positive_int, check_probability
from ragprivacy.corpus.collection import Corpus, QAItem
from ragprivacy.corpus.synthetic._base import BACKGROUND, GenerationContext, doc_id
from ragprivacy.corpus.synthetic._pools import FakePeople, NameInventor, faker_for, real_name_words
from ragprivacy.corpus.synthetic._relations import (
    INDUSTRIES,
    LITERAL,
    OCCUPATIONS,
    ORG_SUFFIXES,
    ORGANIZATION,
    PASTIMES,
    PERSON,
    PLACE,
    PRODUCTS,
    RELATIONS,
    SCHOOL_SUFFIXES,
    Relation,
    all_keywords,
    relations_of,
    tokens,
)
from ragprivacy.corpus.synthetic._text import Pii as _Pii
from ragprivacy.corpus.synthetic._text import TextBuilder, render
from ragprivacy.errors import ConfigError
from ragprivacy.types import Document

__all__ = ["generate_knowledge"]

_BY_NAME = {r.name: r for r in RELATIONS}
_PII_KIND = {PERSON: "name", ORGANIZATION: "organization", PLACE: "location"}
# relations a document states first when they are possible (they make chains possible)
_PREFERRED = {
    PERSON: (("birthplace", 1.0), ("employer", 0.9)),
    ORGANIZATION: (("headquarters", 1.0), ("chief_executive", 0.9)),
    PLACE: (("mayor", 0.8),),
}


@dataclass
class _Entity:
    index: int
    type: str
    name: str
    school: bool = False
    # relation name -> (object text, object entity index or None)
    facts: dict[str, tuple[str, int | None]] = field(default_factory=dict)


def _type_counts(n: int) -> tuple[int, int, int]:
    n_org = max(1, round(0.25 * n)) if n >= 2 else 0
    n_place = max(1, round(0.25 * n)) if n >= 3 else 0
    return n - n_org - n_place, n_org, n_place


def _literal(pool: str, rng: np.random.Generator, invent: Callable[[], str]) -> str:
    if pool == "year_person":
        return str(int(rng.integers(1931, 2001)))
    if pool == "year_org":
        return str(int(rng.integers(1850, 2016)))
    if pool == "year_place":
        return str(int(rng.integers(1100, 1900)))
    if pool == "population":
        return f"{int(rng.integers(800, 900_000)):,}"
    if pool == "workforce":
        return f"{int(rng.integers(12, 40_000)):,}"
    if pool in ("region", "river"):
        return invent()
    values = {
        "occupation": OCCUPATIONS,
        "pastime": PASTIMES,
        "industry": INDUSTRIES,
        "product": PRODUCTS,
    }[pool]
    return values[int(rng.integers(len(values)))]


class _World:
    """Entities, their names and facts (built in ``__init__``)."""

    def __init__(self, n: int, ctx: GenerationContext) -> None:
        rng = ctx.rng
        fake = faker_for(ctx.faker_seed)
        keywords = all_keywords()
        banned = real_name_words(fake) | keywords
        for r in RELATIONS:
            banned |= tokens(r.sentence + " " + " ".join(r.questions))
        n_person, n_org, n_place = _type_counts(n)

        people = FakePeople(fake, pool_size=min(300, 40 + n), banned_words=keywords)
        if 2 * n_person + 10 > people.capacity:
            # the people need distinct names, and half the name space is kept for
            # background text: refuse before drawing rather than fail deep inside
            raise ConfigError(
                f"A synthetic 'knowledge' corpus holds at most about "
                f"{people.capacity - 10:,} documents (its people get distinct names from a "
                f"pool of {people.capacity:,}); got n={n:,}. Use a smaller 'n', or another "
                "kind for a larger corpus."
            )
        names = [
            t for t in people.full_names(2 * n_person + 10, rng) if ctx.allowed(f"{t[0]} {t[1]}")
        ]
        while len(names) < n_person:  # pragma: no cover - the pool is far larger than needed
            names += [t for t in people.full_names(n_person, rng) if ctx.allowed(f"{t[0]} {t[1]}")]
        inventor = NameInventor(rng, banned)

        def invented() -> str:
            while True:
                word = inventor.word()
                if ctx.allowed(word):
                    return word

        self.invent = invented
        types = [PERSON] * n_person + [ORGANIZATION] * n_org + [PLACE] * n_place
        order = rng.permutation(n).tolist()
        self.entities: list[_Entity] = []
        person_names = iter(f"{f} {la}" for f, la, _ in names[:n_person])
        n_schools = max(1, round(0.3 * n_org)) if n_org >= 2 else 0
        org_seen = 0
        for i in range(n):
            kind = types[order[i]]
            if kind == PERSON:
                self.entities.append(_Entity(i, kind, next(person_names)))
            elif kind == ORGANIZATION:
                school = org_seen < n_schools
                org_seen += 1
                suffixes = SCHOOL_SUFFIXES if school else ORG_SUFFIXES
                name = f"{invented()} {suffixes[int(rng.integers(len(suffixes)))]}"
                self.entities.append(_Entity(i, kind, name, school=school))
            else:
                self.entities.append(_Entity(i, kind, invented()))
        self.of_type = {
            t: [e.index for e in self.entities if e.type == t]
            for t in (PERSON, ORGANIZATION, PLACE)
        }
        self.schools = [e.index for e in self.entities if e.school]
        self._assign_facts(rng)

    def _pool(self, r: Relation) -> list[int]:
        return self.schools if r.only_schools else self.of_type[r.object]

    def _possible(self, r: Relation, subject: _Entity) -> bool:
        if r.name == "spouse":
            return False  # assigned in pairs
        if r.object == LITERAL:
            return True
        pool = self._pool(r)
        return len(pool) > 1 or (len(pool) == 1 and pool[0] != subject.index)

    def _object(self, r: Relation, subject: _Entity, rng: np.random.Generator) -> int:
        pool = self._pool(r)
        if r.name == "chief_executive":  # prefer someone employed there
            pool = self._staff.get(subject.index) or pool
        elif r.name == "mayor":  # prefer someone with a home there
            pool = self._residents.get(subject.index) or pool
        while True:
            j = pool[int(rng.integers(len(pool)))]
            if j != subject.index:
                return j

    def _assign_facts(self, rng: np.random.Generator) -> None:
        people = self.of_type[PERSON]
        shuffled = [people[int(k)] for k in rng.permutation(len(people))]
        n_pairs = int(0.15 * len(people))
        for k in range(n_pairs):
            a, b = self.entities[shuffled[2 * k]], self.entities[shuffled[2 * k + 1]]
            a.facts["spouse"] = (b.name, b.index)
            b.facts["spouse"] = (a.name, a.index)
        # people first so that chief executives and mayors can follow employers and homes
        self._staff: dict[int, list[int]] = {}
        self._residents: dict[int, list[int]] = {}
        for kind in (PERSON, ORGANIZATION, PLACE):
            if kind == ORGANIZATION:
                for index in self.of_type[PERSON]:
                    facts = self.entities[index].facts
                    for relation, by_object in (
                        ("employer", self._staff),
                        ("home", self._residents),
                    ):
                        target = facts.get(relation, ("", None))[1]
                        if target is not None:
                            by_object.setdefault(target, []).append(index)
            for index in self.of_type[kind]:
                entity = self.entities[index]
                k = int(rng.integers(3, 7))
                chosen = list(entity.facts)
                for name, p in _PREFERRED[kind]:
                    if (
                        len(chosen) < k
                        and self._possible(_BY_NAME[name], entity)
                        and rng.random() < p
                    ):
                        chosen.append(name)
                rest = [
                    r.name
                    for r in relations_of(kind)
                    if r.name not in chosen and self._possible(r, entity)
                ]
                for j in rng.permutation(len(rest)).tolist():
                    if len(chosen) >= k:
                        break
                    chosen.append(rest[j])
                for name in chosen:
                    if name in entity.facts:
                        continue
                    r = _BY_NAME[name]
                    if r.object == LITERAL:
                        assert r.literal is not None
                        entity.facts[name] = (_literal(r.literal, rng, self.invent), None)
                    else:
                        j = self._object(r, entity, rng)
                        entity.facts[name] = (self.entities[j].name, j)


def _document(
    world: _World, entity: _Entity, ctx: GenerationContext, n: int, rng: np.random.Generator
) -> tuple[Document, dict[str, str]]:
    """The entity's document and the text of each fact's sentence."""
    relations = list(entity.facts)
    order = rng.permutation(len(relations)).tolist()
    b = TextBuilder()
    sentences: dict[str, str] = {}
    facts_meta = []
    subject = _Pii(entity.name, _PII_KIND[entity.type])
    for k, pos in enumerate(order):
        name = relations[pos]
        r = _BY_NAME[name]
        value, j = entity.facts[name]
        obj = (
            _Pii(value, _PII_KIND[world.entities[j].type])
            if j is not None
            else (_Pii(value, "location") if r.literal in ("region", "river") else value)
        )
        segments = render(r.sentence, {"s": subject, "o": obj})
        sentence = "".join(t for t, _ in segments)
        if k:
            b.text(" ")
        b.add(segments)
        sentences[name] = sentence
        facts_meta.append(
            {
                "relation": name,
                "object": value,
                "object_id": doc_id(ctx.kind, j, n) if j is not None else None,
                "sentence": k,
            }
        )
    text, spans = b.build()
    doc = Document(
        id=doc_id(ctx.kind, entity.index, n),
        text=text,
        metadata={
            "kind": "knowledge",
            "entity": entity.name,
            "entity_type": entity.type,
            "school": entity.school,
            "facts": facts_meta,
        },
        pii=spans,
    )
    return doc, sentences


def _phrase_question(r: Relation, subject: str, rng: np.random.Generator) -> str:
    q = r.questions[int(rng.integers(len(r.questions)))].format(s=subject)
    return q[0].upper() + q[1:]


def generate_knowledge(
    n: int,
    ctx: GenerationContext,
    *,
    question_fraction: float = 0.25,
    n_chains: int | None = None,
) -> Corpus:
    """The fictional-world corpus and its questions (see the module docstring).

    Args:
        n: number of entities, one document each.
        ctx: the generation context.
        question_fraction: fraction of entities whose every fact gets a single-hop
            question (at least one entity).
        n_chains: number of multi-hop chains (default ``max(1, n // 20)``; fewer when the
            world is too small to hold them).
    """
    check_probability("question_fraction", question_fraction)
    if n_chains is not None:
        n_chains = check_positive_int("n_chains", n_chains, allow_zero=True)
    world = _World(n, ctx)
    rng = ctx.rng
    docs: list[Document] = []
    sentences: list[dict[str, str]] = []
    for entity in world.entities:
        doc, sent = _document(world, entity, ctx, n, rng)
        docs.append(doc)
        sentences.append(sent)
    if ctx.partition == BACKGROUND:
        return Corpus(docs)

    questions: list[QAItem] = []

    def ask(entity: _Entity, relation: str, group: str) -> QAItem:
        r = _BY_NAME[relation]
        item = QAItem(
            id=f"{ctx.kind}-q{len(questions):06d}",
            question=_phrase_question(r, entity.name, rng),
            answers=(entity.facts[relation][0],),
            support_ids=(docs[entity.index].id,),
            hops=1,
            group=group,
            metadata={
                "relation": relation,
                "subject": entity.name,
                "subject_id": docs[entity.index].id,
                "sentence": sentences[entity.index][relation],
            },
        )
        questions.append(item)
        return item

    k_entities = max(1, round(question_fraction * n)) if question_fraction > 0 else 0
    for index in sorted(rng.choice(n, size=k_entities, replace=False).tolist()):
        entity = world.entities[index]
        for relation in entity.facts:
            ask(entity, relation, f"entity-{docs[index].id}")

    wanted = max(1, n // 20) if n_chains is None else n_chains
    made = 0
    for slot in range(wanted):
        path = None
        for hops in (3, 2) if slot % 2 else (2,):
            for _ in range(50):
                path = _walk(world, hops, rng)
                if path is not None:
                    break
            if path is not None:
                break
        if path is None:
            continue
        hops = len(path)
        group = f"chain-{made:05d}"
        subs = [ask(world.entities[e], rel, group) for e, rel in path]
        # compose: the phrase of every hop but the last, then the last hop's question
        subject = world.entities[path[0][0]].name
        for _, rel in path[:-1]:
            phrase = _BY_NAME[rel].phrase
            assert phrase is not None
            subject = phrase.format(s=subject)
        last = _BY_NAME[path[-1][1]]
        final_entity = world.entities[path[-1][0]]
        questions.append(
            QAItem(
                id=f"{ctx.kind}-q{len(questions):06d}",
                question=_phrase_question(last, subject, rng),
                answers=(final_entity.facts[last.name][0],),
                support_ids=tuple(docs[e].id for e, _ in path),
                hops=hops,
                group=group,
                chain=tuple(q.id for q in subs),
                metadata={
                    "relations": [rel for _, rel in path],
                    "subject": world.entities[path[0][0]].name,
                    "subject_id": docs[path[0][0]].id,
                    "entities": [world.entities[e].name for e, _ in path],
                },
            )
        )
        made += 1
    return Corpus(docs, questions=questions)


def _walk(world: _World, hops: int, rng: np.random.Generator) -> list[tuple[int, str]] | None:
    """A random chain ``[(entity, relation), ...]`` through distinct entities, or None."""
    start = int(rng.integers(len(world.entities)))
    path: list[tuple[int, str]] = []
    current = start
    visited = {start}
    for hop in range(hops):
        entity = world.entities[current]
        if hop < hops - 1:
            options = [
                name for name, (_, j) in entity.facts.items() if j is not None and j not in visited
            ]
        else:
            options = list(entity.facts)
            options = [name for name in options if entity.facts[name][1] not in visited]
        if not options:
            return None
        relation = sorted(options)[int(rng.integers(len(options)))]
        path.append((current, relation))
        nxt = entity.facts[relation][1]
        if hop < hops - 1:
            assert nxt is not None
            visited.add(nxt)
            current = nxt
    return path
