"""What the ``pgvector`` backend does beyond the index contract, against a real server."""

from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.errors import BackendError, ConfigError, DataError
from ragprivacy.index import PgvectorIndex, create_index, load_index

DIM = 8


def _unit(n: int, seed: int = 0, dim: int = DIM) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _ids(n: int) -> list[str]:
    return [f"doc-{i}" for i in range(n)]


def _with_password(url: str, password: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{password}@")


def test_spec_form_and_the_password_never_shows(postgres_url: str) -> None:
    secret = "s3cret-Pa55"
    index = create_index(f"pgvector:{_with_password(postgres_url, secret)}", dim=DIM, m=8)
    assert isinstance(index, PgvectorIndex)
    cfg = index.config()
    assert secret not in repr(cfg) and "dbname=postgres" in cfg["url"]
    assert cfg["m"] == 8 and cfg["metric"] == "ip" and cfg["table"].startswith("ragprivacy_index_")
    bad = _with_password(postgres_url, secret).replace("host=/", "host=/nonexistent/")
    with pytest.raises(BackendError, match="Cannot connect") as err:
        PgvectorIndex(bad, dim=DIM)
    assert secret not in str(err.value) and "\n" not in str(err.value).strip()
    index.drop()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"table": "Bad-Name"}, "'table'"),
        ({"metric": "l2"}, "'metric'"),
        ({"m": 1}, "m <= 100"),
        ({"m": 16, "ef_construction": 20}, "2\\*m <= ef_construction"),
        ({"ef_search": 1001}, "'ef_search'"),
        ({"dim": 2001}, "at most 2000 dimensions"),
        ({"maintenance_work_mem": "lots"}, "'maintenance_work_mem'"),
    ],
)
def test_bad_settings_are_config_errors(postgres_url: str, options: dict, match: str) -> None:
    kwargs = {"dim": DIM, **options}
    with pytest.raises(ConfigError, match=match):
        PgvectorIndex(postgres_url, **kwargs)


def test_an_existing_table_is_opened_and_a_second_writer_refused(postgres_url: str) -> None:
    x = _unit(50)
    first = PgvectorIndex(postgres_url, dim=DIM, table="tenant_acme")
    first.add(x[:40], _ids(40))
    second = PgvectorIndex(postgres_url, dim=DIM, table="tenant_acme")
    assert second.ids == _ids(40)
    np.testing.assert_array_equal(second.vectors(), x[:40])
    np.testing.assert_array_equal(second.search(x[:3], 5).indices, first.search(x[:3], 5).indices)
    second.add(x[40:45], [f"doc-{i}" for i in range(40, 45)])
    with pytest.raises(BackendError, match="another writer"):
        first.add(x[45:], [f"doc-{i}" for i in range(45, 50)])
    assert len(first) == 40  # nothing was added
    with pytest.raises(ConfigError, match="width 8, not 4"):
        PgvectorIndex(postgres_url, dim=4, table="tenant_acme")
    with pytest.raises(ConfigError, match="another metric"):
        PgvectorIndex(postgres_url, dim=DIM, table="tenant_acme", metric="cosine")
    first.close()
    second.drop()


def test_cosine_metric_ranks_unit_vectors_as_inner_product(postgres_url: str) -> None:
    x, q = _unit(200), _unit(4, seed=1)
    ip = PgvectorIndex(postgres_url, dim=DIM, ef_search=200)
    cos = PgvectorIndex(postgres_url, dim=DIM, metric="cosine", ef_search=200)
    for index in (ip, cos):
        index.add(x, _ids(200))
    a, b = ip.search(q, 10), cos.search(q, 10)
    truth = np.argsort(-(q @ x.T), axis=1)[:, :10]
    np.testing.assert_array_equal(a.indices, truth)  # ef_search = n: the graph finds all
    np.testing.assert_array_equal(b.indices, truth)
    np.testing.assert_allclose(b.scores, np.take_along_axis(q @ x.T, truth, axis=1), atol=1e-6)
    ip.drop()
    cos.drop()


def test_k_beyond_ef_search_limit_is_an_exact_scan(postgres_url: str) -> None:
    x, q = _unit(1100, dim=4), _unit(2, seed=2, dim=4)
    index = PgvectorIndex(postgres_url, dim=4)
    index.add(x, _ids(1100))
    found = index.search(q, 1050)  # pgvector's HNSW scan returns at most 1000 rows
    truth = np.sort(q @ x.T, axis=1)[:, ::-1][:, :1050]
    np.testing.assert_allclose(found.scores, truth, atol=1e-6)
    assert index.search(q, 5).indices.shape == (2, 5)  # back to the graph
    index.drop()


def test_load_reopens_refills_or_refuses(postgres_url: str, tmp_path) -> None:
    x = _unit(30)
    index = PgvectorIndex(postgres_url, dim=DIM, table="saved_tenant", m=4, ef_construction=8)
    index.add(x, _ids(30))
    index.save(tmp_path / "idx")
    index.drop()  # the table is gone: loading refills it from the snapshot
    loaded = load_index(tmp_path / "idx")
    assert isinstance(loaded, PgvectorIndex) and loaded.table == "saved_tenant"
    np.testing.assert_array_equal(loaded.vectors(), x)
    loaded.add(x[:1] * 0.5, ["new"])  # the table changed since the snapshot
    with pytest.raises(DataError, match="no longer holds the rows"):
        load_index(tmp_path / "idx")
    loaded.drop()


def test_scores_scan_every_row_exactly(postgres_url: str) -> None:
    x, q = _unit(500), _unit(3, seed=5)
    index = PgvectorIndex(postgres_url, dim=DIM)
    index.add(x, _ids(500))
    np.testing.assert_allclose(index.scores(q), q @ x.T, rtol=1e-5, atol=1e-6)
    index.drop()


def test_a_malformed_url_is_a_config_error_without_its_text() -> None:
    with pytest.raises(ConfigError, match="not a valid PostgreSQL connection") as err:
        PgvectorIndex("host=x password=hunter2 bogus", dim=DIM)
    assert "hunter2" not in str(err.value)
