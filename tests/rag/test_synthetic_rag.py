"""The PE baseline system: public offline APIs, the synthetic datastore and RAG over it."""

from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.corpus import Corpus, background_texts, synthesize
from ragprivacy.dp import epsilon_for, pe_epsilon, pe_sigma
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Generator, create_generator
from ragprivacy.rag import (
    BackgroundRandomAPI,
    FillInVariationAPI,
    SyntheticRAG,
    synthetic_datastore,
)
from ragprivacy.types import NoOpEvent


@pytest.fixture(scope="module")
def private() -> Corpus:
    return synthesize("knowledge", 60, seed=3)


@pytest.fixture(scope="module")
def reader() -> Generator:
    return create_generator("reference", background=background_texts("knowledge", 80, seed=11))


def _private_strings(corpus: Corpus) -> set[str]:
    """Every private document's text and every name, organisation and place in it."""
    out = set(corpus.texts)
    for d in corpus:
        out |= {p.value for p in d.pii if len(p.value) > 3}
    return out


def test_variation_api_keeps_the_count_and_varies(reader: Generator) -> None:
    texts = background_texts("knowledge", 10, seed=4)
    api = FillInVariationAPI(reader, mask_rate=0.5)
    a = api(texts, np.random.default_rng(1))
    assert len(a) == len(texts) and all(t.strip() for t in a)
    assert sum(x != y for x, y in zip(a, texts)) >= 8
    assert a == api(texts, np.random.default_rng(1))  # a seeded variation is reproducible
    assert a != api(texts, np.random.default_rng(2))
    unchanged = FillInVariationAPI(reader, mask_rate=0.0, rephrase=False)
    assert unchanged(texts, np.random.default_rng(0)) == texts  # nothing masked, no rephrase
    dialogues = background_texts("medical", 5, seed=4)  # the lexicon's own domain
    rephrased = FillInVariationAPI(reader, mask_rate=0.0)(dialogues, np.random.default_rng(0))
    assert all(x != y for x, y in zip(rephrased, dialogues))
    with pytest.raises(ConfigError):
        FillInVariationAPI(reader, mask_rate=1.5)
    with pytest.raises(ConfigError, match="synthetic kind"):
        BackgroundRandomAPI("wikipedia")


def test_public_apis_never_put_a_private_document_in_the_datastore(
    private: Corpus, reader: Generator
) -> None:
    store = synthetic_datastore(
        private,
        random_api=BackgroundRandomAPI("knowledge"),
        variation_api=FillInVariationAPI(reader),
        epsilon=200.0,  # little noise: the histograms follow the private data closely
        delta=1e-5,
        public_texts=background_texts("knowledge", 80, seed=12),
        iterations=4,
        n_synthetic=60,
        simulation=True,
        rng=0,
    )
    texts = store.knowledge_base.corpus.texts
    assert len(texts) == 60
    secrets = _private_strings(private)
    assert len(secrets) > 2 * len(private)  # the texts and their names
    assert not [t for t in texts if t in secrets]  # no private document verbatim
    assert not [s for s in secrets if any(s in t for t in texts)]  # nor a private name
    # the reported release ε is the dp_accounting composition at the calibrated σ
    assert store.result.sigma == pytest.approx(pe_sigma(200.0, 1e-5, 4))
    assert store.epsilon == pytest.approx(200.0, rel=1e-9)
    assert epsilon_for(store.event, 1e-5, "pld") == pytest.approx(store.epsilon, rel=5e-3)


def test_a_private_random_api_does_leak_verbatim(private: Corpus, reader: Generator) -> None:
    """The check above can fail: an API that reads the private corpus puts its documents
    in the datastore (what the public-only APIs rule out)."""
    texts = list(private.texts)
    store = synthetic_datastore(
        private,
        random_api=lambda n, g: [texts[i] for i in g.integers(0, len(texts), n)],
        variation_api=lambda xs, g: list(xs),
        epsilon=10.0,
        delta=1e-5,
        public_texts=background_texts("knowledge", 80, seed=12),
        iterations=2,
        n_synthetic=20,
        simulation=True,
        rng=0,
    )
    assert set(store.knowledge_base.corpus.texts) & set(texts)


def test_queries_are_free_after_the_release(private: Corpus, reader: Generator) -> None:
    store = synthetic_datastore(
        private,
        random_api=BackgroundRandomAPI("knowledge"),
        variation_api=FillInVariationAPI(reader),
        epsilon=10.0,
        delta=1e-5,
        public_texts=background_texts("knowledge", 80, seed=12),
        iterations=3,
        n_synthetic=30,
        simulation=True,
        rng=1,
    )
    system = SyntheticRAG(store, reader, k=3)
    questions = [q.question for q in private.questions[:5]]
    responses = system.answer_batch(questions, account="a")
    for r in responses:
        assert r.privacy.event == NoOpEvent() and r.privacy.epsilon == 0.0
        assert r.privacy.cumulative_epsilon == pytest.approx(10.0)
        assert r.retrieval is not None and len(r.retrieval.indices) == 3
    assert system.total_epsilon == pytest.approx(
        pe_epsilon(store.result.sigma, 3, 1e-5, simulation=True)
    )
    assert system.release_event == store.event
    info = system.describe()
    assert info["name"] == "pe" and info["pe"]["iterations"] == 3
    assert info["synthetic_documents"] == 30
