"""Saving indices to a directory and loading them back.

A saved index is a directory::

    manifest.json   format, format_version, backend, dim, count, config, files
    ids.json        the ids in position order (a JSON list of strings)
    vectors.npy     the stored vectors, float32 [count, dim]
    index.faiss     the FAISS index (FAISS backends only)

A ``pgvector`` index's data live in its PostgreSQL table; its directory is a snapshot
(ids, vectors, and the settings naming the table), and loading reopens the table.

``manifest.json`` is written last and lists the SHA-256 and size of every other file;
:func:`load_index` checks them, so a partial or tampered save is refused with a
:class:`~ragprivacy.errors.DataError` naming the file, never loaded silently.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy.errors import ConfigError, DataError
from ragprivacy.index.base import VectorIndex

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "SavedIndex",
    "file_sha256",
    "load_index",
    "save_index_dir",
]

FORMAT = "ragprivacy-index"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
IDS_FILE = "ids.json"
VECTORS_FILE = "vectors.npy"
FAISS_FILE = "index.faiss"

#: backend name -> (module, class); imported only when an index of that kind is loaded.
_BACKENDS: dict[str, tuple[str, str]] = {
    "exact": ("ragprivacy.index.exact", "ExactIndex"),
    "faiss-flat": ("ragprivacy.index.faiss_index", "FaissFlatIndex"),
    "faiss-hnsw": ("ragprivacy.index.faiss_index", "FaissHnswIndex"),
    "pgvector": ("ragprivacy.index.pgvector_index", "PgvectorIndex"),
}


@dataclass(frozen=True, slots=True)
class SavedIndex:
    """What :func:`load_index` read and checked, handed to a backend's ``_from_saved``."""

    directory: Path
    manifest: Mapping[str, Any]
    ids: list[str]
    vectors: np.ndarray

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.manifest.get("config") or {})

    def file(self, name: str) -> Path:
        return self.directory / name


def file_sha256(path: Path) -> str:
    """SHA-256 hex of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(2**20), b""):
            h.update(block)
    return h.hexdigest()


def save_index_dir(
    path: str | Path,
    *,
    backend: str,
    dim: int,
    ids: Sequence[str],
    vectors: np.ndarray,
    config: Mapping[str, Any],
    extra_files: Mapping[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Write an index directory (created if needed; our files in it are replaced).

    Args:
        path: the directory.
        backend: the registry name :func:`load_index` dispatches on.
        dim: vector width.
        ids: ids in position order.
        vectors: ``[len(ids), dim]`` float32.
        config: the backend's JSON-ready settings.
        extra_files: file name -> writer called with the file's path (e.g. the FAISS
            index).
    """
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise DataError(f"Cannot save an index to {str(directory)!r}: it is a file, not a folder.")
    directory.mkdir(parents=True, exist_ok=True)
    manifest_path = directory / MANIFEST
    manifest_path.unlink(missing_ok=True)  # a half-written save must not look complete

    vecs = np.ascontiguousarray(vectors, dtype=np.float32)
    if vecs.shape != (len(ids), dim):
        raise DataError(f"Cannot save {len(ids)} ids with vectors of shape {vecs.shape}.")
    (directory / IDS_FILE).write_text(json.dumps(list(ids)), encoding="utf-8")
    np.save(directory / VECTORS_FILE, vecs, allow_pickle=False)
    names = [IDS_FILE, VECTORS_FILE]
    for name, writer in (extra_files or {}).items():
        writer(directory / name)
        names.append(name)
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "backend": backend,
        "dim": int(dim),
        "count": len(ids),
        "config": dict(config),
        "files": {
            name: {
                "sha256": file_sha256(directory / name),
                "bytes": (directory / name).stat().st_size,
            }
            for name in names
        },
    }
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
    return directory


