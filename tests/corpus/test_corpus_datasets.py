"""Dataset loaders on tiny local files in each dataset's real format, and the offline rule."""

from __future__ import annotations

import csv
import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ragprivacy.corpus import (
    DatasetSpec,
    dataset_names,
    dataset_spec,
    load_dataset_corpus,
    regex_pii,
    register_dataset,
)
from ragprivacy.errors import ConfigError, DataError, DataUnavailableError, UnknownBackendError


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def test_registry_lists_every_dataset_of_the_papers() -> None:
    expected = {
        "healthcaremagic",
        "msmarco",
        "nq-simplified",
        "enron",
        "echr",
        "chatdoctor",
        "triviaqa",
        "nq",
        "mquake",
        "hotpotqa",
        "reddit-travel",
    }
    assert expected <= set(dataset_names())
    assert dataset_spec("msmarco").hub_id == "microsoft/ms_marco"
    with pytest.raises(UnknownBackendError, match=r"Unknown dataset 'imdb'.*healthcaremagic"):
        load_dataset_corpus("imdb", path="x")


def test_healthcaremagic_chat_format_and_instruction_format(tmp_path: Path) -> None:
    chat = _jsonl(
        tmp_path / "HealthCareMagic-100k-en.jsonl",
        [
            {"text": "<human>: I have a headache since Monday. <bot>: Take rest and fluids."},
            {"text": "<human>: My knee hurts. <bot>: Apply ice."},
        ],
    )
    corpus = load_dataset_corpus("healthcaremagic", path=chat)
    assert len(corpus) == 2
    doc = corpus[0]
    assert doc.text == "Patient: I have a headache since Monday.\nDoctor: Take rest and fluids."
    assert doc.text[doc.metadata["doctor_offset"] :].startswith("Doctor:")
    assert doc.metadata["question"] == "I have a headache since Monday."
    instr = _json(
        tmp_path / "hcm.json",
        [
            {
                "instruction": "If you are a doctor...",
                "input": "Fever for 3 days.",
                "output": "See a GP.",
            },
            {
                "instruction": "If you are a doctor...",
                "input": "Fever for 3 days.",
                "output": "See a GP.",
            },
        ],
    )
    corpus = load_dataset_corpus("healthcaremagic", path=instr)
    assert corpus.texts == ["Patient: Fever for 3 days.\nDoctor: See a GP."]  # deduplicated


def test_chatdoctor_json_array(tmp_path: Path) -> None:
    path = _json(
        tmp_path / "chatdoctor200k.json",
        [
            {"instruction": "i", "input": f"Question {k}?", "output": f"Answer {k}."}
            for k in range(5)
        ],
    )
    corpus = load_dataset_corpus("chatdoctor", path=path, limit=3)
    assert len(corpus) == 3 and corpus.metadata["records"] == 3
    assert corpus[2].metadata["answer"] == "Answer 2."


