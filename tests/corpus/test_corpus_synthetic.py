"""Synthetic corpora: determinism, exact PII offsets, misspelling ground truth, errors."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from ragprivacy.corpus import (
    Corpus,
    background_texts,
    read_jsonl,
    register_synthetic_kind,
    synthesize,
    synthetic_kinds,
    write_jsonl,
)
from ragprivacy.errors import ConfigError, UnknownBackendError
from ragprivacy.types import Document

KINDS = ("medical", "email", "legal", "knowledge")


@cache
def _corpus(kind: str, n: int = 150, seed: int = 3) -> Corpus:
    return synthesize(kind, n, seed=seed)


def _digest(corpus: Corpus) -> str:
    payload = [d.to_dict() for d in corpus] + [q.to_dict() for q in corpus.questions]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def test_registered_kinds() -> None:
    assert set(KINDS) <= set(synthetic_kinds())


@pytest.mark.parametrize("kind", KINDS)
def test_same_seed_same_corpus_other_seed_other_corpus(kind: str) -> None:
    a = synthesize(kind, 40, seed=11)
    b = synthesize(kind, 40, seed=11)
    c = synthesize(kind, 40, seed=12)
    assert _digest(a) == _digest(b)
    assert a.texts != c.texts
    assert len(set(a.texts) & set(c.texts)) == 0


def test_identical_across_processes() -> None:
    code = (
        "import hashlib, json\n"
        "from ragprivacy.corpus import synthesize\n"
        "out = {}\n"
        f"for kind in {KINDS!r}:\n"
        "    c = synthesize(kind, 25, seed=5)\n"
        "    p = [d.to_dict() for d in c] + [q.to_dict() for q in c.questions]\n"
        "    out[kind] = hashlib.sha256(json.dumps(p, sort_keys=True).encode()).hexdigest()\n"
        "print(json.dumps(out))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    remote = json.loads(result.stdout)
    assert remote == {kind: _digest(synthesize(kind, 25, seed=5)) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_pii_offsets_are_exact_and_ids_unique(kind: str) -> None:
    corpus = _corpus(kind)
    assert len(corpus) == 150 and len(set(corpus.ids)) == 150
    assert corpus.name == f"synthetic-{kind}" and corpus.metadata["seed"] == 3
    for doc in corpus:
        assert doc.pii, doc.id
        for span in doc.pii:
            assert doc.text[span.start : span.end] == span.value
        starts = [s.start for s in doc.pii]
        assert starts == sorted(starts)


@pytest.mark.parametrize(
    ("kind", "required"),
    [
        ("medical", {"name", "age", "condition", "drug"}),
        ("email", {"email", "name", "date"}),
        ("legal", {"name", "date", "case_number", "address"}),
        ("knowledge", {"name", "organization", "location"}),
    ],
)
def test_expected_pii_kinds(kind: str, required: set[str]) -> None:
    corpus = _corpus(kind)
    per_doc = [{s.kind for s in d.pii} for d in corpus]
    assert all(required & kinds for kinds in per_doc)
    assert required <= set().union(*per_doc)
    if kind in ("medical", "email"):
        assert {"phone", "email"} <= set().union(*per_doc)
    if kind == "email":
        assert "url" in set().union(*per_doc)


def test_pii_values_are_well_formed() -> None:
    email_re = re.compile(r"^[\w.+-]+@[\w-]+(\.[\w-]+)+$")
    phone_re = re.compile(r"^[+\d(][\d ().-]{9,}\d$")
    for kind in ("medical", "email"):
        for doc in _corpus(kind):
            for s in doc.pii:
                if s.kind == "email":
                    assert email_re.match(s.value), s.value
                if s.kind == "phone":
                    assert phone_re.match(s.value), s.value
                if s.kind == "url":
                    assert s.value.startswith("http://www.")


def test_medical_dialogue_shape_and_length() -> None:
    corpus = _corpus("medical")
    words = [len(d.text.split()) for d in corpus]
    assert min(words) >= 75 and max(words) <= 280
    assert max(words) - min(words) > 80  # lengths vary
    for doc in corpus:
        assert doc.text.startswith("Patient: ")
        offset = doc.metadata["doctor_offset"]
        assert doc.text[offset:].startswith("Doctor: ") and doc.text[offset - 1] == "\n"
        names = [s.value for s in doc.pii if s.kind == "name"]
        assert doc.metadata["patient"] in names


def test_medical_documents_are_not_near_duplicates() -> None:
    sets = [set(re.findall(r"[a-z]+", d.text.lower())) for d in _corpus("medical")[:80]]
    worst = max(len(a & b) / len(a | b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    assert worst < 0.8


def _eligible_words(doc: Document) -> int:
    """Lower-case words of >= 4 letters outside PII, as the misspeller counts them."""
    mask = list(doc.text)
    for s in doc.pii:
        mask[s.start : s.end] = " " * (s.end - s.start)
    return len(re.findall(r"\b[a-z]{4,}\b", "".join(mask)))


def test_misspelling_metadata_is_consistent() -> None:
    corpus = _corpus("medical")
    pairs = [tuple(p) for d in corpus for p in d.metadata["misspellings"]]
    assert pairs
    for doc in corpus:
        words = Counter(re.findall(r"[A-Za-z]+", doc.text))
        for wrong, right in doc.metadata["misspellings"]:
            assert wrong != right and right.isalpha() and right.islower() and len(right) >= 4
            assert words[wrong] >= 1, (wrong, doc.id)
            assert abs(len(wrong) - len(right)) <= 1
            # one edit of a human typist: same first letter
            assert wrong[0] == right[0]
    eligible = sum(_eligible_words(d) for d in corpus)
    rate = len(pairs) / eligible  # the eligible count includes the misspelled words
    assert 0.02 < rate < 0.045, rate
    assert corpus[0].metadata["misspelling_rate"] == 0.03


def test_misspelling_rate_is_a_setting() -> None:
    clean = synthesize("medical", 30, seed=2, misspelling_rate=0.0)
    assert all(d.metadata["misspellings"] == [] for d in clean)
    noisy = synthesize("medical", 30, seed=2, misspelling_rate=0.2)
    pairs = sum(len(d.metadata["misspellings"]) for d in noisy)
    eligible = sum(_eligible_words(d) for d in noisy)
    assert 0.15 < pairs / eligible < 0.25
    with pytest.raises(ConfigError, match=r"'misspelling_rate'"):
        synthesize("medical", 3, seed=2, misspelling_rate=1.5)


def test_email_threads_have_headers() -> None:
    for doc in _corpus("email"):
        head = doc.text.splitlines()
        assert head[0].startswith("Date: ") and head[1].startswith("From: ")
        assert head[2].startswith("To: ")
        assert doc.metadata["sender"] in doc.text
        n = doc.metadata["messages"]
        assert doc.text.count("-----Original Message-----") == n - 1


def test_legal_paragraphs_look_like_echr() -> None:
    for doc in _corpus("legal"):
        assert doc.text.startswith("PROCEDURE\n\n1. The case originated in an application (no. ")
        appno = doc.metadata["application_no"]
        assert re.fullmatch(r"\d{4,5}/\d{2}", appno)
        assert doc.metadata["applicant"] in doc.text
    appnos = [d.metadata["application_no"] for d in _corpus("legal")]
    assert len(set(appnos)) == len(appnos)


@pytest.mark.parametrize("kind", KINDS)
def test_background_texts_are_independent(kind: str) -> None:
    member = _corpus(kind)
    background = background_texts(kind, 60, seed=3)
    assert background == background_texts(kind, 60, seed=3)
    assert len(background) == 60
    assert not set(background) & set(member.texts)
    member_names = {s.value for d in member for s in d.pii if s.kind == "name" and " " in s.value}
    # Whole names only: "Ernest Štefanka" in the background is another person than a
    # member "Ernest Štefan" (a substring test flags it, depending on Faker's pools).
    text = "\n".join(background)
    assert not [n for n in member_names if re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text)]


def test_small_corpora_and_every_kind_with_one_document() -> None:
    for kind in KINDS:
        corpus = synthesize(kind, 1, seed=0)
        assert len(corpus) == 1 and corpus[0].text


def test_bad_arguments() -> None:
    with pytest.raises(
        UnknownBackendError, match=r"Unknown synthetic corpus kind 'poems'.*medical"
    ):
        synthesize("poems", 3, seed=1)
    with pytest.raises(ConfigError, match=r"'n'"):
        synthesize("medical", 0, seed=1)
    with pytest.raises(ConfigError, match=r"'n'"):
        background_texts("medical", -2, seed=1)
    with pytest.raises(ConfigError, match=r"'seed'"):
        synthesize("medical", 2, seed=-1)
    with pytest.raises(ConfigError):
        synthesize("medical", 2, seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"no option 'unknown_option'; it takes: no options"):
        synthesize("email", 2, seed=1, unknown_option=3)
    with pytest.raises(ConfigError, match=r"it takes: 'misspelling_rate'"):
        synthesize("medical", 2, seed=1, misspeling_rate=0.1)


def test_register_a_new_kind() -> None:
    def generate(n: int, ctx: object) -> Corpus:
        return Corpus([Document(f"t-{i}", f"text {i}") for i in range(n)])

    register_synthetic_kind("toy-test", generate)
    try:
        assert "toy-test" in synthetic_kinds()
        corpus = synthesize("toy-test", 2, seed=0)
        assert corpus.texts == ["text 0", "text 1"] and corpus.metadata["kind"] == "toy-test"
        with pytest.raises(ConfigError, match=r"already registered"):
            register_synthetic_kind("toy-test", generate)
    finally:
        from ragprivacy.corpus.synthetic import _base

        _base._KINDS.pop("toy-test", None)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_through_jsonl(kind: str, tmp_path: Path) -> None:
    corpus = synthesize(kind, 12, seed=9)
    back = read_jsonl(write_jsonl(corpus, tmp_path / f"{kind}.jsonl"))
    assert [d.to_dict() for d in back] == [d.to_dict() for d in corpus]
    assert [q.to_dict() for q in back.questions] == [q.to_dict() for q in corpus.questions]
