from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.attacks import (
    BlackBox,
    InterrogationAttack,
    MinKProbAttack,
    RagMIAAttack,
    S2MIAAttack,
    ShadowData,
    SRAGAttack,
    create_attack,
    histogram_features,
    make_questions,
    score_targets,
    segment_sample,
    split_membership,
)
from ragprivacy.corpus import background_texts, synthesize
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.eval.metrics import roc_auc
from ragprivacy.generate import ReferenceReader, tokenize
from ragprivacy.rag import StandardRAG, create_defense
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Document, Response


@pytest.fixture(scope="module")
def world():
    corpus = synthesize("medical", 150, seed=21)
    split = split_membership(corpus, targets=40, calibration=0, rng=4)
    kb = KnowledgeBase.build(split.members, embedder="hashing")
    reader = ReferenceReader(background_texts("medical", 150, seed=8), compliance=1.0)
    system = StandardRAG(TopKRetriever(kb, k=3), reader)
    aux = synthesize("medical", 60, seed=99)
    inside, outside = aux.split(0.5, rng=1)
    shadow = ShadowData(
        StandardRAG(TopKRetriever(KnowledgeBase.build(inside, embedder="hashing"), k=3), reader),
        tuple(inside)[:20],
        tuple(outside)[:20],
    )
    texts = background_texts("medical", 150, seed=77)
    return split, system, shadow, texts


def test_split_is_balanced_disjoint_and_fixed_by_seed() -> None:
    corpus = synthesize("medical", 100, seed=1)
    a = split_membership(corpus, targets=20, calibration=10, rng=5)
    b = split_membership(corpus, targets=20, calibration=10, rng=5)
    assert [d.id for d in a.evaluation] == [d.id for d in b.evaluation]
    assert len(a.members) == 80 and len(a.non_members) == 20
    assert sum(a.evaluation_labels) == 10 and sum(a.calibration_labels) == 5
    assert not {d.id for d in a.evaluation} & {d.id for d in a.calibration}
    for d, y in zip(a.evaluation, a.evaluation_labels):
        assert (d.id in a.members) == bool(y)
    with pytest.raises(ConfigError, match="non-members"):
        split_membership(corpus, targets=60, rng=5)


def test_black_box_hides_retrieval_but_the_harness_records_it(world) -> None:
    split, system, _, _ = world
    seen: list = []
    view = BlackBox(system, observe=lambda r: seen.append(r.retrieved_ids))
    r = view.answer(split.evaluation[0].text)
    assert r.retrieval is None and r.retrieved_ids == ()
    assert len(seen) == 1 and seen[0]
    scores = score_targets(RagMIAAttack(), system, split.evaluation, split.evaluation_labels)
    assert len(scores.scores) == 40 and scores.queries == 40
    assert scores.retrieval_recall() > 0.9  # a document retrieves itself


def test_mba_separates_and_rag_mia_collapses_under_prompt_modifying(world) -> None:
    split, system, _, texts = world
    ev, y = split.evaluation, split.evaluation_labels
    mba = create_attack("mba", background_texts=texts, n_masks=8)
    assert roc_auc(score_targets(mba, system, ev, y).scores, y) > 0.9
    rag_mia = RagMIAAttack()
    assert roc_auc(score_targets(rag_mia, system, ev, y).scores, y) > 0.9
    defended = create_defense("prompt-modifying", system)
    auc = roc_auc(score_targets(rag_mia, defended, ev, y).scores, y)
    assert auc == pytest.approx(0.5)  # compliance 1.0: every membership question refused


def test_srag_segmentation_features_and_audit(world) -> None:
    split, system, shadow, texts = world

    class Probs:
        def word_prob(self, prefix, word):
            return 0.01 if word in ("zeta", "omega") else 0.9

    text = "a b c d e f g h zeta i j omega k l"
    segs = segment_sample(text, Probs(), k=3)  # suffix of 7 units -> 2 queries
    assert [s.next_word for s in segs] == ["zeta", "omega"]
    assert segs[0].text == "a b c d e f g h"
    assert histogram_features([0.0, 0.999, 1.0, 0.5], m=4) == [1, 0, 1, 2]
    attack = SRAGAttack(background_texts=texts, k=8, classifiers=("logistic",)).fit(shadow)
    assert attack.model_name == "logistic"
    q = attack.queries(split.evaluation[0])[0]
    assert q.options["template"] == "srag-audit" and q.task.value == "continue"
    ev, y = split.evaluation, split.evaluation_labels
    assert roc_auc(score_targets(attack, system, ev, y).scores, y) > 0.8


def test_baselines_read_their_answers() -> None:
    doc = Document("d", "one two three four five six seven eight")
    assert RagMIAAttack().decide(doc, [Response("Yes.")]) == 1.0
    assert RagMIAAttack().decide(doc, [Response("I cannot share that.")]) == 0.0
    mink = MinKProbAttack(k=0.5)
    r = Response("x y z w", tokens=("x", "y", "z", "w"), logprobs=(-1.0, -2.0, -3.0, -4.0))
    assert mink.decide(doc, [r]) == pytest.approx(-3.5)
    with pytest.raises(DataError, match="log-probabilities"):
        mink.decide(doc, [Response("x")])
    s2 = S2MIAAttack(variant="s")
    q = s2.queries(doc)[0]
    assert q.text == "one two three four" and q.options["max_tokens"] == 4
    assert s2.decide(doc, [Response("five six seven eight")]) > 0.99
    assert s2.decide(doc, [Response("")]) == 0.0


def test_interrogation_questions_are_implied_by_the_document(world) -> None:
    split, system, _, texts = world
    doc = split.evaluation[0]
    attack = InterrogationAttack(background_texts=texts, m=6)
    qs = attack.questions(doc)
    assert len(qs) == 6 and [q.answer for q in qs] == [True, False] * 3
    # the reference reader, given the document itself, answers every question right
    reader = system.generator
    from ragprivacy.generate import Prompt, Task

    right = 0
    for q in qs:
        out = reader.generate(Prompt(Task.YESNO, q.text, (doc.text,))).text
        right += out.lower().startswith("yes") == q.answer
    assert right == 6
    rng = np.random.default_rng(0)
    assert make_questions(doc.text, "", attack.proxy, 3, rng=rng)[0].text.startswith("Is it so")
    assert len(tokenize(attack.queries(doc)[0].retrieval_text or "")) > len(tokenize(qs[0].text))
