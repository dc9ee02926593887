"""Saved index directories: layout, integrity checks, and errors that name the path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragprivacy.errors import DataError
from ragprivacy.index import ExactIndex, create_index, load_index


def _saved(tmp_path: Path, backend: str = "exact") -> Path:
    rng = np.random.default_rng(5)
    index = create_index(backend, dim=6)
    index.add(rng.standard_normal((20, 6)).astype(np.float32), [f"d{i}" for i in range(20)])
    path = tmp_path / backend
    index.save(path)
    return path


@pytest.mark.parametrize(
    ("backend", "files"),
    [
        ("exact", {"manifest.json", "ids.json", "vectors.npy"}),
        ("faiss-flat", {"manifest.json", "ids.json", "vectors.npy", "index.faiss"}),
        ("faiss-hnsw", {"manifest.json", "ids.json", "vectors.npy", "index.faiss"}),
    ],
)
def test_layout_and_manifest(tmp_path: Path, backend: str, files: set[str]) -> None:
    path = _saved(tmp_path, backend)
    assert {p.name for p in path.iterdir()} == files
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["format"] == "ragprivacy-index"
    assert manifest["format_version"] == 1
    assert manifest["backend"] == backend
    assert (manifest["dim"], manifest["count"]) == (6, 20)
    assert set(manifest["files"]) == files - {"manifest.json"}
    assert json.loads((path / "ids.json").read_text())[:2] == ["d0", "d1"]
    assert np.load(path / "vectors.npy").shape == (20, 6)


def test_missing_folder_and_manifest(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_index(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"manifest\.json is missing"):
        load_index(tmp_path / "empty")


def test_corrupt_manifest(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON") as err:
        load_index(path)
    assert str(path) in str(err.value)


def test_unknown_backend_and_version(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "backend": "annoy"}))
    with pytest.raises(DataError, match="'annoy'"):
        load_index(path)
    (path / "manifest.json").write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(DataError, match="format version 99"):
        load_index(path)


@pytest.mark.parametrize("name", ["vectors.npy", "ids.json", "index.faiss"])
def test_tampered_file_is_refused(tmp_path: Path, name: str) -> None:
    path = _saved(tmp_path, "faiss-flat")
    target = path / name
    raw = bytearray(target.read_bytes())
    raw[-1] ^= 0x01  # same size, different bytes
    target.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="SHA-256") as err:
        load_index(path)
    assert str(target) in str(err.value)


def test_truncated_or_missing_file_is_refused(tmp_path: Path) -> None:
    path = _saved(tmp_path, "faiss-hnsw")
    (path / "vectors.npy").write_bytes((path / "vectors.npy").read_bytes()[:-8])
    with pytest.raises(DataError, match="bytes"):
        load_index(path)
    (path / "index.faiss").unlink()
    with pytest.raises(DataError, match="missing"):
        load_index(path)


def test_save_refuses_a_file_path(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(DataError, match="is a file"):
        ExactIndex(2).save(target)


def test_save_overwrites_an_earlier_save(tmp_path: Path) -> None:
    index = ExactIndex(2)
    index.add(np.eye(2), ["a", "b"])
    index.save(tmp_path / "i")
    index.add(np.ones((1, 2)), ["c"])
    index.save(tmp_path / "i")
    assert load_index(tmp_path / "i").ids == ["a", "b", "c"]


def test_empty_index_round_trip(tmp_path: Path) -> None:
    for backend in ("exact", "faiss-flat", "faiss-hnsw"):
        create_index(backend, dim=3).save(tmp_path / backend)
        loaded = load_index(tmp_path / backend)
        assert len(loaded) == 0 and loaded.dim == 3


def test_bad_settings_in_manifest_are_data_errors(tmp_path: Path) -> None:
    path = _saved(tmp_path, "faiss-hnsw")
    manifest = json.loads((path / "manifest.json").read_text())
    for config in ({"m": 0}, {"unknown": 1}):
        bad = {**manifest, "config": {**manifest["config"], **config}}
        (path / "manifest.json").write_text(json.dumps(bad))
        with pytest.raises(DataError, match="refuses"):
            load_index(path)
