"""DCMI: the perturbation, the P(Yes) reading of an answer and the differential score
against hand-computed cases, and separation on a small leaky system."""

from __future__ import annotations

import math

import pytest
from sklearn.metrics import roc_auc_score

from ragprivacy.attacks import (
    DCMIAttack,
    create_attack,
    perturb_text,
    replacements_wanted,
    score_targets,
    split_membership,
    yes_probability,
)
from ragprivacy.corpus import background_texts, synthesize
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.generate import ReferenceReader, Task
from ragprivacy.rag import StandardRAG
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Completion, Document, Response


def _yes(p: float, *lead: str) -> Response:
    """An answer whose first yes/no word is "Yes" with probability ``p``."""
    tokens = (*lead, "ĠYes", ".")
    return Response("".join(tokens), tokens, (*(-0.5 for _ in lead), math.log(p), -0.1))


def _no(p: float) -> Response:
    return Response("No.", ("No", "."), (math.log(p), -0.1))


# ------------------------------------------------------------------ the perturbation


@pytest.mark.parametrize(
    ("words", "magnitude", "n"),
    [(100, 0.03, 3), (33, 0.03, 1), (67, 0.03, 2), (10, 0.3, 3), (5, 0.03, 1)],
)
def test_replacements_wanted_is_max_one_floor_rho_w(words: int, magnitude: float, n: int) -> None:
    assert replacements_wanted(" ".join(["w"] * words), magnitude) == n


def test_antonyms_are_spread_over_the_text_keep_case_and_leave_the_rest_byte_for_byte() -> None:
    text = (
        "Patient: Mild pain, often at night.\nDoctor: It is COMMON and usually safe; "
        "take a warm bath and rest well."
    )  # 20 words at ρ = 0.15: n = 3 of the 7 candidates, first, middle and last
    got = perturb_text(text, magnitude=0.15)
    assert got.wanted == 3
    assert got.changes == (("Mild", "Severe"), ("usually", "unusually"), ("well", "badly"))
    assert got.text == (
        "Patient: Severe pain, often at night.\nDoctor: It is COMMON and unusually safe; "
        "take a warm bath and rest badly."
    )
    upper = perturb_text("It is COMMON.", magnitude=0.5)
    assert upper.text == "It is RARE."


def test_negations_then_numbers_make_up_for_missing_antonyms() -> None:
    # no lexicon word: the negation is toggled first, then a standalone number changes;
    # the phone number's digit groups are not standalone numbers
    text = "Ann cannot drive and takes 25 mg. Call 555-0142."
    got = perturb_text(text, magnitude=0.3)  # 8 words: n = 2
    assert got.changes == (("cannot", "can"), ("25", "50"))
    assert got.text == "Ann can drive and takes 50 mg. Call 555-0142."
    assert perturb_text("Darrell Scott is employed by Krorkbadel.").text == (
        "Darrell Scott is not employed by Krorkbadel."
    )
    assert perturb_text("She did not call.").text == "She did call."


def test_a_text_without_candidates_is_sent_unchanged() -> None:
    got = perturb_text("Darrell Scott, Krorkbadel Systems.")
    assert got.text == "Darrell Scott, Krorkbadel Systems." and got.changes == ()


def test_a_perturber_writes_the_copy_and_an_empty_reply_falls_back_to_the_lexicon() -> None:
    class Writer:
        def __init__(self, reply: str) -> None:
            self.reply, self.prompts = reply, []

        def generate(self, prompt, *, max_tokens=None):  # type: ignore[no-untyped-def]
            self.prompts.append(prompt)
            return Completion(self.reply, (), None)

    doc = Document("d", "The rash was mild and itchy.")
    writer = Writer("  The rash was severe and itchy.\n")
    attack = DCMIAttack(perturber=writer)  # type: ignore[arg-type]
    assert attack.queries(doc)[1].text == "The rash was severe and itchy."
    assert attack.queries(doc)[1].text == "The rash was severe and itchy."  # memoised
    (prompt,) = writer.prompts
    assert prompt.task is Task.CHAT and "1 prominent adjectives" in prompt.text
    assert doc.text in prompt.text
    silent = DCMIAttack(perturber=Writer(""))  # type: ignore[arg-type]
    assert silent.queries(doc)[1].text == "The rash was severe and itchy."


# ------------------------------------------------------------------ the score


def test_p_yes_is_read_at_the_first_whole_yes_or_no_word() -> None:
    assert yes_probability(_yes(0.8)) == pytest.approx(0.8)
    assert yes_probability(_yes(0.6, "The", "Ġanswer", "Ġis")) == pytest.approx(0.6)
    assert yes_probability(_yes(0.6, "▁no", "Ġdoubt", ",")) == 0.0  # "no" came first
    assert yes_probability(_no(0.9)) == 0.0  # a No shows P(No) only: P(Yes) read as 0
    assert yes_probability(Response("I cannot share that.", ("I", "Ġcannot"), (-1.0, -1.0))) == 0.0
    # "Yes" + "terday" is no yes; the next whole word is
    pieces = ("Yes", "terday", "?", "ĠYES", "!")
    lps = (-0.1, -0.1, -0.1, math.log(0.3), -0.1)
    assert yes_probability(Response("Yesterday? YES!", pieces, lps)) == pytest.approx(0.3)


