from __future__ import annotations

import itertools

import numpy as np
import pytest

from ragprivacy.attacks import MBAAttack, generate_masks, parse_mask_answers
from ragprivacy.attacks.mba import answer_matches, correct_words, fragmented_words
from ragprivacy.attacks.stopwords import is_punctuation, is_stop_word
from ragprivacy.corpus import synthesize
from ragprivacy.generate import MASK_PATTERN, tokenize
from ragprivacy.types import Document, Response

TEXT = (
    "Patient: I have had a throbbing headache near my left temple for two weeks, and "
    "the nearlt constant pain wakes me at night. My doctor prescribed sumatriptan but it "
    "did not help. Doctor: This looks like migraine; try propranolol and keep a diary."
)


def _masked_units(m) -> list[str]:
    return [m.units[p] for p in m.positions]


@pytest.mark.parametrize("n_masks", [5, 10, 15, 20])
def test_exactly_m_masks_never_stop_words_punctuation_or_adjacent(n_masks: int, fakes) -> None:
    FakeProxy, FakeCorrector = fakes
    doc = synthesize("medical", 1, seed=n_masks)[0]
    words = {w.lower() for w in tokenize(doc.text)}
    proxy = FakeProxy(ranks={w: (hash(w) % 97) + 2 for w in words})
    m = generate_masks(doc.text, n_masks, proxy, FakeCorrector({}))
    assert m.n_masks == n_masks == len(MASK_PATTERN.findall(m.text))
    assert [int(x) for x in MASK_PATTERN.findall(m.text)] == list(range(1, n_masks + 1))
    for u in _masked_units(m):
        assert not is_punctuation(u) and not is_stop_word(u)
    pos = list(m.positions)
    assert all(b - a > 1 for a, b in itertools.pairwise(pos))


def test_each_of_m_equal_subtexts_gets_its_highest_ranked_word(fakes) -> None:
    FakeProxy, FakeCorrector = fakes
    units = tokenize(TEXT)
    proxy = FakeProxy(ranks={"temple": 50, "sumatriptan": 90, "propranolol": 80})
    m = generate_masks(TEXT, 3, proxy, FakeCorrector({}))
    assert _masked_units(m) == ["temple", "sumatriptan", "propranolol"]
    # subtexts are equal thirds of the units
    n = len(units)
    for i, p in enumerate(m.positions):
        assert round(i * n / 3) <= p < round((i + 1) * n / 3)


def test_misspelled_fragmented_word_is_ranked_by_its_correction_and_keeps_original(fakes) -> None:
    FakeProxy, FakeCorrector = fakes
    # "nearlt" is fragmented and corrected to "nearly"; its rank comes from "nearly"
    proxy = FakeProxy(ranks={"nearly": 99, "nearlt": 1}, fragmented=["nearlt"])
    corrector = FakeCorrector({"nearlt": "nearly"})
    m = generate_masks(TEXT, 1, proxy, corrector)
    assert _masked_units(m) == ["nearlt"]
    assert m.answers[0] == ("nearlt", "nearly")
    assert corrector.windows == [["and", "the", "nearlt"]]  # two words before it (Alg. 1)
    assert m.answer_key() == {"[Mask_1]": ("nearlt", "nearly")}
    # without spelling correction the misspelled word is ranked by its pieces instead
    m2 = generate_masks(TEXT, 1, proxy, corrector, strategy="no-sc")
    assert "nearlt" not in _masked_units(m2)


def test_fragmented_words_and_corrections(fakes) -> None:
    FakeProxy, FakeCorrector = fakes
    units = tokenize("The canestan cream helped, it was nearlt gone.")
    proxy = FakeProxy(fragmented=["canestan", "nearlt"])
    frag = fragmented_words(units, proxy)
    assert [units[i] for i in frag] == ["canestan", "nearlt"]
    fixed = correct_words(units, list(frag), FakeCorrector({"nearlt": "nearly"}))
    assert {units[i]: w for i, w in fixed.items()} == {"nearlt": "nearly"}


def test_prefix_holds_earlier_subtexts_with_their_mask(fakes) -> None:
    FakeProxy, FakeCorrector = fakes
    proxy = FakeProxy(ranks={"temple": 50})
    generate_masks(TEXT, 2, proxy, FakeCorrector({}))
    later = [p for p, _ in proxy.calls if "[Mask]" in p]
    assert later, "the second subtext's prefix must contain the first mask"


def test_plm_strategy_can_mask_a_piece_and_random_strategy_gives_m_masks(fakes) -> None:
    FakeProxy, _ = fakes
    proxy = FakeProxy(ranks={"sumat": 5, "riptan": 99}, fragmented=["sumatriptan"])
    m = generate_masks(TEXT, 2, proxy, None, strategy="plm")
    assert "riptan" in _masked_units(m)
    assert "sumat[Mask_" in m.text
    r = generate_masks(TEXT, 6, proxy, None, strategy="random", rng=np.random.default_rng(1))
    assert r.n_masks == 6


def test_parse_and_match_answers() -> None:
    got = parse_mask_answers("[Mask_1]: Velmora\n[mask 2] : Blood pressure.\nnoise")
    assert got == {1: "Velmora", 2: "Blood pressure."}
    assert answer_matches("blood pressure", ["Blood pressure."])
    assert not answer_matches("", ["x"])


def test_score_is_share_of_correct_masks_and_gamma_rule(fakes) -> None:
    FakeProxy, _ = fakes
    attack = MBAAttack(FakeProxy(ranks={"sumatriptan": 9}), n_masks=4, gamma=0.5, corrector="none")
    doc = Document("d1", TEXT)
    m = attack.masks(doc)
    lines = [f"[Mask_{i + 1}]: {a[0]}" for i, a in enumerate(m.answers)]
    lines[0] = "[Mask_1]: wrong"
    lines[1] = "[Mask_2]: wrong"
    score = attack.decide(doc, [Response("\n".join(lines))])
    assert score == pytest.approx(0.5)
    assert attack.predict(score) is True
    assert attack.predict(0.25) is False
    q = attack.queries(doc)[0]
    assert q.task.value == "fill_masks" and q.text == m.text


def test_real_proxy_keeps_misspelled_originals_in_the_answer_key() -> None:
    from ragprivacy.attacks import NGramProxy, PySpellCorrector
    from ragprivacy.corpus import background_texts

    proxy = NGramProxy(background_texts("medical", 120, seed=5), vocab_size=1500)
    corpus = synthesize("medical", 5, seed=3, misspelling_rate=0.08)
    corrector = PySpellCorrector()
    for doc in corpus:
        m = generate_masks(doc.text, 10, proxy, corrector)
        assert m.n_masks == 10
        for pos, answers in zip(m.positions, m.answers):
            assert answers[0] == m.units[pos]  # the original, as written, comes first
            if len(answers) == 2:  # a corrected misspelling: the correction comes second
                assert answers[1].lower() != answers[0].lower()


def test_stop_words_are_scikit_learns_function_words_plus_contractions() -> None:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    from ragprivacy.attacks.stopwords import STOP_WORDS

    extra = {w for w in STOP_WORDS - ENGLISH_STOP_WORDS if "'" not in w}
    assert extra == {"did", "does", "doing", "having", "just", "ought", "shall", "theirs", "yes"}
    # the content words of scikit-learn's list stay maskable
    for word in ("two", "fifteen", "fire", "bill", "system", "interest", "found"):
        assert word in ENGLISH_STOP_WORDS and not is_stop_word(word)
