"""Readers and writers of corpora: round trips, sidecar questions, error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragprivacy.corpus import (
    Corpus,
    QAItem,
    load_corpus,
    questions_path,
    read_csv,
    read_json,
    read_jsonl,
    read_questions,
    write_csv,
    write_jsonl,
    write_questions,
)
from ragprivacy.errors import DataError
from ragprivacy.types import Document, PIISpan


def _corpus(with_questions: bool = True) -> Corpus:
    text = "Zoë Müller lives at 12 Rue Neuve; call 555-0100."
    docs = [
        Document(
            "a",
            text,
            metadata={"kind": "note", "tags": ["x", "y"], "n": 3},
            pii=(PIISpan(0, 10, "name", "Zoë Müller"), PIISpan(39, 47, "phone", "555-0100")),
        ),
        Document("b", 'Line one,\nline two with "quotes", and commas.'),
    ]
    questions = (
        [
            QAItem("q1", "Where does Zoë live?", ("12 Rue Neuve",), support_ids=("a",)),
            QAItem(
                "q2", "Multi?", ("x",), support_ids=("a", "b"), hops=2, group="g", chain=("q1",)
            ),
        ]
        if with_questions
        else []
    )
    return Corpus(docs, name="toy", questions=questions)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_round_trip_keeps_everything(tmp_path: Path) -> None:
    corpus = _corpus()
    path = write_jsonl(corpus, tmp_path / "docs.jsonl")
    assert questions_path(path) == tmp_path / "docs.questions.jsonl"
    assert questions_path(path).is_file()
    back = read_jsonl(path)
    assert [d.to_dict() for d in back] == [d.to_dict() for d in corpus]
    assert [q.to_dict() for q in back.questions] == [q.to_dict() for q in corpus.questions]
    assert back.name == "docs"
    doc = back["a"]
    assert all(doc.text[s.start : s.end] == s.value for s in doc.pii)
    # UTF-8, not escaped
    assert "Zoë" in path.read_text(encoding="utf-8")
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_write_without_questions_removes_stale_sidecar(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    write_jsonl(_corpus(), path)
    write_jsonl(_corpus(with_questions=False), path)
    assert not questions_path(path).exists()
    assert read_jsonl(path).questions == ()


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(DataError, match=r"nope.jsonl"):
        read_jsonl(missing)
    with pytest.raises(DataError, match=r"does not exist"):
        load_corpus(missing)


def test_invalid_json_says_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "text": \n')
    with pytest.raises(DataError, match=r"Line 2 of .*bad.jsonl.* not valid JSON"):
        read_jsonl(path)


def test_missing_text_field(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", '{"id": "a", "text": "x"}\n\n{"id": "b", "body": "y"}\n')
    with pytest.raises(DataError, match=r"line 3 .*no 'text' field"):
        read_jsonl(path)


def test_text_must_be_a_string(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", '{"id": "a", "text": 5}\n')
    with pytest.raises(DataError, match=r"'text' field .* must be a string"):
        read_jsonl(path)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file_holds_no_documents(tmp_path: Path, content: str) -> None:
    path = _write(tmp_path / "empty.jsonl", content)
    with pytest.raises(DataError, match=r"holds no documents"):
        read_jsonl(path)


def test_duplicate_ids_name_both_lines(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "dup.jsonl",
        '{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n{"id": "a", "text": "z"}\n',
    )
    with pytest.raises(DataError, match=r"Duplicate document id 'a' at line 3 .*line 1"):
        read_jsonl(path)


def test_missing_ids_get_row_ids_and_extras_become_metadata(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "d.jsonl",
        '{"text": "x", "title": "T"}\n{"id": 7, "text": "y"}\n{"id": "", "text": "z"}\n',
    )
    corpus = read_jsonl(path)
    assert corpus.ids == ["doc-1", "7", "doc-3"]
    assert corpus["doc-1"].metadata == {"title": "T"}


def test_bad_pii_span_is_a_data_error(tmp_path: Path) -> None:
    rec = {"id": "a", "text": "abc", "pii": [{"start": 0, "end": 9, "kind": "name", "value": "x"}]}
    path = _write(tmp_path / "d.jsonl", json.dumps(rec) + "\n")
    with pytest.raises(DataError, match=r"line 1 .*not a valid document"):
        read_jsonl(path)


def test_sidecar_with_unknown_support_is_rejected(tmp_path: Path) -> None:
    path = write_jsonl(_corpus(with_questions=False), tmp_path / "docs.jsonl")
    write_questions([QAItem("q", "?", ("x",), support_ids=("zzz",))], questions_path(path))
    with pytest.raises(DataError, match=r"'zzz'.*regenerate or delete"):
        read_jsonl(path)


def test_questions_round_trip_and_errors(tmp_path: Path) -> None:
    qs = list(_corpus().questions)
    path = write_questions(qs, tmp_path / "q.jsonl")
    assert read_questions(path) == qs
    _write(path, '{"id": "q", "question": "Who?", "answers": "Ann"}\n')
    assert read_questions(path)[0].answers == ("Ann",)
    _write(path, '{"id": "q", "question": "Who?"}\n')
    with pytest.raises(DataError, match=r"no 'answers' field"):
        read_questions(path)
    _write(path, '{"id": "q", "question": "Who?", "answers": []}\n')
    with pytest.raises(DataError, match=r"line 1 .*not valid"):
        read_questions(path)
    line = '{"id": "q", "question": "Who?", "answers": ["a"]}\n'
    _write(path, line + line)
    with pytest.raises(DataError, match=r"Duplicate question id 'q' at line 2"):
        read_questions(path)
    with pytest.raises(DataError, match=r"does not exist"):
        read_questions(tmp_path / "none.jsonl")


def test_csv_round_trip(tmp_path: Path) -> None:
    corpus = _corpus()
    path = write_csv(corpus, tmp_path / "docs.csv")
    back = read_csv(path)
    assert back.ids == corpus.ids
    assert back.texts == corpus.texts  # commas, quotes and newlines survive
    assert back["a"].metadata["kind"] == "note"
    assert json.loads(back["a"].metadata["tags"]) == ["x", "y"]
    assert back["a"].pii == ()  # CSV does not store spans
    assert [q.id for q in back.questions] == ["q1", "q2"]


def test_csv_columns_and_errors(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.csv", "body,source\nhello,web\n,empty\nbye,mail\n")
    corpus = read_csv(path, text_column="body")
    assert corpus.ids == ["doc-1", "doc-2", "doc-3"]
    assert corpus["doc-3"].metadata == {"source": "mail"}
    with pytest.raises(DataError, match=r"no 'text' column \(columns: body, source\)"):
        read_csv(path)
    custom = _write(tmp_path / "c.csv", "key,content\nk1,alpha\nk2,beta\n")
    assert read_csv(custom, id_column="key", text_column="content").ids == ["k1", "k2"]
    for content in ("", "id,text\n"):
        empty = _write(tmp_path / "e.csv", content)
        with pytest.raises(DataError, match=r"holds no documents"):
            read_csv(empty)
    dup = _write(tmp_path / "dup.csv", "id,text\na,x\na,y\n")
    with pytest.raises(DataError, match=r"Duplicate document id 'a' at row 2"):
        read_csv(dup)


def test_json_array_object_and_jsonl_in_disguise(tmp_path: Path) -> None:
    arr = _write(tmp_path / "a.json", json.dumps([{"id": "x", "text": "one"}, {"text": "two"}]))
    assert read_json(arr).ids == ["x", "doc-2"]
    obj = {
        "name": "named",
        "documents": [{"id": "x", "text": "one"}],
        "questions": [{"id": "q", "question": "?", "answers": ["one"], "support_ids": ["x"]}],
    }
    corpus = read_json(_write(tmp_path / "o.json", json.dumps(obj)))
    assert corpus.name == "named" and corpus.questions[0].id == "q"
    lines = _write(tmp_path / "l.json", '{"id": "x", "text": "one"}\n{"id": "y", "text": "2"}\n')
    assert read_json(lines).ids == ["x", "y"]
    with pytest.raises(DataError, match=r"without a 'documents' list"):
        read_json(_write(tmp_path / "bad.json", '{"docs": []}'))
    with pytest.raises(DataError, match=r"not valid JSON"):
        read_json(_write(tmp_path / "broken.json", "[{"))


def test_load_corpus_dispatches_on_extension(tmp_path: Path) -> None:
    corpus = _corpus()
    write_jsonl(corpus, tmp_path / "d.jsonl")
    write_csv(corpus, tmp_path / "d.csv")
    _write(tmp_path / "d.json", json.dumps([d.to_dict() for d in corpus]))
    for name in ("d.jsonl", "d.csv", "d.json"):
        assert load_corpus(tmp_path / name).ids == ["a", "b"]
    with pytest.raises(DataError, match=r"unsupported extension '\.txt'.*\.jsonl, \.json or \.csv"):
        load_corpus(_write(tmp_path / "d.txt", "x"))
