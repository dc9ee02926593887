"""The trained-embedder check (§A.1) and the production-scale check (§4.5): slow."""

from __future__ import annotations

import numpy as np
import pytest

from ragprivacy.dp import hit_probability
from ragprivacy.eval.experiments.collusion_scale import (
    production_scale_check,
    trained_embedder_check,
)
from ragprivacy.eval.experiments.collusion_topk import TopKHarness


@pytest.mark.slow
def test_minilm_sqrt_k_transfer() -> None:
    r = trained_embedder_check(pairs=10, trials=2000)
    assert len(r["pairs"]) == 10
    assert all(0.3 < p["delta"] < 0.7 for p in r["pairs"])
    assert 0.5 < r["median_auc_first_k"] < 0.54
    assert 0.55 < r["median_auc_last_k"] < 0.62
    assert r["median_advantage_growth"] > 3  # predicted sqrt(20) = 4.47


@pytest.mark.slow
def test_production_scale_small_hnsw() -> None:
    r = production_scale_check(passages=3000, eps=(16.0,), ks=(1, 20), trials=1000)
    cells = {c["k"]: c for c in r["cells"]}
    # the instrumented score channel follows eq. (3.10) at the realised gap ...
    for c in cells.values():
        assert abs(c["score_auc"] - c["score_predicted"]) < 3.5 * c["score_se"]
    assert cells[20]["score_auc"] > 0.5 + 3 * cells[20]["score_se"]
    # ... while the user-observable hit indicator stays near chance at this scale
    assert cells[20]["hit_auc"] < cells[20]["score_auc"]
    assert all(abs(c["z"]) < 4.5 for c in r["full_scale_checks"])


def test_hit_probability_uses_every_score() -> None:
    # Noise on all N scores: adding many low-scoring documents lowers the planted slot's
    # chance to make the top-K (a candidates-only scheme would not see them).
    h = TopKHarness(epsilon_acc=16.0)
    svc, accounts, probe = h.service(member=True, k=1, simulation=True, rng=0)
    scores = svc.knowledge_base("victim").index.scores(probe)[0]
    sigma = svc.sigma(accounts[0])
    small = hit_probability(scores, 50, sigma, 5)
    padded = np.concatenate([scores[:50], np.full(5000, -0.2), scores[50:]])
    assert hit_probability(padded, 50, sigma, 5) < small / 10


def test_production_pipeline_caches_embeddings_and_checks_p_b(tmp_path) -> None:
    # The fast documented alternative (lsa) through the whole §4.5 pipeline: embeddings
    # cached once, the quadrature p_b checked by full noise-then-select on every score.
    from ragprivacy.embed import create_embedder
    from ragprivacy.eval.experiments.collusion_scale import cached_embeddings

    kw = dict(
        passages=1500,
        embedder="lsa",
        eps=(16.0,),
        ks=(1, 20),
        trials=300,
        check_queries=1500,
        cache_dir=tmp_path,
        num_threads=1,
    )
    r = production_scale_check(**kw)
    assert r["embedder"] == "lsa" and r["index"] == "faiss-hnsw"
    assert r["near_duplicates"] == 0 and 0.05 < r["delta"] < 0.5
    for c in r["full_scale_checks"]:
        assert abs(c["z"]) < 4.5  # Monte Carlo over every score agrees with the quadrature
    assert any(0.05 < c["p_quadrature"] < 0.95 for c in r["full_scale_checks"])
    cells = {c["k"]: c for c in r["cells"]}
    assert cells[20]["score_auc"] > cells[1]["score_auc"]
    [folder] = list(tmp_path.iterdir())
    assert sorted(p.name for p in folder.iterdir()) == ["chunk-00000.npy", "meta.json"]
    # a second encode of the same texts reads the cache (the embedder is never called)
    emb = create_embedder("lsa").fit(["alpha beta gamma", "beta gamma delta", "gamma delta"])
    texts = ["alpha beta", "gamma delta", "beta"]
    first = cached_embeddings(texts, emb, cache_dir=tmp_path / "c", key="t", chunk=2)
    calls = []
    emb._encode = lambda batch: calls.append(batch)  # type: ignore[method-assign]
    again = cached_embeddings(texts, emb, cache_dir=tmp_path / "c", key="t", chunk=2)
    assert calls == [] and np.array_equal(first, again)