def test_msmarco_parquet_in_hub_layout(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [
        {
            "query": "what is a lobster roll",
            "query_id": 1,
            "query_type": "DESCRIPTION",
            "answers": ["A sandwich of lobster meat."],
            "wellFormedAnswers": [],
            "passages": {
                "is_selected": [0, 1],
                "passage_text": ["Maine is cold.", "A lobster roll is a sandwich."],
                "url": ["http://a.example", "http://b.example"],
            },
        },
        {
            "query": "unanswerable",
            "query_id": 2,
            "query_type": "ENTITY",
            "answers": ["No Answer Present."],
            "wellFormedAnswers": [],
            "passages": {"is_selected": [0], "passage_text": ["Maine is cold."], "url": ["x"]},
        },
    ]
    folder = tmp_path / "ms_marco" / "v1.1"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "validation-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(rows[:1]), folder / "train-00000-of-00001.parquet")
    corpus = load_dataset_corpus("msmarco", path=tmp_path / "ms_marco", split="validation")
    assert corpus.texts == ["Maine is cold.", "A lobster roll is a sandwich."]  # unique passages
    (q,) = corpus.questions  # "No Answer Present." is not a gold answer
    assert q.question == "what is a lobster roll"
    assert q.support_ids == (corpus[1].id,)
    assert corpus[0].metadata["url"] == "http://a.example"
    with pytest.raises(DataError, match=r"matches split 'test'"):
        load_dataset_corpus("msmarco", path=tmp_path / "ms_marco", split="test")


def test_msmarco_passage_collection_tsv(tmp_path: Path) -> None:
    path = tmp_path / "collection.tsv"
    path.write_text("0\tThe first passage.\n1\tThe second passage.\n", encoding="utf-8")
    corpus = load_dataset_corpus("msmarco", path=path)
    assert corpus.ids == ["0", "1"] and not corpus.questions


def test_nq_simplified_folder_with_jsonl_named_json(tmp_path: Path) -> None:
    rec = {
        "question": "who sang hey jude",
        "context": "Hey Jude is a song by the Beatles.",
        "answers": {"text": ["the Beatles"], "answer_start": [25]},
    }
    _jsonl(tmp_path / "nq" / "train.json", [rec, dict(rec, question="who wrote hey jude")])
    _jsonl(tmp_path / "nq" / "test.json", [rec])
    corpus = load_dataset_corpus("nq-simplified", path=tmp_path / "nq", split="train")
    assert len(corpus) == 1 and len(corpus.questions) == 2
    assert corpus.questions[0].answers == ("the Beatles",)
    assert corpus.questions[1].support_ids == (corpus[0].id,)


def test_nq_open_gives_questions_only(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "nq_open.jsonl",
        [
            {"question": "capital of france", "answer": ["Paris", "paris"]},
            {"question": "x", "answer": []},
        ],
    )
    corpus = load_dataset_corpus("nq", path=path)
    assert len(corpus) == 0
    (q,) = corpus.questions
    assert q.answers == ("Paris", "paris")


def test_triviaqa_hub_layout_and_original_release(tmp_path: Path) -> None:
    hub = {
        "question": "Which planet is red?",
        "question_id": "tc_1",
        "answer": {
            "value": "Mars",
            "aliases": ["Mars", "The Red Planet"],
            "normalized_value": "mars",
        },
        "entity_pages": {
            "doc_source": ["TagMe"],
            "filename": ["Mars.txt"],
            "title": ["Mars"],
            "wiki_context": ["Mars is the fourth planet."],
        },
        "search_results": {
            "description": [],
            "filename": [],
            "rank": [],
            "title": [],
            "url": [],
            "search_context": [],
        },
    }
    corpus = load_dataset_corpus("triviaqa", path=_jsonl(tmp_path / "rc.jsonl", [hub]))
    assert corpus.texts == ["Mars is the fourth planet."]
    (q,) = corpus.questions
    assert q.id == "tc_1" and q.answers == ("Mars", "The Red Planet")
    assert q.support_ids == (corpus[0].id,)
    original = {
        "Data": [
            {
                "Question": "Who wrote Hamlet?",
                "QuestionId": "qw_2",
                "Answer": {"Value": "Shakespeare", "Aliases": ["William Shakespeare"]},
                "EntityPages": [{"Title": "Hamlet", "Filename": "Hamlet.txt"}],
            }
        ],
        "Domain": "Wikipedia",
        "Version": 1.0,
    }
    corpus = load_dataset_corpus("triviaqa", path=_json(tmp_path / "wiki-dev.json", original))
    assert corpus.questions[0].answers == ("Shakespeare", "William Shakespeare")


def _mquake_case(case_id: int) -> dict[str, Any]:
    return {
        "case_id": case_id,
        "requested_rewrite": [
            {
                "prompt": "{} is a citizen of",
                "subject": "Ada",
                "target_new": {"str": "Peru", "id": "Q1"},
                "target_true": {"str": "Chile", "id": "Q2"},
                "question": "What country is Ada a citizen of?",
                "relation_id": "P27",
            }
        ],
        "questions": [
            "What is the capital of the country Ada is a citizen of?",
            "Ada is a citizen of a country whose capital is what?",
        ],
        "answer": "Santiago",
        "answer_alias": ["Santiago de Chile"],
        "new_answer": "Lima",
        "new_answer_alias": [],
        "single_hops": [
            {
                "question": "What country is Ada a citizen of?",
                "cloze": "Ada is a citizen of",
                "answer": "Chile",
                "answer_alias": ["Republic of Chile"],
            },
            {
                "question": "What is the capital of Chile?",
                "cloze": "The capital of Chile is",
                "answer": "Santiago",
                "answer_alias": [],
            },
        ],
        "new_single_hops": [],
        "orig": {"triples": [], "triples_labeled": []},
    }


def test_mquake_original_json_gives_chains(tmp_path: Path) -> None:
    path = _json(tmp_path / "MQuAKE-CF-3k.json", [_mquake_case(1), _mquake_case(2)])
    corpus = load_dataset_corpus("mquake", path=path)
    assert corpus.texts == ["Ada is a citizen of Chile.", "The capital of Chile is Santiago."]
    by_id = {q.id: q for q in corpus.questions}
    multi = [q for q in corpus.questions if q.hops > 1]
    assert len(multi) == 4 and {q.group for q in multi} == {"mquake-1", "mquake-2"}
    m = multi[0]
    assert m.answers == ("Santiago", "Santiago de Chile")
    assert m.support_ids == tuple(corpus.ids)
    assert [by_id[c].question for c in m.chain] == [
        "What country is Ada a citizen of?",
        "What is the capital of Chile?",
    ]
    assert by_id[m.chain[0]].answers == ("Chile", "Republic of Chile")
    assert m.metadata["new_answer"] == "Lima"


def test_mquake_has_no_hub_copy() -> None:
    with pytest.raises(DataUnavailableError, match=r"MQuAKE GitHub release.*path="):
        load_dataset_corpus("mquake")


def test_hotpotqa_original_and_hub_layouts(tmp_path: Path) -> None:
    original = [
        {
            "_id": "5a8b",
            "question": "Which city hosts the club founded by Ann?",
            "answer": "Lyon",
            "type": "bridge",
            "level": "hard",
            "supporting_facts": [["Ann", 0], ["Club", 1]],
            "context": [
                ["Ann", ["Ann founded the Club.", " She was born in 1900."]],
                ["Club", ["The Club plays football.", " It is based in Lyon."]],
                ["Other", ["Unrelated text."]],
            ],
        }
    ]
    corpus = load_dataset_corpus("hotpotqa", path=_json(tmp_path / "hotpot_dev.json", original))
    assert corpus.texts[0] == "Ann founded the Club. She was born in 1900."
    assert [d.metadata["title"] for d in corpus] == ["Ann", "Club", "Other"]
    (q,) = corpus.questions
    assert q.id == "5a8b" and q.hops == 2 and q.support_ids == tuple(corpus.ids[:2])
    hub = {
        "id": "5a8c",
        "question": original[0]["question"],
        "answer": "Lyon",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": {"title": ["Ann", "Club"], "sent_id": [0, 1]},
        "context": {
            "title": ["Ann", "Club"],
            "sentences": [["Ann founded the Club."], ["It is based in Lyon."]],
        },
    }
    corpus = load_dataset_corpus("hotpotqa", path=_jsonl(tmp_path / "hub.jsonl", [hub]))
    assert corpus.questions[0].support_ids == tuple(corpus.ids)


def test_enron_kaggle_csv_with_regex_pii(tmp_path: Path) -> None:
    message = (
        "Message-ID: <1.JavaMail.evans@thyme>\nFrom: phillip.allen@enron.com\n"
        "Subject: forecast\n\nCall me at (713) 853-7041 or see http://www.enron.com/docs."
    )
    path = _csv(tmp_path / "emails.csv", ["file", "message"], [["allen-p/1.", message]])
    corpus = load_dataset_corpus("enron", path=path)
    doc = corpus[0]
    assert doc.metadata["file"] == "allen-p/1."
    kinds = {s.kind: s.value for s in doc.pii}
    assert kinds == {
        "email": "phillip.allen@enron.com",
        "phone": "(713) 853-7041",
        "url": "http://www.enron.com/docs",
    }
    assert all(doc.text[s.start : s.end] == s.value for s in doc.pii)
    assert {s.kind for s in regex_pii("no personal data here")} == set()


def test_echr_jsonl_gz_with_facts(tmp_path: Path) -> None:
    rec = {
        "facts": ["5. The applicant was born in 1970.", "6. He was arrested on 2 May 2001."],
        "labels": ["3", "5"],
        "silver_rationales": [1],
        "gold_rationales": [],
    }
    path = tmp_path / "train.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(rec) + "\n")
    corpus = load_dataset_corpus("echr", path=path)
    assert corpus[0].text.splitlines()[1] == "6. He was arrested on 2 May 2001."
    assert corpus[0].metadata["labels"] == ["3", "5"]


def test_reddit_travel_csv(tmp_path: Path) -> None:
    path = _csv(
        tmp_path / "reddit_dot_scores_quality.csv",
        ["title", "selftext", "falcon_summary", "score"],
        [["Best time for Lisbon?", "Going in May, is it crowded?", "May is fine.", "12"]],
    )
    doc = load_dataset_corpus("reddit-travel", path=path)[0]
    assert doc.text == "Best time for Lisbon?\nGoing in May, is it crowded?\nMay is fine."
    assert doc.metadata["answer"] == "May is fine." and doc.metadata["score"] == "12"


def test_wrong_format_and_bad_paths_are_data_errors(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "x.jsonl", [{"foo": 1}])
    with pytest.raises(DataError, match=r"is this the HotpotQA dataset"):
        load_dataset_corpus("hotpotqa", path=path)
    with pytest.raises(DataError, match=r"does not exist"):
        load_dataset_corpus("enron", path=tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"holds no data files"):
        load_dataset_corpus("enron", path=tmp_path / "empty")
    empty = _jsonl(tmp_path / "e.jsonl", [{"text": ""}])
    with pytest.raises(DataError, match=r"holds no documents or questions"):
        load_dataset_corpus("enron", path=empty)
    with pytest.raises(ConfigError, match=r"'limit'"):
        load_dataset_corpus("enron", path=path, limit=0)


def test_register_custom_dataset(tmp_path: Path) -> None:
    def convert(record: Any, row: int, out: Any) -> None:
        out.document(record["body"])

    spec = DatasetSpec(name="custom-test", title="Custom", hub_id=None, convert=convert)
    register_dataset(spec)
    try:
        with pytest.raises(ConfigError, match=r"already registered"):
            register_dataset(spec)
        path = _jsonl(tmp_path / "c.jsonl", [{"body": "hello"}])
        assert load_dataset_corpus("custom-test", path=path).texts == ["hello"]
    finally:
        from ragprivacy.corpus import datasets as module

        module._SPECS.pop("custom-test", None)


@pytest.fixture
def empty_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point every Hugging Face cache at an empty folder for this test."""
    datasets = pytest.importorskip("datasets")
    import huggingface_hub.constants as hub_constants

    cache = tmp_path / "hf"
    cache.mkdir()
    for var in ("HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE"):
        monkeypatch.setenv(var, str(cache))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    return cache


def test_hub_dataset_missing_from_cache_is_unavailable(empty_hf_cache: Path) -> None:
    import datasets
    import huggingface_hub.constants as hub_constants

    def flags() -> tuple[object, ...]:  # datasets < 3 has only HF_DATASETS_OFFLINE
        config = datasets.config
        return tuple(getattr(config, a, None) for a in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))

    before = (*flags(), hub_constants.HF_HUB_OFFLINE)
    with pytest.raises(DataUnavailableError) as info:
        load_dataset_corpus("healthcaremagic", cache_dir=empty_hf_cache)
    message = str(info.value)
    assert "RafaelMPereira/HealthCareMagic-100k-Chat-Format-en" in message
    assert "not available offline" in message and "path=" in message
    # offline mode was forced for the call only
    assert before == (*flags(), hub_constants.HF_HUB_OFFLINE)
    assert "HF_HUB_OFFLINE" not in os.environ


def test_hub_path_reads_a_local_dataset_folder(empty_hf_cache: Path, tmp_path: Path) -> None:
    folder = tmp_path / "nq_local"
    _jsonl(folder / "validation.jsonl", [{"question": "who?", "answer": ["Ann"]}])
    corpus = load_dataset_corpus("nq", hub_id=str(folder), cache_dir=empty_hf_cache)
    assert corpus.questions[0].answers == ("Ann",)
    assert corpus.metadata["source"] == f"hf://{folder}"
