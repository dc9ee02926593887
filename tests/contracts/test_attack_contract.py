"""The contract every membership attack meets, parametrised over every registered attack:
it sees the system under attack (and its shadow, when it learns) only through
``Response.public()``.

A spy system answers with the public part of a real RAG system's answer and sets every
private field — the retrieval, the per-document charges, the metadata — to sentinels
that shout "member" (variant A) or "non-member" (variant B). The attack must receive
public responses only, and its scores must not change between the two variants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from ragprivacy.attacks import (
    MembershipAttack,
    ShadowData,
    attack_names,
    create_attack,
    score_targets,
)
from ragprivacy.generate import ReferenceReader
from ragprivacy.rag import Query, RAGSystem, StandardRAG
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Document, Response, Retrieval

BACKGROUND = [
    "The clinic opens at eight and the nurses check every patient in the morning.",
    "A patient who was treated for a cold should rest and drink water.",
    "Doctors write the treatment plan and the pharmacy prepares the medicine.",
    "The weather was mild for most of the week and the parks were busy.",
    "Visitors may call the ward before noon to ask about a relative.",
    "Each record lists the condition, the treatment and a follow-up date.",
]
NON_MEMBERS = [
    Document(f"out-{i}", f"Patient {name} was treated for {topic} and keeps the code {code}.")
    for i, (name, topic, code) in enumerate(
        [
            ("Kamil", "gout", "yb1r"),
            ("Lena", "eczema", "yb2s"),
            ("Milo", "bronchitis", "yb3t"),
            ("Nora", "tinnitus", "yb4u"),
            ("Oskar", "sciatica", "yb5v"),
            ("Pia", "vertigo", "yb6w"),
            ("Quinn", "psoriasis", "yb7x"),
        ]
    )
]

# Factory entries: registry options that build each attack small and offline.
ATTACKS: dict[str, dict[str, Any]] = {
    "mba": {"background_texts": BACKGROUND, "n_masks": 3, "corrector": "none"},
    "srag": {"background_texts": BACKGROUND, "k": 3, "classifiers": ("logistic",)},
    "interrogation": {"background_texts": BACKGROUND, "m": 4},
    "rag-mia": {},
    "s2mia-s": {},
    "s2mia-sp": {},
    "min-k": {},
    "dcmi": {},
}


class SpySystem(RAGSystem):
    """Answers with ``inner``'s public answer (computed once per query, shared by both
    variants through ``cache``) dressed with private sentinels of ``variant``."""

    name = "spy"

    def __init__(
        self, inner: RAGSystem, variant: str, cache: dict[str, Response], ids: Sequence[str]
    ) -> None:
        self.inner = inner
        self.variant = variant
        self.cache = cache
        self.ids = tuple(ids)
        self.queries = 0

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self.answer_batch([query], account=account)[0]

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        out = []
        for q in queries:
            self.queries += 1
            key = repr(Query.of(q))
            if key not in self.cache:
                self.cache[key] = self.inner.answer(q, account=account).public()
            out.append(self._dress(self.cache[key]))
        return out

    def _dress(self, public: Response) -> Response:
        member = self.variant == "A"
        ids = self.ids if member else ()
        return replace(
            public,
            retrieval=Retrieval(
                ids=ids, indices=tuple(range(len(ids))), scores=tuple(1.0 for _ in ids)
            ),
            privacy=replace(public.privacy, per_document=dict.fromkeys(ids, 9.0)),
            metadata={"member": member, "retrieved": ids, "variant": self.variant},
        )


@pytest.fixture(scope="module")
def world(kb: KnowledgeBase, contract: SimpleNamespace) -> SimpleNamespace:
    reader = ReferenceReader(BACKGROUND)
    inner = StandardRAG(TopKRetriever(kb, k=contract.K), reader)
    docs = list(contract.DOCS)
    ids = [d.id for d in docs] + [d.id for d in NON_MEMBERS]
    return SimpleNamespace(
        inner=inner,
        ids=ids,
        targets=docs[:3] + NON_MEMBERS[:3],
        labels=[1, 1, 1, 0, 0, 0],
        shadow_members=docs[5:9],
        shadow_non_members=NON_MEMBERS[3:7],
        cache={},
        shadow_cache={},
    )


def _spy(world: SimpleNamespace, variant: str, *, shadow: bool = False) -> SpySystem:
    cache = world.shadow_cache if shadow else world.cache
    return SpySystem(world.inner, variant, cache, world.ids)


def _attack(name: str) -> MembershipAttack:
    options = ATTACKS.get(name)
    if options is None:
        pytest.fail(
            f"Attack {name!r} is registered but has no factory entry: add its options to "
            "ATTACKS in tests/contracts/test_attack_contract.py."
        )
    return create_attack(name, **options)


def _recording(attack: MembershipAttack, seen: list[Response]) -> None:
    """Record every response the attack's ``decide`` (and ``features``, what a learning
    attack fits on) receives."""
    for method in ("decide", "features"):
        original: Callable[..., Any] | None = getattr(attack, method, None)
        if original is None:
            continue

        def spy(target: Document, responses: Sequence[Response], _f: Any = original) -> Any:
            seen.extend(responses)
            return _f(target, responses)

        setattr(attack, method, spy)


def _run(name: str, world: SimpleNamespace, variant: str, seen: list[Response]) -> list[float]:
    attack = _attack(name)
    _recording(attack, seen)
    if attack.learns:
        shadow = _spy(world, variant, shadow=True)
        attack.fit(ShadowData(shadow, world.shadow_members, world.shadow_non_members))
        assert shadow.queries > 0
    system = _spy(world, variant)
    scores = score_targets(attack, system, world.targets, world.labels).scores
    scores.append(attack.score(world.targets[0], system))
    assert system.queries > 0  # the attack did query the system
    return scores


def test_every_registered_attack_has_a_factory_entry() -> None:
    missing = sorted(set(attack_names()) - set(ATTACKS))
    assert not missing, f"Add factory entries to ATTACKS for: {missing}"


@pytest.mark.parametrize("name", attack_names())
def test_an_attack_receives_only_public_responses(name: str, world: SimpleNamespace) -> None:
    seen: list[Response] = []
    _run(name, world, "A", seen)
    assert seen, "the attack decided without reading any response"
    for r in seen:
        assert r.retrieval is None and r.retrieved_ids == ()
        assert dict(r.privacy.per_document) == {}
        assert dict(r.metadata) == {}
        assert r == r.public()


@pytest.mark.parametrize("name", attack_names())
def test_private_fields_do_not_change_an_attacks_scores(name: str, world: SimpleNamespace) -> None:
    a = _run(name, world, "A", [])
    b = _run(name, world, "B", [])
    assert a == b
    assert len(a) == len(world.targets) + 1
