"""``LsaEmbedder``: fitting rules, state digest, and retrieval of short factual documents."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from ragprivacy.embed import LsaConfig, LsaEmbedder
from ragprivacy.errors import ConfigError, DataError

TEXTS = [
    "alpha beta gamma",
    "beta gamma delta",
    "gamma delta epsilon",
    "delta epsilon zeta",
    "epsilon zeta eta",
]


def _proxy_module() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "_knowledge_proxy.py"
    spec = importlib.util.spec_from_file_location("ragprivacy_bench_knowledge_proxy", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def proxy() -> ModuleType:
    return _proxy_module()


def test_encoding_before_fit_is_a_config_error() -> None:
    emb = LsaEmbedder()
    assert not emb.is_fitted
    with pytest.raises(ConfigError, match=r"fit\(texts\)"):
        emb.encode(["anything"])
    with pytest.raises(ConfigError, match="before it is fitted"):
        _ = emb.dim
    assert emb.state_digest() == ""


def test_fit_returns_self_and_caps_the_width() -> None:
    emb = LsaEmbedder(n_components=100)
    assert emb.fit(TEXTS) is emb
    assert emb.is_fitted
    assert 1 <= emb.dim <= len(TEXTS) - 1  # capped by the data, not 100
    assert emb.encode(TEXTS).shape == (5, emb.dim)
    assert np.all(np.diff(emb.singular_values) <= 1e-6)


@pytest.mark.parametrize("texts", [[], ["only one"], ["the and of", "a an the"]])
def test_fit_on_unusable_texts_is_a_data_error(texts: list[str]) -> None:
    with pytest.raises(DataError):
        LsaEmbedder().fit(texts)


def test_fit_rejects_non_strings() -> None:
    with pytest.raises(DataError, match="item 1"):
        LsaEmbedder().fit(["a text", None])  # type: ignore[list-item]


def test_refit_replaces_state_and_digest_tracks_data() -> None:
    a = LsaEmbedder().fit(TEXTS)
    b = LsaEmbedder().fit(TEXTS)
    c = LsaEmbedder().fit([*TEXTS[:-1], "epsilon zeta theta"])
    assert a.state_digest() == b.state_digest() != c.state_digest()
    assert a.fingerprint() != c.fingerprint()
    a.fit([*TEXTS[:-1], "epsilon zeta theta"])
    assert a.fingerprint() == c.fingerprint()


def test_random_state_is_part_of_the_fingerprint() -> None:
    a = LsaEmbedder(random_state=0).fit(TEXTS * 3)
    b = LsaEmbedder(random_state=1).fit(TEXTS * 3)
    assert a.config()["random_state"] != b.config()["random_state"]
    assert a.fingerprint() != b.fingerprint()


def test_config_object_and_overrides() -> None:
    cfg = LsaConfig(n_components=7, ngram_range=[1, 2])  # type: ignore[arg-type]
    assert cfg.ngram_range == (1, 2)
    emb = LsaEmbedder(cfg, singular_power=1.0)
    assert emb.settings.n_components == 7 and emb.settings.singular_power == 1.0
    assert emb.config()["ngram_range"] == [1, 2]
    with pytest.raises(ConfigError, match="LsaConfig"):
        LsaEmbedder("256")  # type: ignore[arg-type]


def test_singular_power_one_is_truncated_svd_transform() -> None:
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = TEXTS * 2 + ["alpha zeta", "beta eta gamma alpha"]
    emb = LsaEmbedder(n_components=3, singular_power=1.0, stop_words=None, n_iter=5).fit(texts)
    tfidf = TfidfVectorizer(sublinear_tf=True, strip_accents="unicode", dtype=np.float32)
    tfidf.fit(texts)
    svd = TruncatedSVD(3, n_iter=5, random_state=0).fit(tfidf.transform(texts))
    ref = svd.transform(tfidf.transform(texts))
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(emb.encode(texts), ref, atol=1e-4)


def test_recall_on_the_knowledge_proxy(proxy: ModuleType) -> None:
    """The defaults retrieve the gold document of a name question in the top 5 for
    >= 90 % of 2,000 one-person documents (names from Zipf pools, as real names are)."""
    data = proxy.make_knowledge_proxy(2000, rng=3)
    emb = LsaEmbedder().fit(data.docs)
    recall = proxy.recall_at(emb.encode(data.docs), emb.encode(data.questions), data.gold)
    assert recall[5] >= 0.95, recall
    assert recall[1] >= 0.9, recall


def test_recall_check_can_fail(proxy: ModuleType) -> None:
    # a 16-wide LSA keeps the template words and loses the names
    data = proxy.make_knowledge_proxy(500, rng=4)
    emb = LsaEmbedder(n_components=16, n_iter=5, singular_power=1.0).fit(data.docs)
    recall = proxy.recall_at(emb.encode(data.docs), emb.encode(data.questions), data.gold)
    assert recall[5] < 0.9, recall


def test_recall_on_the_synthetic_knowledge_corpus() -> None:
    from ragprivacy.corpus import synthesize

    corpus = synthesize("knowledge", 2000, seed=1)
    position = {doc.id: i for i, doc in enumerate(corpus)}
    items = [q for q in corpus.questions if q.hops == 1]
    gold = np.array([position[q.support_ids[0]] for q in items])
    emb = LsaEmbedder().fit(corpus.texts)
    d, q = emb.encode(corpus.texts), emb.encode([i.question for i in items])
    scores = q @ d.T
    rank = (scores >= scores[np.arange(len(gold)), gold][:, None]).sum(axis=1) - 1
    assert (rank < 5).mean() >= 0.9


def test_blas_threads_limits_inside_and_restores_after() -> None:
    import numpy  # noqa: F401  # a BLAS to limit
    from threadpoolctl import threadpool_info

    from ragprivacy.embed._checks import blas_threads

    def blas() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas()
    assert before, "numpy should load a BLAS"
    for _ in range(2):  # the second block reuses the cached library view
        with blas_threads(1):
            assert blas() == [1] * len(before)
        assert blas() == before
    with blas_threads(None):
        assert blas() == before
