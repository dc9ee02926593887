"""Documents: collections, readers/writers, dataset loaders and synthetic corpora.

* :class:`Corpus`, :class:`QAItem` — the collection and its QA ground truth;
* :func:`read_jsonl` / :func:`write_jsonl` (lossless, with a ``.questions.jsonl``
  sidecar), :func:`read_json`, :func:`read_csv` / :func:`write_csv`,
  :func:`load_corpus` (by extension), :func:`read_questions` / :func:`write_questions`;
* :func:`load_dataset_corpus` — the founding papers' public datasets from local files or
  the local Hugging Face cache (never downloaded);
* :func:`synthesize` — deterministic synthetic corpora ("medical", "email", "legal",
  "knowledge") with PII and QA ground truth, and :func:`background_texts` for a
  reader's background model;
* :mod:`~ragprivacy.corpus.pii` — PII detectors (``regex`` default, ``presidio``) that
  fill every loader's PII ground truth, and :func:`redact_corpus`, the PII-redaction
  defense.
"""

from __future__ import annotations

from ragprivacy.corpus.canary import Canary, make_canary
from ragprivacy.corpus.collection import Corpus, QAItem
from ragprivacy.corpus.datasets import (
    DatasetSpec,
    dataset_names,
    dataset_spec,
    load_dataset_corpus,
    register_dataset,
)
from ragprivacy.corpus.io import (
    content_id,
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
from ragprivacy.corpus.pii import (
    PIIDetector,
    PresidioPIIDetector,
    RegexPIIDetector,
    annotate_pii,
    create_pii_detector,
    mask_pii,
    merge_spans,
    pii_detector_names,
    redact_corpus,
    redact_document,
    redact_text,
    regex_pii,
    register_pii_detector,
    resolve_pii_detector,
)
from ragprivacy.corpus.synthetic import (
    background_texts,
    register_synthetic_kind,
    synthesis_estimate,
    synthesize,
    synthetic_kinds,
)

__all__ = [
    "Canary",
    "Corpus",
    "DatasetSpec",
    "PIIDetector",
    "PresidioPIIDetector",
    "QAItem",
    "RegexPIIDetector",
    "annotate_pii",
    "background_texts",
    "content_id",
    "create_pii_detector",
    "dataset_names",
    "dataset_spec",
    "load_corpus",
    "load_dataset_corpus",
    "make_canary",
    "mask_pii",
    "merge_spans",
    "pii_detector_names",
    "questions_path",
    "read_csv",
    "read_json",
    "read_jsonl",
    "read_questions",
    "redact_corpus",
    "redact_document",
    "redact_text",
    "regex_pii",
    "register_dataset",
    "register_pii_detector",
    "register_synthetic_kind",
    "resolve_pii_detector",
    "synthesis_estimate",
    "synthesize",
    "synthetic_kinds",
    "write_csv",
    "write_jsonl",
    "write_questions",
]
