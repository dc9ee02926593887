"""The trained-embedder check (§A.1) and the production-scale check (§4.5): slow."""

from __future__ import annotations

import pytest

from ragprivacy.attacks.collusion import TopKHarness, hit_probability
from ragprivacy.eval.experiments.collusion_scale import (
    production_scale_check,
    trained_embedder_check,
)


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
    # the instrumented score channel keeps the sqrt(k) growth ...
    assert cells[20]["score_auc"] - 0.5 > 2.5 * (cells[1]["score_auc"] - 0.5)
    # ... while the user-observable hit indicator stays near chance at this scale
    assert cells[20]["hit_auc"] < cells[20]["score_auc"]


def test_hit_probability_uses_every_score() -> None:
    # Noise on all N scores: adding many low-scoring documents lowers the planted slot's
    # chance to make the top-K (a candidates-only scheme would not see them).
    h = TopKHarness(epsilon_acc=16.0)
    svc, accounts, probe = h.service(member=True, k=1, rng=0)
    scores = svc.knowledge_base("victim").index.scores(probe)[0]
    import numpy as np

    sigma = svc.sigma(accounts[0])
    small = hit_probability(scores, 50, sigma, 5)
    padded = np.concatenate([scores[:50], np.full(5000, -0.2), scores[50:]])
    assert hit_probability(padded, 50, sigma, 5) < small / 10
