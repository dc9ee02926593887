"""Reading and writing corpora: JSONL (lossless), JSON and CSV, and QA items as JSONL.

Formats.

* **JSONL** — one document per line, ``Document.to_dict()``: ``{"id", "text",
  "metadata"?, "pii"?}``. Other top-level keys of a record are kept in its metadata.
  A corpus with questions is written with a sidecar ``<stem>.questions.jsonl`` next to
  it (``docs.jsonl`` → ``docs.questions.jsonl``), one ``QAItem.to_dict()`` per line,
  which ``read_jsonl`` picks up. This is the lossless format.
* **JSON** — an array of document records, or an object ``{"documents": [...],
  "questions": [...]?, "name"?, "metadata"?}``; a ``.json`` file that is really JSON
  Lines is read as such.
* **CSV** — a header row, an id column and a text column (names configurable); every
  other column becomes a metadata string. PII spans are not stored; questions use the
  same sidecar as JSONL.

Documents without an id get ``"doc-<row>"``, where ``row`` is the 1-based line of a
JSONL file or the 1-based data row of a CSV file (the header is row 0). Errors are
:class:`~ragprivacy.errors.DataError` naming the file and, where it applies, the line.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from ragprivacy.corpus._rawfiles import large_csv_fields
from ragprivacy.corpus.collection import Corpus, QAItem
from ragprivacy.corpus.pii import PIIDetector, annotate_pii
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.types import Document, PIISpan

__all__ = [
    "content_id",
    "load_corpus",
    "questions_path",
    "read_csv",
    "read_json",
    "read_jsonl",
    "read_questions",
    "write_csv",
    "write_jsonl",
    "write_questions",
]

PathLike = str | os.PathLike[str]
_DOC_KEYS = {"id", "text", "metadata", "pii"}


def questions_path(path: PathLike) -> Path:
    """The sidecar file of a corpus file's questions (``docs.jsonl`` → ``docs.questions.jsonl``).

    >>> questions_path("out/docs.jsonl").as_posix()
    'out/docs.questions.jsonl'
    """
    p = Path(path)
    stem = p.stem if p.suffix.lower() in {".jsonl", ".json", ".csv"} else p.name
    return p.with_name(f"{stem}.questions.jsonl")


def _existing_file(path: PathLike, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise DataError(f"{what} file {str(p)!r} does not exist; check the path.")
    if not p.is_file():
        raise DataError(f"{what} path {str(p)!r} is not a file; give the path of a file.")
    return p


@contextlib.contextmanager
def _atomic_writer(path: PathLike, *, newline: str | None = None) -> Iterator[Any]:
    """Write to a temporary file next to ``path`` and move it into place on success.

    A path that cannot be written (a directory, a path under a file, an unwritable place)
    is refused with one line before anything is written."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"The output {str(p)!r} is a directory; give a file path in it.")
    blocking = next((a for a in p.parents if a.exists() and not a.is_dir()), None)
    if blocking is not None:
        raise ConfigError(f"Cannot write {str(p)!r}: {str(blocking)!r} is a file, not a directory.")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise ConfigError(
            f"Cannot write {str(p)!r}: {exc.strerror or type(exc).__name__}; choose a "
            "writable path."
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as fh:
            yield fh
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _json_lines(p: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed object)`` for each non-blank line of a JSONL file."""
    try:
        with p.open("r", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(
                        f"Line {lineno} of {str(p)!r} is not valid JSON ({exc.msg} at column "
                        f"{exc.colno}); fix or remove that line."
                    ) from None
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{str(p)!r} is not UTF-8 text ({exc.reason}); re-encode it as UTF-8."
        ) from None


#: how a reader names a record that has no id: by its row (``doc-<row>``: reproducible
#: within one file) or by its text (``doc-<16 hex digits of SHA-256>``: the same document
#: gets the same id in any file, so files added one after another never collide)
MissingIds = Literal["position", "content"]


def content_id(text: str) -> str:
    """The id a document without one gets from its text (``ids="content"``)."""
    return "doc-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _document(record: Any, row: int, where: str, ids: MissingIds = "position") -> Document:
    """A ``Document`` from one record; ``where`` says "line 3 of 'x.jsonl'"."""
    if not isinstance(record, Mapping):
        raise DataError(
            f"The record at {where} is a JSON {type(record).__name__}, not an object; each "
            "document must be an object with a 'text' field."
        )
    if "text" not in record:
        raise DataError(
            f"The record at {where} has no 'text' field (fields: {', '.join(map(str, record))}); "
            "every document needs its text."
        )
    text = record["text"]
    if not isinstance(text, str):
        raise DataError(f"The 'text' field at {where} must be a string; got {type(text).__name__}.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: valid JSON, not Unicode text
        raise DataError(
            f"The text at {where} holds a lone surrogate (an unpaired \\uD800-\\uDFFF escape), "
            "which is not Unicode text; fix that record."
        ) from None
    raw_id = record.get("id")
    if raw_id is None or (isinstance(raw_id, str) and not raw_id.strip()):
        doc_id = content_id(text) if ids == "content" else f"doc-{row}"
    elif isinstance(raw_id, (str, int)) and not isinstance(raw_id, bool):
        doc_id = str(raw_id)
    else:
        raise DataError(f"The 'id' at {where} must be a string or integer; got {raw_id!r}.")
    metadata = record.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise DataError(
            f"The 'metadata' at {where} must be an object; got {type(metadata).__name__}."
        )
    extras = {k: v for k, v in record.items() if k not in _DOC_KEYS}
    metadata = {**extras, **metadata} if extras else dict(metadata)
    try:
        pii = tuple(PIISpan.from_dict(s) for s in record.get("pii") or ())
        return Document(id=doc_id, text=text, metadata=metadata, pii=pii)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"The record at {where} is not a valid document: {exc}") from None


def _collect(docs: Iterable[tuple[Document, str]], p: Path) -> list[Document]:
    out: list[Document] = []
    first_seen: dict[str, str] = {}
    for doc, where in docs:
        if doc.id in first_seen:
            raise DataError(
                f"Duplicate document id {doc.id!r} at {where} (first seen at "
                f"{first_seen[doc.id]}); document ids must be unique."
            )
        first_seen[doc.id] = where
        out.append(doc)
    if not out:
        raise DataError(f"{str(p)!r} holds no documents; give a file with at least one document.")
    return out


def _with_questions(
    docs: list[Document],
    p: Path,
    name: str | None,
    *,
    questions: list[QAItem] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Corpus:
    """The corpus of ``docs`` with ``questions`` (default: the sidecar file, if any)."""
    source = str(p)
    if questions is None:
        qpath = questions_path(p)
        questions = read_questions(qpath) if qpath.is_file() else []
        source = str(qpath)
    known = {d.id for d in docs}
    for q in questions:
        missing = [s for s in q.support_ids if s not in known]
        if missing:
            raise DataError(
                f"Question {q.id!r} in {source!r} refers to document {missing[0]!r}, which "
                f"is not in {str(p)!r}; regenerate or delete the questions."
            )
    return Corpus(
        docs,
        name=name or p.stem,
        questions=questions,
        metadata={"source": str(p), **(metadata or {})},
    )


def read_jsonl(path: PathLike, *, name: str | None = None, ids: MissingIds = "position") -> Corpus:
    """Read a JSONL corpus (and its ``.questions.jsonl`` sidecar when present).
    ``ids``: how a record without an id is named (:data:`MissingIds`).

    Raises:
        DataError: missing file, invalid JSON (with the line number), a record without
            ``text``, duplicate ids, or a file with no documents.
    """
    p = _existing_file(path, "Corpus")
    where = f"line {{}} of {str(p)!r}"
    docs = (
        (_document(rec, lineno, where.format(lineno), ids), where.format(lineno))
        for lineno, rec in _json_lines(p)
    )
    return _with_questions(_collect(docs, p), p, name)


def read_json(path: PathLike, *, name: str | None = None, ids: MissingIds = "position") -> Corpus:
    """Read a JSON corpus: an array of document records or ``{"documents": [...], ...}``;
    ``ids`` as for :func:`read_jsonl`."""
    p = _existing_file(path, "Corpus")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # JSON Lines saved as .json
            return read_jsonl(p, name=name, ids=ids)
        raise DataError(
            f"{str(p)!r} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})."
        ) from None
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{str(p)!r} is not UTF-8 text ({exc.reason}); re-encode it as UTF-8."
        ) from None
    questions: list[QAItem] | None = None
    metadata: dict[str, Any] = {}
    if isinstance(data, Mapping):
        if "documents" not in data:
            raise DataError(
                f"{str(p)!r} holds a JSON object without a 'documents' list; give an array of "
                'documents or an object {"documents": [...]}.'
            )
        name = name or data.get("name")
        metadata = dict(data.get("metadata") or {})
        if data.get("questions") is not None:
            questions = [
                _question(q, k + 1, f"questions[{k}] of {str(p)!r}")
                for k, q in enumerate(data["questions"])
            ]
        records = data["documents"]
    else:
        records = data
    if not isinstance(records, list):
        raise DataError(
            f"{str(p)!r} must hold a JSON array of documents; got {type(records).__name__}."
        )
    docs = (
        (_document(rec, k + 1, f"item {k} of {str(p)!r}", ids), f"item {k} of {str(p)!r}")
        for k, rec in enumerate(records)
    )
    return _with_questions(_collect(docs, p), p, name, questions=questions, metadata=metadata)


def write_jsonl(corpus: Corpus, path: PathLike) -> Path:
    """Write ``corpus`` as JSONL (UTF-8), plus its questions sidecar if it has questions.

    The write is atomic (a temporary file is moved into place). A stale sidecar from an
    earlier write is removed when the corpus has no questions. Returns ``path``.
    """
    p = Path(path)
    with _atomic_writer(p) as fh:
        for doc in corpus:
            fh.write(json.dumps(doc.to_dict(), ensure_ascii=False) + "\n")
    _write_sidecar(corpus, p)
    return p


def _write_sidecar(corpus: Corpus, p: Path) -> None:
    qpath = questions_path(p)
    if corpus.questions:
        write_questions(corpus.questions, qpath)
    elif qpath.is_file():
        qpath.unlink()


def _question(record: Any, row: int, where: str) -> QAItem:
    if not isinstance(record, Mapping):
        raise DataError(
            f"The question at {where} must be a JSON object; got {type(record).__name__}."
        )
    missing = [k for k in ("question", "answers") if k not in record]
    if missing:
        raise DataError(f"The question at {where} has no {missing[0]!r} field.")
    data = dict(record)
    if not data.get("id"):
        data["id"] = f"q-{row}"
    if isinstance(data["answers"], str):
        data["answers"] = [data["answers"]]
    try:
        return QAItem.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"The question at {where} is not valid: {exc}") from None


def read_questions(path: PathLike) -> list[QAItem]:
    """Read QA items from JSONL (``QAItem.to_dict()`` per line; ``answers`` may be a string).

    Raises:
        DataError: missing file, invalid JSON, a record without ``question`` or
            ``answers``, or duplicate question ids.
    """
    p = _existing_file(path, "Questions")
    out: list[QAItem] = []
    seen: dict[str, int] = {}
    for lineno, rec in _json_lines(p):
        item = _question(rec, lineno, f"line {lineno} of {str(p)!r}")
        if item.id in seen:
            raise DataError(
                f"Duplicate question id {item.id!r} at line {lineno} of {str(p)!r} (first at "
                f"line {seen[item.id]}); question ids must be unique."
            )
        seen[item.id] = lineno
        out.append(item)
    return out


def write_questions(questions: Iterable[QAItem], path: PathLike) -> Path:
    """Write QA items as JSONL (atomic). Returns ``path``."""
    p = Path(path)
    with _atomic_writer(p) as fh:
        for q in questions:
            fh.write(json.dumps(q.to_dict(), ensure_ascii=False) + "\n")
    return p


def read_csv(
    path: PathLike,
    *,
    id_column: str = "id",
    text_column: str = "text",
    name: str | None = None,
    ids: MissingIds = "position",
) -> Corpus:
    """Read a CSV corpus with a header row; columns other than id/text become metadata.

    A missing id column is allowed (ids become ``"doc-<row>"``, or with
    ``ids="content"`` come from the text: :data:`MissingIds`); a missing text column
    is an error that lists the columns found.
    """
    p = _existing_file(path, "Corpus")
    docs: list[tuple[Document, str]] = []
    try:
        with large_csv_fields(), p.open("r", encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh, restval="")
            columns = reader.fieldnames or []
            if not columns:
                raise DataError(f"{str(p)!r} holds no documents; the CSV file is empty.")
            if text_column not in columns:
                raise DataError(
                    f"{str(p)!r} has no {text_column!r} column (columns: {', '.join(columns)}); "
                    f"rename the column that holds the text to {text_column!r} (from Python, "
                    "read_csv(..., text_column=NAME) reads another)."
                )
            for row, rec in enumerate(reader, start=1):
                where = f"row {row} of {str(p)!r}"
                if None in rec:
                    raise DataError(f"{where.capitalize()} has more fields than the header.")
                metadata = {k: v for k, v in rec.items() if k not in (id_column, text_column)}
                record = {
                    "id": rec.get(id_column),
                    "text": rec[text_column] or "",
                    "metadata": metadata,
                }
                docs.append((_document(record, row, where, ids), where))
    except csv.Error as exc:
        raise DataError(f"{str(p)!r} is not valid CSV: {exc}.") from None
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{str(p)!r} is not UTF-8 text ({exc.reason}); re-encode it as UTF-8."
        ) from None
    return _with_questions(_collect(docs, p), p, name)


def write_csv(
    corpus: Corpus, path: PathLike, *, id_column: str = "id", text_column: str = "text"
) -> Path:
    """Write ``corpus`` as CSV: id, text and one column per metadata key.

    Metadata values that are not strings are written as JSON. PII spans are not written
    (use JSONL for a lossless copy); questions go to the same sidecar as JSONL.
    """
    p = Path(path)
    keys: dict[str, None] = {}
    for doc in corpus:
        for k in doc.metadata:
            if k not in (id_column, text_column):
                keys.setdefault(str(k), None)
    with _atomic_writer(p, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([id_column, text_column, *keys])
        for doc in corpus:
            values = [doc.metadata.get(k, "") for k in keys]
            writer.writerow(
                [
                    doc.id,
                    doc.text,
                    *(
                        v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                        for v in values
                    ),
                ]
            )
    _write_sidecar(corpus, p)
    return p


def load_corpus(
    path: PathLike, *, pii_detector: str | PIIDetector | None = None, **options: Any
) -> Corpus:
    """Read a corpus file, choosing the reader by extension (.jsonl, .json or .csv).

    ``options`` go to the reader (e.g. ``text_column=`` for CSV). ``pii_detector`` (a
    registered name such as ``"regex"``, or a detector) fills the PII spans of documents
    the file gives none (a CSV never does); spans the file gives are kept as they are.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    readers = {".jsonl": read_jsonl, ".json": read_json, ".csv": read_csv}
    if suffix not in readers:
        raise DataError(
            f"Cannot read {str(p)!r}: unsupported extension {suffix or '(none)'!r}; use a "
            ".jsonl, .json or .csv file."
        )
    corpus: Corpus = readers[suffix](p, **options)  # type: ignore[operator]
    if pii_detector is not None:
        corpus = annotate_pii(corpus, pii_detector, only_missing=True)
    return corpus
