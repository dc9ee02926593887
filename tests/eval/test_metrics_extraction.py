from __future__ import annotations

import pytest

from ragprivacy.attacks import ADVERSARIAL_SUFFIX, adversarial_query, targeted_queries
from ragprivacy.eval.metrics import DatastoreIndex, lcs_length, max_rouge_l, rouge_l, rouge_tokens
from ragprivacy.types import Document, PIISpan


def test_rouge_l_matches_hand_values() -> None:
    assert lcs_length("abcbdab", "bdcaba") == 4
    # LCS("the cat sat on the mat", "the cat lay on the mat") = 5 of 6 and 6
    assert rouge_l("the cat sat on the mat", "the cat lay on the mat") == pytest.approx(5 / 6)
    assert rouge_l("", "x") == 0.0
    assert rouge_l("A, b!", "a b") == 1.0


def test_max_rouge_l_is_exact_against_brute_force() -> None:
    docs = [
        "the patient has a mild headache and some nausea",
        "call me at the clinic tomorrow morning",
        "the patient has a severe headache since monday",
    ]
    store = DatastoreIndex(docs)
    for cand in ["the patient has a headache", "clinic tomorrow", "unrelated words only"]:
        brute = max(rouge_l(cand, d) for d in docs)
        best, _ = max_rouge_l(cand, store)
        assert best == pytest.approx(brute)


def test_targeted_queries_inject_context_and_prefixes() -> None:
    text = "Hi, I am Ann. You can reach me at ann@x.org for details."
    span = PIISpan(text.index("ann@"), text.index("ann@") + 9, "email", "ann@x.org")
    qs = targeted_queries(Document("d", text, pii=(span,)), span, attempts=10)
    assert len(qs) == 10
    assert all("ann@x.org" not in q.text for q in qs)
    assert qs[1].text.endswith("You can reach me at")
    assert any("e-mail" in q.text.lower() or "email" in q.text.lower() for q in qs)
    q = adversarial_query("What should I take for a cough?")
    assert q.text.endswith(ADVERSARIAL_SUFFIX)


def _pairs() -> list[tuple[str, str]]:
    """Corpus text against its own sentences, shuffles and other documents, plus random
    strings over words, digits, punctuation, case, hyphens, apostrophes and non-ASCII."""
    import numpy as np

    from ragprivacy.corpus import synthesize

    rng = np.random.default_rng(0)
    texts = [
        d.text
        for kind in ("medical", "email", "legal", "knowledge")
        for d in synthesize(kind, 8, seed=3)
    ]
    pairs = []
    for i, t in enumerate(texts):
        words = t.split()
        cut = rng.integers(1, max(2, len(words)))
        pairs.append((" ".join(words[:cut]), t))  # a leaked prefix
        pairs.append((" ".join(rng.permutation(words)[: cut + 3]), t))
        pairs.append((texts[(i + 1) % len(texts)], t))
    alphabet = [*"abcdeABCDE019 ,.;:!?-'’éüß\n\t()$%", "the ", "don't ", "e-mail "]
    for _ in range(300):
        a, b = ("".join(rng.choice(alphabet, rng.integers(0, 60))) for _ in range(2))
        pairs.append((a, b))
    return pairs


def test_rouge_l_equals_rouge_score_exactly() -> None:
    from rouge_score.rouge_scorer import RougeScorer
    from rouge_score.tokenize import tokenize

    scorer = RougeScorer(["rougeL"])
    pairs = _pairs()
    assert len(pairs) > 380
    for cand, ref in pairs:
        assert rouge_tokens(cand) == tokenize(cand, None)
        assert rouge_l(cand, ref) == scorer.score(ref, cand)["rougeL"].fmeasure, (cand, ref)
    refs = [ref for _, ref in pairs[:60:3]]  # one per corpus document
    store = DatastoreIndex(refs)
    for cand, _ in pairs[:60:5]:
        best = max(scorer.score(ref, cand)["rougeL"].fmeasure for ref in refs)
        assert max_rouge_l(cand, store)[0] == best


def _lcs_by_table(a: list[str], b: list[str]) -> int:
    """The textbook dynamic programme, to check the bit-parallel LCS against."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
        prev = cur
    return prev[-1]


def test_the_bit_parallel_lcs_equals_the_dynamic_programme() -> None:
    import random

    rng = random.Random(5)
    for _ in range(2000):
        k = rng.randint(1, 8)  # small alphabets: many matches, long common subsequences
        a = [str(rng.randrange(k)) for _ in range(rng.randint(0, 90))]
        b = [str(rng.randrange(k)) for _ in range(rng.randint(0, 90))]
        assert lcs_length(a, b) == _lcs_by_table(a, b), (a, b)