def test_the_answer_signal_is_one_for_yes_and_reads_text_without_tokens() -> None:
    assert yes_probability(_yes(0.2), signal="answer") == 1.0
    assert yes_probability(_no(0.99), signal="answer") == 0.0
    assert yes_probability(Response("Yes, it does."), signal="answer") == 1.0
    assert yes_probability(Response("No idea, yes maybe."), signal="answer") == 0.0


def test_the_probability_signal_refuses_answers_without_log_probabilities() -> None:
    with pytest.raises(DataError, match="log-probabilities"):
        yes_probability(Response("Yes", ("Yes",), None))
    with pytest.raises(DataError, match="2 for its 1 tokens"):
        yes_probability(Response("Yes", ("Yes",), (-0.1, -0.2)))
    with pytest.raises(ConfigError, match="signal"):
        yes_probability(_yes(0.5), signal="logit")


@pytest.mark.parametrize(
    ("original", "perturbed", "delta", "label_delta"),
    [
        (_yes(0.9), _yes(0.3), 0.6, 0.0),  # the member drop DCMI looks for
        (_yes(0.9), _no(0.7), 0.9, 1.0),  # a flip: the perturbed copy is denied
        (_no(0.8), _yes(0.4), -0.4, -1.0),
        (_no(0.8), _no(0.6), 0.0, 0.0),
        (_yes(0.25), _yes(0.75), -0.5, 0.0),
    ],
)
def test_the_score_is_p_yes_of_the_target_minus_p_yes_of_its_copy(
    original: Response, perturbed: Response, delta: float, label_delta: float
) -> None:
    doc = Document("d", "The rash was mild.")
    assert DCMIAttack().decide(doc, [original, perturbed]) == pytest.approx(delta)
    assert DCMIAttack(signal="answer").decide(doc, [original, perturbed]) == label_delta


def test_two_judge_queries_one_per_text_and_what_each_signal_needs() -> None:
    doc = Document("d", "The rash was mild.")
    attack = create_attack("dcmi", max_tokens=8)
    original, perturbed = attack.queries(doc)
    assert (original.text, perturbed.text) == ("The rash was mild.", "The rash was severe.")
    for q in (original, perturbed):
        assert q.task is Task.JUDGE and q.search_text == q.text
        assert dict(q.options) == {"template": "rag-mia", "max_tokens": 8}
    assert DCMIAttack.requires_logprobs and attack.requires_logprobs and not attack.learns
    assert not DCMIAttack(signal="answer").requires_logprobs
    assert attack.predict(0.5) is None  # thresholds come from the calibration split
    with pytest.raises(DataError, match="two answers"):
        attack.decide(doc, [_yes(0.5)])
    with pytest.raises(ConfigError):
        DCMIAttack(magnitude=0.0)


# ------------------------------------------------------------------ on a system


@pytest.fixture(scope="module")
def medical() -> tuple[KnowledgeBase, object, list[str]]:
    corpus = synthesize("medical", 80, seed=5)
    split = split_membership(corpus, targets=20, rng=1)
    kb = KnowledgeBase.build(split.members, embedder="lsa")
    return kb, split, background_texts("medical", 50, seed=99)


@pytest.mark.parametrize("signal", ["probability", "answer"])
def test_members_separate_on_a_reader_whose_judgement_a_small_edit_flips(
    medical, signal: str
) -> None:  # type: ignore[no-untyped-def]
    # A strict judge: "Yes" only when a context document holds 95 % of the text's word
    # 3-grams, so the member's own record supports it and not its 3 %-perturbed copy.
    kb, split, background = medical
    reader = ReferenceReader(background, judge_threshold=0.95)
    system = StandardRAG(TopKRetriever(kb, k=2), reader)
    got = score_targets(
        DCMIAttack(signal=signal), system, split.evaluation, split.evaluation_labels
    )
    assert roc_auc_score(got.labels, got.scores) == 1.0
    assert all(s > 0 for s, y in zip(got.scores, got.labels) if y == 1)
    assert all(s == 0 for s, y in zip(got.scores, got.labels) if y == 0)
    assert got.queries == 2 * len(split.evaluation)


def test_a_lenient_judge_answers_both_texts_alike_so_every_score_ties(medical) -> None:  # type: ignore[no-untyped-def]
    # The reference reader's default judge (half of the 3-grams) still finds a member's
    # record holding its perturbed copy: the same answer twice, Δ = 0 for every target.
    kb, split, background = medical
    system = StandardRAG(TopKRetriever(kb, k=2), ReferenceReader(background))
    got = score_targets(DCMIAttack(), system, split.evaluation, split.evaluation_labels)
    assert set(got.scores) == {0.0}
