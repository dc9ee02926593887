"""Plain readers of dataset files as they are distributed: JSON, JSONL, CSV/TSV, Parquet.

They yield raw records (dicts) for the dataset converters; nothing here knows what a
record means. ``.gz`` versions of the text formats are read transparently.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from ragprivacy.errors import DataError

__all__ = ["SUPPORTED_SUFFIXES", "data_files", "large_csv_fields", "read_records"]

SUPPORTED_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet")
# keys under which JSON datasets keep their list of records
_LIST_KEYS = ("data", "Data", "rows", "records", "documents", "examples")


def _suffix(p: Path) -> str:
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def data_files(path: str | os.PathLike[str], split: str | None = None) -> list[Path]:
    """The data files at ``path``: the file itself, or the supported files in a folder
    (recursively, sorted), keeping only names that contain ``split`` when it is given."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"Dataset path {str(p)!r} does not exist; check the path.")
    if p.is_file():
        if _suffix(p) not in SUPPORTED_SUFFIXES:
            raise DataError(
                f"Cannot read {str(p)!r}: unsupported file type; use one of "
                f"{', '.join(SUPPORTED_SUFFIXES)} (optionally .gz)."
            )
        return [p]
    files = sorted(f for f in p.rglob("*") if f.is_file() and _suffix(f) in SUPPORTED_SUFFIXES)
    if not files:
        raise DataError(
            f"Folder {str(p)!r} holds no data files ({', '.join(SUPPORTED_SUFFIXES)}); give "
            "the folder of the dataset's files or one file."
        )
    if split is not None:
        chosen = [f for f in files if split.lower() in f.name.lower()]
        if not chosen:
            names = ", ".join(f.name for f in files[:10])
            raise DataError(
                f"No file in {str(p)!r} matches split {split!r} (files: {names}); name a file "
                "directly or pass a split that occurs in a file name."
            )
        files = chosen
    return files


def _open_text(p: Path) -> IO[str]:
    if p.suffix.lower() == ".gz":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8-sig", newline="")
    return p.open("r", encoding="utf-8-sig", newline="")


def _jsonl(p: Path) -> Iterator[dict[str, Any]]:
    with _open_text(p) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"Line {lineno} of {str(p)!r} is not valid JSON ({exc.msg}); fix or remove "
                    "that line."
                ) from None
            if not isinstance(obj, Mapping):
                raise DataError(f"Line {lineno} of {str(p)!r} is not a JSON object.")
            yield dict(obj)


def _json(p: Path) -> Iterator[dict[str, Any]]:
    with _open_text(p) as fh:
        raw = fh.read()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # JSON Lines under a .json name
            yield from _jsonl(p)
            return
        raise DataError(
            f"{str(p)!r} is not valid JSON ({exc.msg} at line {exc.lineno}); check the file."
        ) from None
    if isinstance(data, Mapping):
        lists = [data[k] for k in _LIST_KEYS if isinstance(data.get(k), list)]
        records = lists[0] if lists else [data]
    elif isinstance(data, list):
        records = data
    else:
        raise DataError(f"{str(p)!r} holds a JSON {type(data).__name__}, not records.")
    for k, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise DataError(f"Item {k} of {str(p)!r} is not a JSON object.")
        yield dict(rec)


@contextlib.contextmanager
def large_csv_fields() -> Iterator[None]:
    old = csv.field_size_limit()
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            break
        except OverflowError:  # pragma: no cover - 32-bit C long
            limit //= 2
    try:
        yield
    finally:
        csv.field_size_limit(old)


def _delimited(p: Path, delimiter: str) -> Iterator[dict[str, Any]]:
    with large_csv_fields(), _open_text(p) as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"{str(p)!r} is not valid CSV: {exc}.") from None
        # MS MARCO's collection.tsv has no header: "pid<TAB>passage"
        if delimiter == "\t" and len(header) == 2 and header[0].strip().isdigit():
            yield {"id": header[0], "text": header[1]}
            header = ["id", "text"]
        try:
            for row in reader:
                if not row:
                    continue
                yield dict(zip(header, row))
        except csv.Error as exc:
            raise DataError(f"{str(p)!r} is not valid CSV: {exc}.") from None


def _parquet(p: Path) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow comes with datasets
        raise DataError(
            f"Reading {str(p)!r} needs pyarrow; install it (it comes with the 'hf' extra)."
        ) from None
    try:
        parquet = pq.ParquetFile(p)
        for batch in parquet.iter_batches(batch_size=4096):
            yield from batch.to_pylist()
    except (OSError, ValueError) as exc:
        raise DataError(f"{str(p)!r} is not a readable Parquet file: {exc}") from None


def read_records(
    path: str | os.PathLike[str], split: str | None = None
) -> Iterator[dict[str, Any]]:
    """Raw records from the dataset files at ``path`` (see :func:`data_files`)."""
    for f in data_files(path, split):
        suffix = _suffix(f)
        try:
            if suffix == ".jsonl":
                yield from _jsonl(f)
            elif suffix == ".json":
                yield from _json(f)
            elif suffix == ".csv":
                yield from _delimited(f, ",")
            elif suffix == ".tsv":
                yield from _delimited(f, "\t")
            else:
                yield from _parquet(f)
        except UnicodeDecodeError as exc:
            raise DataError(f"{str(f)!r} is not UTF-8 text ({exc.reason}).") from None
        except (gzip.BadGzipFile, EOFError) as exc:
            raise DataError(f"{str(f)!r} is not a valid gzip file: {exc}") from None
