"""Documents: collections, readers/writers, dataset loaders and synthetic corpora.

* :class:`Corpus`, :class:`QAItem` — the collection and its QA ground truth;
* :func:`read_jsonl` / :func:`write_jsonl` (lossless, with a ``.questions.jsonl``
  sidecar), :func:`read_json`, :func:`read_csv` / :func:`write_csv`,
  :func:`load_corpus` (by extension), :func:`read_questions` / :func:`write_questions`;
* :func:`load_dataset_corpus` — the founding papers' public datasets from local files or
  the local Hugging Face cache (never downloaded);
* :func:`synthesize` — deterministic synthetic corpora ("medical", "email", "legal",
  "knowledge") with PII and QA ground truth, and :func:`background_texts` for a
  reader's background model.
"""

from __future__ import annotations

from ragprivacy.corpus._dataset_formats import regex_pii
from ragprivacy.corpus.collection import Corpus, QAItem
from ragprivacy.corpus.datasets import (
    DatasetSpec,
    dataset_names,
    dataset_spec,
    load_dataset_corpus,
    register_dataset,
)
from ragprivacy.corpus.io import (
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
from ragprivacy.corpus.synthetic import (
    background_texts,
    register_synthetic_kind,
    synthesis_estimate,
    synthesize,
    synthetic_kinds,
)

__all__ = [
    "Corpus",
    "DatasetSpec",
    "QAItem",
    "background_texts",
    "dataset_names",
    "dataset_spec",
    "load_corpus",
    "load_dataset_corpus",
    "questions_path",
    "read_csv",
    "read_json",
    "read_jsonl",
    "read_questions",
    "regex_pii",
    "register_dataset",
    "register_synthetic_kind",
    "synthesis_estimate",
    "synthesize",
    "synthetic_kinds",
    "write_csv",
    "write_jsonl",
    "write_questions",
]
