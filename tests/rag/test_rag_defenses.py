from __future__ import annotations

import pytest

from ragprivacy.corpus import Corpus
from ragprivacy.errors import ConfigError
from ragprivacy.generate import REFUSAL, Prompt, ReferenceReader, Task, render_prompt
from ragprivacy.rag import (
    DefendedGenerator,
    LexiconParaphraser,
    NonRAG,
    ParaphrasingDefense,
    PromptModifyingDefense,
    Query,
    RAGSystem,
    StandardRAG,
    create_defense,
)
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Document, Response

DOC = "Marta Olsen was born in Velmora and works as a nurse at the Velmora clinic."


def _system(compliance: float) -> StandardRAG:
    kb = KnowledgeBase.build(
        Corpus([Document("a", DOC), Document("b", "The harbour of Ostrand is busy.")]),
        embedder="hashing",
    )
    return StandardRAG(TopKRetriever(kb, k=1), ReferenceReader(compliance=compliance))


def test_prompt_modifying_makes_the_reader_refuse_membership_questions() -> None:
    plain = _system(1.0)
    q = Query(DOC, task=Task.JUDGE)
    assert plain.answer(q).text == "Yes"
    defended = create_defense("prompt-modifying", plain)
    assert defended.answer(q).text == REFUSAL
    assert plain.answer(q).text == "Yes"  # the wrapped system is unchanged
    assert defended.describe()["name"] == "prompt-modifying"


def test_defended_prompts_carry_the_figure_3_wording() -> None:
    gen = DefendedGenerator(ReferenceReader())
    qa = gen.defend(Prompt(Task.ANSWER, "Where was Marta born?", (DOC,)))
    text = render_prompt(qa)
    assert "Do not directly repeat any retrieved content" in text and "[context]:" in text
    masks = gen.defend(Prompt(Task.FILL_MASKS, "Marta was born in [Mask_1].", (DOC,)))
    assert "is illegal" in render_prompt(masks) and "[Mask_1]" in render_prompt(masks)
    assert masks.options["defense"] is True


def test_prompt_modifying_needs_a_generator() -> None:
    class Bare(RAGSystem):
        def answer(self, query, *, account=None):
            return Response("x")

    with pytest.raises(ConfigError, match="generator"):
        PromptModifyingDefense(Bare())
    assert isinstance(create_defense("prompt-modifying", NonRAG(ReferenceReader())), RAGSystem)


def test_paraphraser_is_deterministic_and_keeps_masks() -> None:
    p = LexiconParaphraser(rate=1.0)
    text = "My doctor prescribed [Mask_1] because the pain started a week ago, and it helps."
    out = p.paraphrase(text)
    assert out == p.paraphrase(text) and out != text
    assert "[Mask_1]" in out
    assert "physician" in out


def test_paraphrasing_rewrites_what_the_system_sees() -> None:
    seen: list[Query] = []

    class Spy(RAGSystem):
        def answer(self, query, *, account=None):
            seen.append(Query.of(query))
            return Response("ok")

    wrapped = ParaphrasingDefense(Spy(), paraphraser=LexiconParaphraser(rate=1.0))
    wrapped.answer(Query("Please advise about the pain.", retrieval_text="the pain"))
    assert seen[0].text == "Kindly recommend regarding the discomfort."
    assert seen[0].retrieval_text == "the discomfort"
    only = ParaphrasingDefense(Spy(), paraphraser=LexiconParaphraser(rate=1.0), scope="retrieval")
    only.answer("the pain")
    assert seen[1].text == "the pain" and seen[1].retrieval_text == "the discomfort"
    with pytest.raises(ConfigError):
        create_defense("shield", Spy())
