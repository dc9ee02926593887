"""Loaders for the public datasets of the founding papers, offline by default.

``load_dataset_corpus(name)`` turns a dataset into a :class:`~ragprivacy.corpus.Corpus`
(documents, and QA items where the dataset has questions) using one
:class:`DatasetSpec` per dataset: its usual Hugging Face Hub id, configuration and
split, and a converter that maps a record to documents and questions (see
:mod:`ragprivacy.corpus._dataset_formats` for the fields each one reads).

Two sources:

* ``path=`` — local files in the dataset's own format (JSON, JSONL, CSV/TSV or Parquet,
  a file or a folder; with ``split`` a folder's files are filtered by name). Read with
  plain readers; ``datasets`` is not imported.
* no path — ``datasets.load_dataset(hub_id, config, split=...)`` with offline mode
  forced for the call (``HF_HUB_OFFLINE=1``, ``HF_DATASETS_OFFLINE=1``), so only the
  local Hugging Face cache is read. Anything that fails becomes
  :class:`~ragprivacy.errors.DataUnavailableError` saying how to pass a local path.

>>> sorted(dataset_names())[:3]
['chatdoctor', 'echr', 'enron']
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragprivacy._validation import check_positive_int
from ragprivacy.corpus._dataset_formats import (
    CorpusBuilder,
    convert_chatdoctor,
    convert_echr,
    convert_enron,
    convert_healthcaremagic,
    convert_hotpotqa,
    convert_mquake,
    convert_msmarco,
    convert_nq_open,
    convert_nq_simplified,
    convert_reddit_travel,
    convert_triviaqa,
)
from ragprivacy.corpus._rawfiles import read_records
from ragprivacy.corpus.collection import Corpus
from ragprivacy.corpus.pii import PIIDetector, resolve_pii_detector
from ragprivacy.errors import ConfigError, DataError, DataUnavailableError, UnknownBackendError

__all__ = [
    "DatasetSpec",
    "dataset_names",
    "dataset_spec",
    "load_dataset_corpus",
    "register_dataset",
]

Converter = Callable[[Mapping[str, Any], int, CorpusBuilder], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class DatasetSpec:
    """How to load one public dataset.

    Attributes:
        name: registry name ("healthcaremagic").
        title: human-readable name.
        hub_id: the usual Hugging Face Hub id, or None when the dataset is distributed
            elsewhere (then only ``path=`` works).
        config: the Hub configuration, if any.
        split: the default split.
        convert: maps one record to documents/questions (``convert(record, row, out)``).
        content: what the corpus holds: "documents", "questions" or "documents+questions".
        used_by: which paper uses it and how.
        source: where to get the files when the Hub copy is not at hand.
    """

    name: str
    title: str
    hub_id: str | None
    config: str | None = None
    split: str = "train"
    convert: Converter
    content: str = "documents"
    used_by: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if not self.name or ":" in self.name:
            raise ConfigError(f"A dataset name must be non-empty without ':'; got {self.name!r}.")
        if self.content not in ("documents", "questions", "documents+questions"):
            raise ConfigError(
                "The 'content' parameter must be one of 'documents', 'questions', "
                f"'documents+questions'; got {self.content!r}."
            )


_SPECS: dict[str, DatasetSpec] = {}


def register_dataset(spec: DatasetSpec, *, replace: bool = False) -> None:
    """Register a dataset loader under ``spec.name``."""
    if spec.name in _SPECS and not replace:
        raise ConfigError(
            f"A dataset named {spec.name!r} is already registered; pass replace=True to "
            "overwrite it."
        )
    _SPECS[spec.name] = spec


def dataset_names() -> list[str]:
    """The registered dataset names, sorted."""
    return sorted(_SPECS)


def dataset_spec(name: str) -> DatasetSpec:
    """The spec registered as ``name``.

    Raises:
        UnknownBackendError: no dataset of that name (the message lists the choices).
    """
    try:
        return _SPECS[name]
    except (KeyError, TypeError):
        raise UnknownBackendError(
            f"Unknown dataset {name!r}; choose one of: {', '.join(dataset_names())}."
        ) from None


@contextlib.contextmanager
def _offline_hub() -> Iterator[None]:
    """Force Hugging Face offline mode for the duration of a call, then restore it.

    The environment variables are read when ``datasets``/``huggingface_hub`` are
    imported, so the module-level flags they set are patched as well.
    """
    saved_env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    patched: list[tuple[Any, str, Any]] = []
    bars_were_enabled = False
    try:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
        with contextlib.suppress(ImportError):
            import huggingface_hub.constants as hub_constants

            patched.append((hub_constants, "HF_HUB_OFFLINE", hub_constants.HF_HUB_OFFLINE))
            hub_constants.HF_HUB_OFFLINE = True
        with contextlib.suppress(ImportError):
            import datasets
            import datasets.config as ds_config

            for attr in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
                if hasattr(ds_config, attr):
                    patched.append((ds_config, attr, getattr(ds_config, attr)))
                    setattr(ds_config, attr, True)
            bars_were_enabled = not datasets.utils.are_progress_bars_disabled()
            datasets.utils.disable_progress_bars()
        yield
    finally:
        if bars_were_enabled:
            import datasets

            datasets.utils.enable_progress_bars()
        for module, attr, value in reversed(patched):
            setattr(module, attr, value)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _unavailable(spec: DatasetSpec, hub_id: str | None, why: str) -> DataUnavailableError:
    where = f" ({hub_id})" if hub_id else ""
    get = f" Get it from {spec.source}." if spec.source else ""
    return DataUnavailableError(
        f"Dataset {spec.name!r}{where} is not available offline: {why}. Nothing is downloaded "
        f"at run time.{get} Read its own files (JSON, JSONL, CSV or Parquet; a file or a "
        f"folder) instead: 'ragprivacy corpus load --dataset {spec.name} --path "
        f"data/{spec.name}/', a config corpus {{dataset: {spec.name}, path: data/{spec.name}/}}"
        f", or load_dataset_corpus({spec.name!r}, path='data/{spec.name}/'); or put a copy "
        "in the local Hugging Face cache."
    )


def _hub_records(
    spec: DatasetSpec,
    *,
    hub_id: str | None,
    config: str | None,
    split: str,
    cache_dir: str | os.PathLike[str] | None,
) -> Iterable[Mapping[str, Any]]:
    if hub_id is None:
        raise _unavailable(spec, None, "it has no Hugging Face Hub copy that ragprivacy knows")
    try:
        import datasets
    except ImportError:
        raise _unavailable(
            spec, hub_id, "the 'datasets' package is not installed (pip install 'ragprivacy[hf]')"
        ) from None
    with _offline_hub():
        try:
            kwargs: dict[str, Any] = {"split": split}
            if cache_dir is not None:
                kwargs["cache_dir"] = str(cache_dir)
            dataset = datasets.load_dataset(hub_id, config, **kwargs)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            raise _unavailable(spec, hub_id, f"the local cache has no copy ({reason})") from exc
    return dataset  # type: ignore[no-any-return]


def load_dataset_corpus(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    config: str | None = None,
    hub_id: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    pii_detector: str | PIIDetector | None = "regex",
) -> Corpus:
    """Load a public dataset as a corpus, from local files or the local HF cache.

    Args:
        name: one of :func:`dataset_names`.
        path: a file or folder of the dataset in its own format; None reads the Hub copy
            from the local Hugging Face cache (offline).
        split: the split (default: the spec's); with ``path`` pointing to a folder, only
            files whose names contain it are read.
        limit: read at most this many records (rows of the source, e.g. one MS MARCO
            query with its passages).
        config: the Hub configuration (default: the spec's).
        hub_id: another Hub id or local dataset folder for ``datasets.load_dataset``.
        cache_dir: the Hugging Face datasets cache to read.
        pii_detector: fills every document's PII ground truth (a registered name such as
            ``"regex"`` or ``"presidio"``, a detector, or None for none), the same for
            every dataset, so targeted extraction has items to count on each.

    Returns:
        A corpus named ``name`` whose metadata records the source; datasets of questions
        only (NQ-open) give a corpus with no documents and ``questions`` filled.

    Raises:
        UnknownBackendError: unknown ``name``.
        DataUnavailableError: no ``path`` and no usable local copy.
        DataError: the files are missing, malformed or hold no records.
    """
    spec = dataset_spec(name)
    detector = resolve_pii_detector(pii_detector)
    if limit is not None:
        limit = check_positive_int("limit", limit)
    if path is not None:
        records: Iterable[Mapping[str, Any]] = read_records(path, split)
        source = str(Path(path))
    else:
        hub = hub_id if hub_id is not None else spec.hub_id
        records = _hub_records(
            spec,
            hub_id=hub,
            config=config if config is not None else spec.config,
            split=split or spec.split,
            cache_dir=cache_dir,
        )
        source = f"hf://{hub}"
    out = CorpusBuilder(prefix=spec.name, pii_detector=detector)
    rows = 0
    for row, record in enumerate(records):
        if limit is not None and row >= limit:
            break
        spec.convert(record, row, out)
        rows += 1
    corpus = out.build(
        name=spec.name,
        metadata={
            "dataset": spec.name,
            "source": source,
            "split": split or (None if path is not None else spec.split),
            "records": rows,
            "pii_detector": detector.config() if detector is not None else None,
        },
    )
    if len(corpus) == 0 and not corpus.questions:
        raise DataError(
            f"Dataset {spec.name!r} from {source!r} holds no documents or questions "
            f"({rows} records read); check the path, split and format."
        )
    return corpus


for _spec in (
    DatasetSpec(
        name="healthcaremagic",
        title="HealthCareMagic-100k",
        hub_id="RafaelMPereira/HealthCareMagic-100k-Chat-Format-en",
        convert=convert_healthcaremagic,
        used_by="MBA Sec. 5.1, S-RAG Sec. 5.1: 112,165 patient-doctor conversations",
        source="https://huggingface.co/datasets/RafaelMPereira/HealthCareMagic-100k-Chat-Format-en",
    ),
    DatasetSpec(
        name="chatdoctor",
        title="ChatDoctor",
        hub_id="LinhDuong/chatdoctor-200k",
        convert=convert_chatdoctor,
        used_by="Private-RAG Sec. 4.1: ~200K QA pairs as the private store, 100 held-out "
        "patient questions",
        source="https://huggingface.co/datasets/LinhDuong/chatdoctor-200k",
    ),
    DatasetSpec(
        name="msmarco",
        title="MS MARCO",
        hub_id="microsoft/ms_marco",
        config="v1.1",
        split="validation",
        convert=convert_msmarco,
        content="documents+questions",
        used_by="MBA Sec. 5.1 (validation set, all retrieved passages); collusion paper "
        "Sec. 4 (10^6 passages)",
        source="https://huggingface.co/datasets/microsoft/ms_marco or msmarco.org",
    ),
    DatasetSpec(
        name="nq-simplified",
        title="NQ-simplified",
        hub_id="LLukas22/nq-simplified",
        convert=convert_nq_simplified,
        content="documents+questions",
        used_by="MBA Sec. 5.1; S-RAG Sec. 5.5 (shadow data)",
        source="https://huggingface.co/datasets/LLukas22/nq-simplified",
    ),
    DatasetSpec(
        name="nq",
        title="Natural Questions (open)",
        hub_id="google-research-datasets/nq_open",
        split="validation",
        convert=convert_nq_open,
        content="questions",
        used_by="Private-RAG Sec. 4.1: 100 sampled questions, match accuracy",
        source="https://huggingface.co/datasets/google-research-datasets/nq_open",
    ),
    DatasetSpec(
        name="triviaqa",
        title="TriviaQA",
        hub_id="mandarjoshi/trivia_qa",
        config="rc.nocontext",
        split="validation",
        convert=convert_triviaqa,
        content="documents+questions",
        used_by="Private-RAG Sec. 4.1: 100 sampled questions, match accuracy",
        source="https://huggingface.co/datasets/mandarjoshi/trivia_qa or the TriviaQA site",
    ),
    DatasetSpec(
        name="mquake",
        title="MQuAKE",
        hub_id=None,
        convert=convert_mquake,
        content="documents+questions",
        used_by="Private-RAG Sec. 4.1: 100 multi-hop cases (400 correlated questions)",
        source="the MQuAKE GitHub release (datasets/MQuAKE-CF-3k.json)",
    ),
    DatasetSpec(
        name="hotpotqa",
        title="HotpotQA",
        hub_id="hotpotqa/hotpot_qa",
        config="distractor",
        split="validation",
        convert=convert_hotpotqa,
        content="documents+questions",
        used_by="RP paper App. G.1: supporting-document retrieval and answer EM/F1",
        source="https://huggingface.co/datasets/hotpotqa/hotpot_qa or hotpotqa.github.io",
    ),
    DatasetSpec(
        name="enron",
        title="Enron e-mails",
        hub_id="LLM-PBE/enron-email",
        convert=convert_enron,
        used_by="RP paper Sec. 4.1: targeted extraction of e-mail addresses, URLs, phones",
        source="https://huggingface.co/datasets/LLM-PBE/enron-email or the CMU Enron release",
    ),
    DatasetSpec(
        name="echr",
        title="ECtHR cases",
        hub_id="AUEB-NLP/ecthr_cases",
        config="alleged-violation-prediction",
        convert=convert_echr,
        used_by="RP paper Sec. 4.1: extraction prompted with each case's first sentence",
        source="https://huggingface.co/datasets/AUEB-NLP/ecthr_cases (Chalkidis et al., 2021)",
    ),
    DatasetSpec(
        name="reddit-travel",
        title="Reddit travel QA",
        hub_id="soniawmeyer/reddit-travel-QA-finetuning",
        convert=convert_reddit_travel,
        used_by="S-RAG Sec. 5.1: ~10,500 travel posts with answers",
        source="https://huggingface.co/datasets/soniawmeyer/reddit-travel-QA-finetuning",
    ),
):
    register_dataset(_spec)
del _spec
