"""The contract the embedded embedders meet (``lsa`` and ``hashing``; MiniLM has its own
module so that its model loads once)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest

from ragprivacy.embed import (
    Embedder,
    HashingEmbedder,
    LsaEmbedder,
    create_embedder,
    embedder_names,
)
from ragprivacy.errors import ConfigError, DataError, UnknownBackendError

FIT_TEXTS = [
    "Marta Olsen was born in Velmora and works as a baker.",
    "Jon Berg lives in Tallow Creek and studied history.",
    "The river Velm floods every spring near Velmora.",
    "Bakers in Velmora sell rye bread and honey cakes.",
    "Jon Berg is married to Ana Kovac, a pilot.",
    "Ana Kovac flies cargo planes between Tallow Creek and the coast.",
    "Spring rain makes the river rise quickly.",
    "History students read about old trade routes.",
]
PROBES = ["Where was Marta Olsen born?", "Who is Jon Berg married to?", "", "rye bread"]


def _lsa(**kw: object) -> Embedder:
    return LsaEmbedder(**kw).fit(FIT_TEXTS)


def _hashing(**kw: object) -> Embedder:
    return HashingEmbedder(**kw)


FACTORIES: dict[str, Callable[..., Embedder]] = {"lsa": _lsa, "hashing": _hashing}
# one setting per embedder that must change its fingerprint and its vectors
CHANGED: dict[str, dict[str, object]] = {
    "lsa": {"n_components": 3},
    "hashing": {"char_weight": 0.2},
}


@pytest.fixture(params=sorted(FACTORIES))
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def test_registry_names_and_types() -> None:
    assert {"lsa", "hashing", "minilm", "sentence-transformers"} <= set(embedder_names())
    assert isinstance(create_embedder("lsa"), LsaEmbedder)
    assert isinstance(create_embedder("hashing", dim=64), HashingEmbedder)
    with pytest.raises(UnknownBackendError, match="choose one of"):
        create_embedder("word2vec")


def test_shape_dtype_and_unit_norm(kind: str) -> None:
    emb = FACTORIES[kind]()
    out = emb.encode(PROBES)
    assert out.dtype == np.float32
    assert out.shape == (len(PROBES), emb.dim)
    assert out.flags.c_contiguous
    norms = np.linalg.norm(out, axis=1)
    # the empty text has no features: a zero row (never NaN)
    np.testing.assert_allclose(norms[[0, 1, 3]], 1.0, atol=1e-5)
    assert norms[2] == 0.0
    assert np.isfinite(out).all()


def test_single_string_and_empty_input(kind: str) -> None:
    emb = FACTORIES[kind]()
    assert emb.encode("rye bread").shape == (1, emb.dim)
    assert emb.encode([]).shape == (0, emb.dim)
    np.testing.assert_array_equal(emb.encode("rye bread")[0], emb.encode(PROBES)[3])


def test_batching_does_not_change_vectors(kind: str) -> None:
    emb = FACTORIES[kind]()
    texts = FIT_TEXTS * 3
    np.testing.assert_allclose(
        emb.encode(texts, batch_size=5), emb.encode(texts, batch_size=100), atol=1e-6
    )


def test_deterministic_across_instances(kind: str) -> None:
    a, b = FACTORIES[kind](), FACTORIES[kind]()
    np.testing.assert_array_equal(a.encode(PROBES), b.encode(PROBES))
    assert a.fingerprint() == b.fingerprint()
    assert len(a.fingerprint()) == 64


def test_fingerprint_and_vectors_follow_settings(kind: str) -> None:
    a, b = FACTORIES[kind](), FACTORIES[kind](**CHANGED[kind])
    assert a.fingerprint() != b.fingerprint()
    assert a.config() != b.config()
    va, vb = a.encode(PROBES[:2]), b.encode(PROBES[:2])
    assert va.shape != vb.shape or not np.allclose(va, vb)


def test_related_texts_are_closer(kind: str) -> None:
    emb = FACTORIES[kind]()
    v = emb.encode(["Where was Marta Olsen born?", *FIT_TEXTS])
    scores = v[1:] @ v[0]
    assert int(np.argmax(scores)) == 0


def test_non_string_items_are_data_errors(kind: str) -> None:
    emb = FACTORIES[kind]()
    with pytest.raises(DataError, match="item 1 is int"):
        emb.encode(["fine", 3])  # type: ignore[list-item]


def test_pickle_round_trip(kind: str) -> None:
    emb = FACTORIES[kind]()
    copy = pickle.loads(pickle.dumps(emb))
    assert copy.fingerprint() == emb.fingerprint()
    np.testing.assert_array_equal(copy.encode(PROBES), emb.encode(PROBES))


def test_config_is_json_ready(kind: str) -> None:
    import json

    emb = FACTORIES[kind]()
    assert json.loads(json.dumps(emb.config())) == emb.config()


@pytest.mark.parametrize(
    ("factory", "kwargs", "match"),
    [
        (HashingEmbedder, {"dim": 8}, "'dim'"),
        (HashingEmbedder, {"char_weight": 1.5}, "'char_weight'"),
        (HashingEmbedder, {"word_ngram_range": (2, 1)}, "'word_ngram_range'"),
        (HashingEmbedder, {"colour": "red"}, "Unknown hashing setting"),
        (LsaEmbedder, {"n_components": 0}, "'n_components'"),
        (LsaEmbedder, {"singular_power": 2.0}, "'singular_power'"),
        (LsaEmbedder, {"stop_words": "french"}, "'stop_words'"),
        (LsaEmbedder, {"ngram_range": (0, 2)}, "'ngram_range'"),
        (LsaEmbedder, {"max_df": 0.0}, "'max_df'"),
        (LsaEmbedder, {"sublinear_tf": "yes"}, "'sublinear_tf'"),
        (LsaEmbedder, {"shape": 3}, "Unknown LSA setting"),
    ],
)
def test_bad_settings_are_config_errors(
    factory: Callable[..., Embedder], kwargs: dict, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        factory(**kwargs)


def test_import_loads_no_heavy_backend() -> None:
    code = (
        "import sys, ragprivacy.embed, ragprivacy.index\n"
        "heavy = {'torch', 'transformers', 'sentence_transformers', 'faiss'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
