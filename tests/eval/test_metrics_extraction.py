from __future__ import annotations

import pytest

from ragprivacy.attacks import ADVERSARIAL_SUFFIX, adversarial_query, targeted_queries
from ragprivacy.eval.metrics import DatastoreIndex, lcs_length, max_rouge_l, rouge_l
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