def _read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST
    if not directory.is_dir():
        raise DataError(f"No saved index at {str(directory)!r}: the folder does not exist.")
    if not path.is_file():
        raise DataError(
            f"No saved index at {str(directory)!r}: {MANIFEST} is missing (was the save "
            "interrupted?). Save the index again."
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"The index manifest {str(path)!r} is not valid JSON: {exc}.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"{str(path)!r} is not a ragprivacy index manifest.")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise DataError(
            f"The index at {str(directory)!r} has format version {version!r}; this "
            f"ragprivacy reads version {FORMAT_VERSION}. Rebuild the index."
        )
    for key, kind in (("backend", str), ("dim", int), ("count", int), ("files", dict)):
        if not isinstance(manifest.get(key), kind):
            raise DataError(f"The index manifest {str(path)!r} lacks a valid {key!r} entry.")
    return manifest


def _check_files(directory: Path, manifest: Mapping[str, Any], verify: bool) -> None:
    files = manifest["files"]
    for name in (IDS_FILE, VECTORS_FILE):
        if name not in files:
            raise DataError(f"The index manifest in {str(directory)!r} does not list {name}.")
    for name, meta in files.items():
        path = directory / name
        if not path.is_file():
            raise DataError(f"The saved index file {str(path)!r} is missing; save the index again.")
        if not isinstance(meta, dict):
            raise DataError(f"The index manifest entry for {name!r} is malformed.")
        if path.stat().st_size != meta.get("bytes"):
            raise DataError(
                f"The saved index file {str(path)!r} has {path.stat().st_size} bytes; the "
                f"manifest says {meta.get('bytes')}. It is corrupt; save the index again."
            )
        if verify and file_sha256(path) != meta.get("sha256"):
            raise DataError(
                f"The saved index file {str(path)!r} does not match its SHA-256 in the "
                "manifest; it is corrupt or was modified. Save the index again."
            )


def _read_ids(path: Path, count: int) -> list[str]:
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"The ids file {str(path)!r} is not valid JSON: {exc}.") from None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise DataError(f"The ids file {str(path)!r} must hold a JSON list of strings.")
    if len(ids) != count:
        raise DataError(f"The ids file {str(path)!r} holds {len(ids)} ids; expected {count}.")
    return ids


def _read_vectors(path: Path, count: int, dim: int) -> np.ndarray:
    try:
        vectors = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"The vectors file {str(path)!r} cannot be read: {exc}.") from None
    if vectors.dtype != np.float32 or vectors.shape != (count, dim):
        raise DataError(
            f"The vectors file {str(path)!r} holds {vectors.dtype} {vectors.shape}; "
            f"expected float32 ({count}, {dim})."
        )
    return np.ascontiguousarray(vectors)


def load_index(path: str | Path, *, verify: bool = True) -> VectorIndex:
    """Load an index written by a backend's ``save`` (dispatches on the manifest).

    Args:
        path: the index directory.
        verify: check every file's SHA-256 against the manifest (sizes are always
            checked).

    Raises:
        DataError: the folder, manifest or a file is missing, malformed or corrupt.
        BackendError: the backend's library (e.g. FAISS) is not installed.
    """
    directory = Path(path)
    manifest = _read_manifest(directory)
    backend = manifest["backend"]
    if backend not in _BACKENDS:
        raise DataError(
            f"The index at {str(directory)!r} was saved by backend {backend!r}, which this "
            f"ragprivacy cannot load; known: {', '.join(sorted(_BACKENDS))}."
        )
    _check_files(directory, manifest, verify)
    saved = SavedIndex(
        directory=directory,
        manifest=manifest,
        ids=_read_ids(directory / IDS_FILE, manifest["count"]),
        vectors=_read_vectors(directory / VECTORS_FILE, manifest["count"], manifest["dim"]),
    )
    module, cls_name = _BACKENDS[backend]
    cls = getattr(importlib.import_module(module), cls_name)
    try:
        index: VectorIndex = cls._from_saved(saved)
    except (TypeError, ConfigError) as exc:
        raise DataError(
            f"The index manifest in {str(directory)!r} holds settings the {backend!r} "
            f"backend refuses ({exc}); save the index again."
        ) from None
    return index
