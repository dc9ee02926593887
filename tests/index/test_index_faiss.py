"""FAISS backends against brute force: flat equals exact, HNSW recall, settings, errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from ragprivacy.errors import BackendError, ConfigError
from ragprivacy.index import ExactIndex, FaissFlatIndex, FaissHnswIndex, create_index


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _filled(index, vectors):
    index.add(vectors, [str(i) for i in range(len(vectors))])
    return index


def test_flat_equals_exact() -> None:
    rng = np.random.default_rng(11)
    vectors, queries = _unit(rng, 2000, 64), _unit(rng, 50, 64)
    exact = _filled(ExactIndex(64), vectors)
    flat = _filled(FaissFlatIndex(64), vectors)
    a, b = exact.search(queries, 10), flat.search(queries, 10)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-6)
    assert a.ids == b.ids


def test_hnsw_recall_at_10_against_exact() -> None:
    rng = np.random.default_rng(12)
    vectors, queries = _unit(rng, 3000, 32), _unit(rng, 200, 32)
    truth = _filled(ExactIndex(32), vectors).search(queries, 10).indices
    hnsw = _filled(FaissHnswIndex(32), vectors)
    found = hnsw.search(queries, 10).indices
    recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)])
    assert recall >= 0.95, recall


def test_hnsw_low_ef_search_loses_recall_and_setter_validates() -> None:
    # the recall check above can fail: a starved candidate list misses neighbours
    rng = np.random.default_rng(13)
    vectors, queries = _unit(rng, 4000, 64), _unit(rng, 100, 64)
    truth = _filled(ExactIndex(64), vectors).search(queries, 10).indices
    hnsw = _filled(FaissHnswIndex(64, m=4, ef_construction=8, ef_search=10), vectors)
    found = hnsw.search(queries, 10).indices
    recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)])
    assert recall < 0.95, recall
    hnsw.ef_search = 256
    assert hnsw.config()["ef_search"] == 256
    with pytest.raises(ConfigError, match="'ef_search'"):
        hnsw.ef_search = 0


def test_hnsw_scores_stay_exact() -> None:
    rng = np.random.default_rng(14)
    vectors, queries = _unit(rng, 300, 24), _unit(rng, 5, 24)
    hnsw = _filled(FaissHnswIndex(24, ef_search=4), vectors)
    np.testing.assert_allclose(hnsw.scores(queries), queries @ vectors.T, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("option", ["m", "ef_construction", "ef_search"])
def test_hnsw_settings_validated(option: str) -> None:
    with pytest.raises(ConfigError, match=f"'{option}'"):
        FaissHnswIndex(8, **{option: 0})


def test_hnsw_config_round_trips_through_registry() -> None:
    index = create_index("faiss-hnsw", dim=8, m=8, ef_construction=40, ef_search=20)
    assert index.config() == {"m": 8, "ef_construction": 40, "ef_search": 20, "num_threads": None}


@pytest.mark.parametrize("backend", ["faiss-flat", "faiss-hnsw"])
def test_missing_faiss_is_backend_error(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "faiss", None)  # makes `import faiss` fail
    with pytest.raises(BackendError, match=r"ragprivacy\[faiss\]"):
        create_index(backend, dim=4)
