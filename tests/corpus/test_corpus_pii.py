"""PII detectors: one table of cases run against every detector, the regex detector
against the synthetic generators' exact ground truth, every loader filling PII through
the registry, and redaction."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from ragprivacy.corpus import (
    PIIDetector,
    RegexPIIDetector,
    create_pii_detector,
    load_corpus,
    load_dataset_corpus,
    merge_spans,
    pii_detector_names,
    redact_corpus,
    redact_document,
    redact_text,
    register_pii_detector,
    synthesize,
)
from ragprivacy.errors import ConfigError, UnknownBackendError
from ragprivacy.types import Document, PIISpan

_NER_MODEL = any(
    importlib.util.find_spec(m) is not None
    for m in ("en_core_web_lg", "en_core_web_md", "en_core_web_sm", "en_core_web_trf")
)

# (text, expected (kind, value) pairs, detectors that must find exactly them). "ner" is
# presidio with a spaCy model installed. A detector left out of the last column is not
# expected to find that form; the column says what each one does and does not cover.
BOTH = ("regex", "presidio")
CASES: list[tuple[str, list[tuple[str, str]], tuple[str, ...]]] = [
    ("Call me at (713) 853-7041 tonight.", [("phone", "(713) 853-7041")], BOTH),
    ("My number is 555.867.5309.", [("phone", "555.867.5309")], BOTH),
    ("Reach me on +1 212-555-0199.", [("phone", "+1 212-555-0199")], BOTH),
    ("London office: +44 20 7946 0958.", [("phone", "+44 20 7946 0958")], BOTH),
    ("mob. +91-9876543210 after 6", [("phone", "+91-9876543210")], BOTH),
    ("call 9876543210 please", [("phone", "9876543210")], BOTH),
    ("Desk 001-555-123-4567x890 today", [("phone", "001-555-123-4567x890")], ("regex",)),
    ("Write to jane_doe@mail.example.co.uk now.", [("email", "jane_doe@mail.example.co.uk")], BOTH),
    ("From: phillip.allen@enron.com", [("email", "phillip.allen@enron.com")], BOTH),
    ("My SSN is 536-22-8741.", [("ssn", "536-22-8741")], BOTH),
    ("Visa 4111 1111 1111 1111 exp 09/27", [("credit_card", "4111 1111 1111 1111")], BOTH),
    ("card 4111-1111-1111-1111.", [("credit_card", "4111-1111-1111-1111")], BOTH),
    ("Server at 10.0.0.254 is down.", [("ip_address", "10.0.0.254")], BOTH),
    ("See https://example.org/a?b=1 first", [("url", "https://example.org/a?b=1")], BOTH),
    ("Docs at http://www.x.com/a.pdf.", [("url", "http://www.x.com/a.pdf")], BOTH),
    ("Born 12/25/1980 in town.", [("date", "12/25/1980")], BOTH),
    ("Tests done on 2021-03-04.", [("date", "2021-03-04")], BOTH),
    ("Seen on March 4, 2021 at the clinic.", [("date", "March 4, 2021")], ("regex",)),
    ("Admitted 4 March 2021 overnight.", [("date", "4 March 2021")], ("regex",)),
    ("Blood tests from 19 June were fine.", [("date", "19 June")], ("regex",)),
    (
        "Date: Tue, 27 Apr 1999 04:26:00 -0700 (PDT)",
        [("date", "Tue, 27 Apr 1999 04:26:00 -0700 (PDT)")],
        ("regex",),
    ),
    (
        "Mail a.b@enron.com or call (713) 853-1234.",
        [("email", "a.b@enron.com"), ("phone", "(713) 853-1234")],
        BOTH,
    ),
    (
        "My name is Austin Contreras and I live in Chicago.",
        [("name", "Austin Contreras"), ("location", "Chicago")],
        ("ner",),
    ),
    # nothing here is personal data: neither detector may report anything
    ("Order 1234567890123 shipped in 2021.", [], BOTH),
    ("I weigh 120 lbs, am 45 and take 500 mg twice a day.", [], BOTH),
    ("Score 3.5 of 10; ratio 1:4.", [], BOTH),
]


@pytest.fixture(scope="module")
def presidio() -> PIIDetector:
    pytest.importorskip("presidio_analyzer")
    return create_pii_detector("presidio")


def _check_spans(text: str, spans: tuple[PIISpan, ...]) -> None:
    assert all(text[s.start : s.end] == s.value for s in spans)
    assert all(a.end <= b.start for a, b in itertools.pairwise(spans))  # sorted, disjoint


@pytest.mark.parametrize("name", ["regex", "presidio"])
@pytest.mark.parametrize(("text", "expected", "who"), CASES, ids=[c[0][:28] for c in CASES])
def test_shared_cases(
    name: str,
    text: str,
    expected: list[tuple[str, str]],
    who: tuple[str, ...],
    request: pytest.FixtureRequest,
) -> None:
    role = "ner" if name == "presidio" and "ner" in who else name
    det = RegexPIIDetector() if name == "regex" else request.getfixturevalue("presidio")
    spans = det.detect(text)
    _check_spans(text, spans)
    found = [(s.kind, s.value) for s in spans]
    if role == "ner" and not _NER_MODEL:
        # no spaCy model installed (none is downloaded): names and places are not found
        assert not {"name", "location"} & {kind for kind, _ in found}
    elif role in who:
        assert found == expected
    else:  # the table says this detector does not cover the form: pin that, so a change shows
        assert found != expected, f"{name} now covers {text!r}: update the table"


def test_what_each_detector_cannot_find(presidio: PIIDetector) -> None:
    # the regex detector refuses kinds it has no pattern for instead of silently
    # finding nothing; presidio without a spaCy model says it finds no names
    with pytest.raises(ConfigError, match="presidio"):
        RegexPIIDetector(kinds=["name"])
    if not _NER_MODEL:
        assert "name" not in presidio.kinds and presidio.config()["model"] is None
    with pytest.raises(ConfigError, match="not installed"):
        create_pii_detector("presidio:no_such_spacy_model")


def test_presidio_kinds_filter_and_threshold(presidio: PIIDetector) -> None:
    only = create_pii_detector("presidio", kinds=["email"])
    text = "Mail a.b@enron.com or call (713) 853-1234."
    assert [s.kind for s in only.detect(text)] == ["email"]
    # its phone matches score 0.4: a higher threshold drops them
    strict = create_pii_detector("presidio", score_threshold=0.5)
    assert [s.kind for s in strict.detect(text)] == ["email"]


def test_registry() -> None:
    assert pii_detector_names() == ["presidio", "regex"]
    with pytest.raises(UnknownBackendError, match="regex"):
        create_pii_detector("nope")
    assert create_pii_detector("regex", kinds=["phone"]).kinds == ("phone",)


@pytest.mark.parametrize("kind", ["medical", "email"])
def test_regex_detector_matches_the_synthetic_ground_truth(kind: str) -> None:
    """Every phone number, e-mail address, URL and date the generators mark is found at
    its exact offsets, and nothing else is reported on these corpora."""
    det = RegexPIIDetector()
    corpus = synthesize(kind, 150, seed=4)
    truth = {(d.id, s.start, s.end, s.kind) for d in corpus for s in d.pii if s.kind in det.kinds}
    found = {(d.id, s.start, s.end, s.kind) for d in corpus for s in det.detect(d.text)}
    assert len(truth) > 100
    assert found == truth


def test_presidio_cross_checks_the_ground_truth(presidio: PIIDetector) -> None:
    """Presidio finds every e-mail address and URL of the synthetic e-mails at the
    generator's offsets, and only phone numbers among the generator's phones (it drops
    numbers whose invented area code no region uses)."""
    corpus = synthesize("email", 60, seed=4)
    for kind in ("email", "url"):
        truth = {(d.id, s.start, s.end) for d in corpus for s in d.pii if s.kind == kind}
        found = {
            (d.id, s.start, s.end)
            for d in corpus
            for s in presidio.detect(d.text)
            if s.kind == kind
        }
        assert truth and found == truth, kind
    phones = {(d.id, s.start, s.end) for d in corpus for s in d.pii if s.kind == "phone"}
    found = {
        (d.id, s.start, s.end) for d in corpus for s in presidio.detect(d.text) if s.kind == "phone"
    }
    assert found <= phones and len(found) >= 0.8 * len(phones)


def test_merge_spans_keeps_the_earlier_of_overlapping_spans() -> None:
    a = PIISpan(0, 5, "name", "Alice")
    b = PIISpan(3, 8, "url", "ce.io")
    c = PIISpan(9, 10, "date", "5")
    assert merge_spans([a], [c, b]) == (a, c)
    assert merge_spans([b, a]) == (b,)


# ---------------------------------------------------------------- loaders


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_every_dataset_loader_fills_pii_through_the_detector(tmp_path: Path) -> None:
    """HealthCareMagic (the papers' main dataset) had no PII ground truth: the loaders
    now all take it from one detector."""
    hcm = _jsonl(
        tmp_path / "hcm.jsonl",
        [{"input": "Hi, my number is 555.867.5309, what should I do?", "output": "Rest."}],
    )
    doc = load_dataset_corpus("healthcaremagic", path=hcm)[0]
    assert [(s.kind, s.value) for s in doc.pii] == [("phone", "555.867.5309")]
    assert doc.text[doc.pii[0].start : doc.pii[0].end] == "555.867.5309"
    assert load_dataset_corpus("healthcaremagic", path=hcm, pii_detector=None)[0].pii == ()

    calls: list[str] = []

    class Counting(PIIDetector):
        name = "counting"
        kinds = ("email",)

        def detect(self, text: str) -> tuple[PIISpan, ...]:
            calls.append(text)
            return RegexPIIDetector(kinds=["email"]).detect(text)

    register_pii_detector("counting-test", Counting, replace=True)
    rows = {
        "echr": {"facts": ["The applicant wrote to x@y.org.", "He was arrested."]},
        "reddit-travel": {"title": "Paris?", "selftext": "mail me at t@r.com", "answer": "Go."},
        "msmarco": {"id": "1", "text": "Support: help@corp.com"},
        "enron": {"message": "From: a.b@enron.com\n\nHi"},
    }
    for name, row in rows.items():
        path = _jsonl(tmp_path / f"{name}.jsonl", [row])
        corpus = load_dataset_corpus(name, path=path, pii_detector="counting-test")
        assert [s.kind for s in corpus[0].pii] == ["email"], name
        assert corpus.metadata["pii_detector"]["name"] == "counting"
    assert len(calls) == len(rows)


def test_file_corpora_get_pii_where_the_file_gives_none(tmp_path: Path) -> None:
    csv = tmp_path / "c.csv"
    csv.write_text("id,text\na,Call 555.867.5309\nb,nothing here\n", encoding="utf-8")
    assert all(not d.pii for d in load_corpus(csv))  # readers alone stay lossless
    corpus = load_corpus(csv, pii_detector="regex")
    assert [s.value for s in corpus["a"].pii] == ["555.867.5309"] and not corpus["b"].pii
    given = PIISpan(0, 4, "name", "Call")  # spans a file gives are kept as they are
    rows = [Document("a", "Call 555.867.5309", pii=(given,)).to_dict()]
    assert load_corpus(_jsonl(tmp_path / "c.jsonl", rows), pii_detector="regex")["a"].pii == (
        given,
    )


def test_synthesize_adds_detected_spans_to_the_exact_ones() -> None:
    plain = synthesize("legal", 20, seed=2)
    more = synthesize("legal", 20, seed=2, pii_detector="regex")
    assert plain.texts == more.texts
    for a, b in zip(plain, more):
        assert set(a.pii) <= set(b.pii)  # the generator's spans are kept
        _check_spans(b.text, b.pii)
    assert more.metadata["pii_detector"]["name"] == "regex"


# ---------------------------------------------------------------- redaction


def test_redaction_replaces_spans_with_typed_placeholders() -> None:
    text = "Mail a.b@enron.com or call (713) 853-1234 on 3/4/2021."
    spans = RegexPIIDetector().detect(text)
    assert redact_text(text, spans) == "Mail [EMAIL] or call [PHONE] on [DATE]."
    assert redact_text(text, spans, placeholder="<{kind}>").startswith("Mail <email> or")
    doc = Document("d1", text, {"src": "x"}, pii=spans)
    red = redact_document(doc, "regex")
    assert red.id == "d1" and red.pii == () and red.metadata == {"src": "x", "pii_redacted": 3}
    corpus = synthesize("medical", 40, seed=3)
    redacted = redact_corpus(corpus, "regex")
    assert redacted.ids == corpus.ids and redacted.metadata["pii_redaction"]["name"] == "regex"
    gone = [s.value for d in corpus for s in d.pii if s.kind in ("phone", "email", "date")]
    assert gone and not any(v in t for v in gone for t in redacted.texts)
    # names need NER: the regex detector leaves them, and the table says so
    names = [s.value for d in corpus for s in d.pii if s.kind == "name"]
    assert any(v in t for v in names for t in redacted.texts)
