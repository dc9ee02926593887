"""The contract every index backend meets (parametrised over the registered backends).

The ``pgvector`` backend runs against a real PostgreSQL server with pgvector, started once
per session (the ``postgres_url`` fixture)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ragprivacy.errors import ConfigError, DataError
from ragprivacy.index import (
    ExactIndex,
    FaissFlatIndex,
    FaissHnswIndex,
    PgvectorIndex,
    VectorIndex,
    create_index,
    index_names,
    load_index,
)

BACKENDS = ["exact", "faiss-flat", "faiss-hnsw", "pgvector"]
Make = Callable[..., VectorIndex]
DIM = 16


def _unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _ids(n: int, start: int = 0) -> list[str]:
    return [f"doc-{i}" for i in range(start, start + n)]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make(request: pytest.FixtureRequest) -> Make:
    """``make(backend, dim=..., **options)``: ``create_index`` with the server's URL for
    ``pgvector`` (the server starts only when a pgvector test runs)."""

    def build(backend: str, **options: Any) -> VectorIndex:
        if backend == "pgvector":
            options.setdefault("url", request.getfixturevalue("postgres_url"))
        return create_index(backend, **options)

    return build


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return _unit(rng, 300), _unit(rng, 12)


@pytest.fixture
def filled(backend: str, make: Make, data: tuple[np.ndarray, np.ndarray]) -> VectorIndex:
    index = make(backend, dim=DIM)
    index.add(data[0], _ids(len(data[0])))
    return index


def test_registry_holds_every_backend(make: Make) -> None:
    assert set(BACKENDS) <= set(index_names())
    assert isinstance(make("pgvector", dim=3, ef_search=16), PgvectorIndex)
    assert isinstance(create_index("exact", dim=3), ExactIndex)
    assert isinstance(create_index("faiss-flat", dim=3), FaissFlatIndex)
    assert isinstance(create_index("faiss-hnsw", dim=3, ef_search=16), FaissHnswIndex)


def test_is_exact_flags(make: Make) -> None:
    assert not make("pgvector", dim=2).is_exact
    assert create_index("exact", dim=2).is_exact
    assert create_index("faiss-flat", dim=2).is_exact
    assert not create_index("faiss-hnsw", dim=2).is_exact


def test_empty_index(backend: str, make: Make) -> None:
    index = make(backend, dim=DIM)
    q = _unit(np.random.default_rng(0), 3)
    assert len(index) == 0
    assert index.scores(q).shape == (3, 0)
    found = index.search(q, 4)
    assert found.indices.shape == (3, 4)
    assert (found.indices == -1).all()
    assert np.isneginf(found.scores).all()
    assert found.ids == ((), (), ())


def test_scores_are_exact_for_every_vector(filled: VectorIndex, data: tuple) -> None:
    vectors, queries = data
    got = filled.scores(queries)
    assert got.dtype == np.float32
    assert got.shape == (len(queries), len(vectors))
    np.testing.assert_allclose(got, queries @ vectors.T, rtol=1e-5, atol=1e-6)


def test_search_returns_sorted_true_scores(filled: VectorIndex, data: tuple) -> None:
    vectors, queries = data
    found = filled.search(queries, 10)
    assert found.indices.shape == found.scores.shape == (len(queries), 10)
    assert found.indices.dtype == np.int64
    assert found.scores.dtype == np.float32
    truth = queries @ vectors.T
    for row in range(len(queries)):
        pos = found.indices[row]
        assert len(set(pos.tolist())) == 10
        np.testing.assert_allclose(found.scores[row], truth[row, pos], rtol=1e-5, atol=1e-6)
        assert (np.diff(found.scores[row]) <= 0).all()
        assert found.ids[row] == tuple(f"doc-{p}" for p in pos)
    if filled.is_exact:
        best = np.sort(truth, axis=1)[:, ::-1][:, :10]
        np.testing.assert_allclose(found.scores, best, rtol=1e-5, atol=1e-6)


def test_k_larger_than_n_pads_with_minus_one(backend: str, make: Make, data: tuple) -> None:
    vectors, queries = data
    index = make(backend, dim=DIM)
    index.add(vectors[:5], _ids(5))
    found = index.search(queries[:2], 8)
    assert found.indices.shape == (2, 8)
    assert (found.indices[:, 5:] == -1).all()
    assert np.isneginf(found.scores[:, 5:]).all()
    assert sorted(found.indices[0, :5].tolist()) == [0, 1, 2, 3, 4]
    assert all(len(row) == 5 for row in found.ids)


def test_one_dimensional_query_is_one_row(filled: VectorIndex, data: tuple) -> None:
    q = data[1][0]
    assert filled.scores(q).shape == (1, len(filled))
    assert filled.search(q, 3).indices.shape == (1, 3)


def test_add_appends_in_order(backend: str, make: Make, data: tuple) -> None:
    vectors, _ = data
    index = make(backend, dim=DIM)
    index.add(vectors[:100], _ids(100))
    index.add(vectors[100:250], _ids(150, start=100))
    index.add(np.empty((0, DIM), np.float32), [])
    assert len(index) == 250
    assert index.ids == _ids(250)
    assert index.id_at(120) == "doc-120"
    found = index.search(vectors[[3, 200]], 1)
    assert found.indices[:, 0].tolist() == [3, 200]
    np.testing.assert_allclose(
        index.scores(vectors[200])[0], vectors[:250] @ vectors[200], atol=1e-6
    )


def test_vectors_accessor(filled: VectorIndex, data: tuple) -> None:
    got = filled.vectors()
    np.testing.assert_array_equal(got, data[0])
    assert not got.flags.writeable  # a view of the index's own storage: read-only


@pytest.mark.parametrize("dim", [0, -3, 2.5, "8"])
def test_bad_dim_is_config_error(backend: str, make: Make, dim: object) -> None:
    with pytest.raises(ConfigError, match="'dim'"):
        make(backend, dim=dim)  # type: ignore[arg-type]


def test_wrong_width_is_config_error(filled: VectorIndex) -> None:
    with pytest.raises(ConfigError, match=r"shape \[n, 16\]"):
        filled.add(np.ones((2, 8), np.float32), ["a", "b"])
    with pytest.raises(ConfigError, match=r"shape \[n, 16\]"):
        filled.search(np.ones((1, 8), np.float32), 3)
    with pytest.raises(ConfigError, match=r"shape \[n, 16\]"):
        filled.scores(np.ones((1, 2, DIM), np.float32))


@pytest.mark.parametrize("k", [0, -1, 1.5])
def test_bad_k_is_config_error(filled: VectorIndex, data: tuple, k: object) -> None:
    with pytest.raises(ConfigError, match="'k'"):
        filled.search(data[1], k)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_values_are_data_errors(filled: VectorIndex, bad: float) -> None:
    v = np.ones((3, DIM), np.float32)
    v[1, 4] = bad
    with pytest.raises(DataError, match="row 1"):
        filled.add(v, ["x", "y", "z"])
    with pytest.raises(DataError, match="NaN or infinite"):
        filled.search(v, 2)
    with pytest.raises(DataError, match="NaN or infinite"):
        filled.scores(v)
    assert len(filled) == 300  # nothing was added


def test_id_mismatches_are_data_errors(filled: VectorIndex) -> None:
    v = np.ones((2, DIM), np.float32)
    with pytest.raises(DataError, match="2 vectors but 3 ids"):
        filled.add(v, ["a", "b", "c"])
    with pytest.raises(DataError, match="single string"):
        filled.add(v[:1], "a")
    with pytest.raises(DataError, match="duplicates"):
        filled.add(v, ["a", "a"])
    with pytest.raises(DataError, match="already holds id 'doc-3'"):
        filled.add(v, ["new", "doc-3"])
    with pytest.raises(DataError, match="must be a string"):
        filled.add(v, ["a", 7])  # type: ignore[list-item]
    assert len(filled) == 300


def test_persistence_round_trip(filled: VectorIndex, data: tuple, tmp_path) -> None:
    filled.save(tmp_path / "idx")
    loaded = load_index(tmp_path / "idx")
    assert type(loaded) is type(filled)
    assert loaded.ids == filled.ids
    assert loaded.dim == filled.dim
    assert loaded.config() == filled.config()
    queries = data[1]
    np.testing.assert_array_equal(loaded.scores(queries), filled.scores(queries))
    a, b = loaded.search(queries, 7), filled.search(queries, 7)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.scores, b.scores)
    # a loaded index keeps working: add and search again
    loaded.add(np.ones((1, DIM), np.float32) / 4, ["extra"])
    assert loaded.search(np.ones(DIM, np.float32) / 4, 1).ids == (("extra",),)


def test_exact_ties_break_by_lower_position() -> None:
    index = ExactIndex(2)
    v = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0], [0.5, 0.5], [1.0, 0.0], [1.0, 0.0]])
    index.add(v, list("abcdef"))
    found = index.search(np.array([1.0, 0.0]), 3)
    assert found.indices[0].tolist() == [1, 2, 4]  # tied at the cut-off: lowest positions
    found = index.search(np.array([[1.0, 0.0], [0.0, 1.0]]), 6)
    assert found.indices[0].tolist() == [1, 2, 4, 5, 3, 0]
    assert found.indices[1].tolist() == [0, 3, 1, 2, 4, 5]


def test_exact_search_chunks_queries_identically() -> None:
    rng = np.random.default_rng(3)
    vectors, queries = _unit(rng, 500), _unit(rng, 37)
    small = ExactIndex(DIM, chunk_bytes=4 * 500 * 5)  # 5 queries per chunk
    big = ExactIndex(DIM)
    for index in (small, big):
        index.add(vectors, _ids(500))
    a, b = small.search(queries, 9), big.search(queries, 9)
    np.testing.assert_array_equal(a.indices, b.indices)
    # The same ranking; the scores agree to float32 rounding, not bit for bit: BLAS picks
    # its kernel by the shape of the product, and a 5-row block may sum in another order
    # than a 37-row one (seen on a 2-core machine: 1 ulp apart).
    np.testing.assert_allclose(a.scores, b.scores, rtol=0, atol=4 * np.finfo(np.float32).eps)


def test_thread_setting_is_validated_and_used(backend: str, make: Make, data: tuple) -> None:
    with pytest.raises(ConfigError, match="'num_threads'"):
        make(backend, dim=DIM, num_threads=0)
    index = make(backend, dim=DIM, num_threads=1)
    index.add(data[0], _ids(len(data[0])))
    assert index.config()["num_threads"] == 1
    assert index.search(data[1], 2).indices.shape == (12, 2)


def test_scores_at_are_the_exact_scores_of_those_positions(
    filled: VectorIndex, data: tuple
) -> None:
    vectors, queries = data
    pos = np.array([299, 0, 17, 17, 150])
    got = filled.scores_at(queries[3], pos)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, vectors[pos] @ queries[3], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(filled.scores_at(queries[3][None, :], pos[:0]), [])
    with pytest.raises(ConfigError, match="one query"):
        filled.scores_at(queries[:2], pos)
    with pytest.raises(ConfigError, match=r"\[0, 300\)"):
        filled.scores_at(queries[0], [3, 300])
