"""Measured ε: the canary audit's lower bound never exceeds a correct mechanism's claim
(over many seeds), exceeds it when σ is halved, and reads the non-private baseline as
leaking; DP voting's answers stay within the ε the system reports."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import norm

from ragprivacy.corpus import Corpus, make_canary
from ragprivacy.dp import threshold_epsilon
from ragprivacy.errors import ConfigError
from ragprivacy.eval.experiments._systems import SystemEntry, build_entry
from ragprivacy.eval.measured_epsilon import (
    canary_neighbours,
    measure_answers,
    measure_noisy_topk,
)
from ragprivacy.generate import create_generator
from ragprivacy.retrieval import NoisyTopKRetriever
from ragprivacy.types import Document

CANARY = make_canary(3)
BASE = Corpus(
    [
        Document("d0", "The ward ordered new linen for the winter."),
        Document("d1", "Visiting hours end at eight in the evening."),
        Document("d2", "The pharmacy restocked saline and bandages."),
    ],
    name="ward",
)


def _gdp_epsilon(mu: float, delta: float) -> float:
    """ε of a μ-GDP mechanism at δ (Dong, Roth and Su), by bisection."""

    def delta_at(eps: float) -> float:
        return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))

    lo, hi = 0.0, 50.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_at(mid) > delta else (lo, mid)
    return hi


# ------------------------------------------------------------------ the bound itself
def test_the_threshold_bound_is_valid_and_tight_for_the_gaussian_mechanism() -> None:
    """Scores N(μ, 1) against N(0, 1) (a μ-GDP pair): over 200 seeds the 95 % bound
    exceeds the true ε at most about 5 % of the time, and it comes near it with many
    runs."""
    mu, delta = 1.0, 1e-5
    true = _gdp_epsilon(mu, delta)
    over = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        got = threshold_epsilon(rng.normal(mu, 1, 4000), rng.normal(0, 1, 4000), delta=delta)
        over += got.epsilon_lower > true
    assert over <= 20  # 5 % of 200 is 10; binomial slack
    rng = np.random.default_rng(7)
    big = threshold_epsilon(rng.normal(mu, 1, 400_000), rng.normal(0, 1, 400_000), delta=delta)
    assert 0.4 * true < big.epsilon_lower < true
    assert big.tpr_lower <= big.tpr and big.fpr <= big.fpr_upper


def test_the_threshold_bound_reads_no_loss_from_one_distribution_and_refuses_bad_input() -> None:
    rng = np.random.default_rng(0)
    nothing = [threshold_epsilon(rng.normal(size=500), rng.normal(size=500)) for _ in range(40)]
    assert sum(r.epsilon_lower > 0 for r in nothing) <= 6
    with pytest.raises(ConfigError, match="at least 2 runs"):
        threshold_epsilon(np.array([1.0]), np.array([0.0, 1.0]))
    with pytest.raises(ConfigError, match="finite"):
        threshold_epsilon(np.array([1.0, np.nan]), np.array([0.0, 1.0]))


# ------------------------------------------------------------------ noisy top-K
def _retrievers(sigma_factor: float = 1.0) -> tuple[NoisyTopKRetriever, NoisyTopKRetriever]:
    """noisy top-K with K covering the corpus and scores clipped to [0, 0.5] (Δ = 0.5,
    which the canary's score uses whole): the release is the Gaussian mechanism on the
    scores, exactly calibrated for (ε_acc, δ_acc) = (1, 1e-5) over 2 queries — or, with
    ``sigma_factor`` < 1, the same claim over too little noise (a planted bug)."""
    kb_in, kb_out = canary_neighbours(BASE, CANARY)
    opts = {
        "k": 4,
        "epsilon_acc": 1.0,
        "delta_acc": 1e-5,
        "queries_per_account": 2,
        "calibration": "exact",
        "score_range": (0.0, 0.5),
        "simulation": True,
    }
    honest = NoisyTopKRetriever(kb_in, **opts)  # type: ignore[arg-type]
    if sigma_factor != 1.0:
        opts["sigma"] = honest.sigma * sigma_factor
    return NoisyTopKRetriever(kb_in, **opts), NoisyTopKRetriever(kb_out, **opts)  # type: ignore[arg-type]


def test_the_canary_query_uses_the_whole_sensitivity() -> None:
    """The game's neighbours differ as much as Δ allows at the canary's slot, and
    nowhere else."""
    r_in, r_out = _retrievers()
    rows = [r.kb.index.scores(r.kb.embedder.encode([CANARY.query]))[0] for r in (r_in, r_out)]
    clipped = [np.clip(x, 0.0, 0.5) for x in rows]
    assert clipped[0][-1] == 0.5 and clipped[1][-1] < 0.05
    assert np.array_equal(clipped[0][:-1], clipped[1][:-1])


def test_a_correct_noisy_topk_never_measures_above_its_claim() -> None:
    r_in, r_out = _retrievers()
    bounds = [
        measure_noisy_topk(r_in, r_out, CANARY, trials=20_000, channel=channel, seed=seed)
        for seed in range(30)
        for channel in ("ids", "scores")
    ]
    assert all(not b.refuted for b in bounds), [b.bound.epsilon_lower for b in bounds]
    scores = [b.bound.epsilon_lower for b in bounds if b.release.endswith("scores")]
    assert max(scores) > 0.3  # the attack is strong enough to see most of the claim


def test_halving_sigma_is_refuted() -> None:
    r_in, r_out = _retrievers(sigma_factor=0.5)
    got = measure_noisy_topk(r_in, r_out, CANARY, trials=200_000, channel="scores", seed=1)
    assert got.claimed_epsilon == 1.0 and got.refuted, got.to_dict()
    assert got.bound.tpr > got.bound.fpr


# ------------------------------------------------------------------ answers
@pytest.fixture(scope="module")
def knowledge_bases():  # type: ignore[no-untyped-def]
    return canary_neighbours(BASE, CANARY)


def _systems(entry: SystemEntry, kbs, seed: int):  # type: ignore[no-untyped-def]
    reader = create_generator("reference")
    words = tuple(sorted({w for d in (*BASE, CANARY) for w in str(getattr(d, "text", d)).split()}))
    return [
        build_entry(
            entry,
            kb=kb,
            generator=reader,
            k=4,
            queries=1,
            seed=seed + side,
            vocabulary=lambda: words,
        )
        for side, kb in enumerate(kbs)
    ]


def test_the_non_private_baseline_leaks_the_canary(knowledge_bases) -> None:  # type: ignore[no-untyped-def]
    rag_in, rag_out = _systems(SystemEntry(name="rag", k=1), knowledge_bases, 0)
    got = measure_answers(rag_in, rag_out, CANARY, trials=60, label="rag")
    assert math.isinf(got.claimed_epsilon) and not got.refuted
    assert got.bound.tpr == 1.0 and got.bound.fpr == 0.0
    assert got.bound.epsilon_lower > 2.0


def test_dp_voting_stays_within_the_epsilon_it_reports(knowledge_bases) -> None:  # type: ignore[no-untyped-def]
    entry = SystemEntry(name="dp_vote", options={"epsilon": 4.0})
    vote_in, vote_out = _systems(entry, knowledge_bases, 0)
    got = measure_answers(vote_in, vote_out, CANARY, trials=40, queries=2, label="dp_vote")
    assert got.claimed_epsilon == 8.0  # two answers at ε = 4, composed
    assert not got.refuted, got.to_dict()


# ------------------------------------------------------------------ the command
def test_the_command_prints_each_claim_beside_its_measured_bound(
    tmp_path,
    capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
) -> None:
    from ragprivacy.cli import main

    code = main(["audit", "empirical", "--n", "20", "--trials", "4000", "--answer-trials",
                 "30", "--seed", "2", "--json"])  # fmt: skip
    record = json.loads(capsys.readouterr().out)
    assert code == 0
    assert record["settings"]["seed"] == 2 and record["settings"]["documents"] == 20
    rows = {(r["system"], r["release"]): r for r in record["results"]}
    assert len(rows) == 5  # rag, noisy_topk on each channel, dp_vote, murag
    rag = rows[("rag (top-3, no guarantee)", "answers")]
    # every one of the 15 held-out accounts on each side decided right
    assert rag["claimed_epsilon"] == math.inf and rag["epsilon_lower"] > 1.0
    for r in record["results"]:
        assert not r["refuted"] and r["epsilon_lower"] >= 0
        assert r["confidence"] == 0.95
    assert main(["audit", "empirical", "--systems", "rag,oracle"]) == 2
    err = capsys.readouterr().err
    assert "Unknown system(s) ['oracle']" in err and len(err.strip().splitlines()) == 1
