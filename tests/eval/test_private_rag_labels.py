"""The private_rag experiment labels every system's total ε from the events it charged
(``dp.event_epsilon`` of their composition), never from its name or target ε."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragprivacy.corpus import synthesize
from ragprivacy.dp import GaussianEvent, SelfComposedEvent, event_epsilon, gaussian_epsilon
from ragprivacy.eval import parse_config, run_config
from ragprivacy.retrieval import DPProjectionRetriever, KnowledgeBase


def _config(questions: int) -> dict[str, object]:
    return {
        "name": "private-rag-labels",
        "seed": 5,
        "workers": 1,
        "corpora": {"c": {"synthetic": "knowledge", "n": 60}},
        "models": {"background_n": 60},
        "experiments": [
            {
                "corpus": "c",
                "type": "private_rag",
                "systems": ["non-rag", "rag", "dp_projection", "dp_vote"],
                "k": 4,
                "copies": 2,
                "questions": questions,
                "epsilons": [10],
                "rp_dim": 20,
            }
        ],
    }


def _cells(tmp_path: Path, questions: int) -> dict[str, dict]:
    res = run_config(parse_config(_config(questions)), tmp_path, workers=1, progress=False)
    return {c["cell"]["system"]: c["result"] for c in res.results["cells"]}


def test_dp_rp_g_reads_what_its_paper_calibration_delivers(tmp_path: Path) -> None:
    one = _cells(tmp_path / "one", 1)
    # one release at ε = 10, δ = 1e-4 with the classic formula (calibration="paper"):
    # μ = 2c/σ with σ = 2c√(2 ln(1.25/δ))/10, exactly ε = 10.62 at δ = 1e-4, not 10
    mu = 10 / math.sqrt(2 * math.log(1.25 / 1e-4))
    assert one["dp_projection"]["total_epsilon"] == pytest.approx(10.62, abs=5e-3)
    assert one["dp_projection"]["total_epsilon"] == pytest.approx(gaussian_epsilon(mu, 1e-4))
    assert one["dp_projection"]["total_delta"] == 1e-4
    three = _cells(tmp_path / "three", 3)
    # three fresh releases compose exactly to μ√3 (not 3 × 10 as the label used to say)
    total = three["dp_projection"]["total_epsilon"]
    assert total == pytest.approx(gaussian_epsilon(mu * math.sqrt(3), 1e-4), rel=1e-9)
    assert 10.62 < total < 3 * 10
    # the pure vote: the sum of its answers' events, at δ = 0
    assert three["dp_vote"]["total_epsilon"] == pytest.approx(3 * 10.0)
    assert three["dp_vote"]["total_delta"] == 0.0
    assert three["non-rag"]["total_epsilon"] == 0.0
    assert math.isinf(three["rag"]["total_epsilon"])
    report = (tmp_path / "three" / "report.md").read_text()
    assert f"| dp_projection | – | 10 | {total:g} |" in report


def test_dp_rp_g_analytic_calibration_delivers_the_target() -> None:
    kb = KnowledgeBase.build(synthesize("knowledge", 30, seed=1), embedder="hashing")
    kw = {"k": 3, "dim": 8, "epsilon": 10.0, "delta": 1e-4, "simulation": True, "rng": 0}
    analytic = DPProjectionRetriever(kb, calibration="analytic", **kw)
    assert event_epsilon(analytic.event, 1e-4)[0] == pytest.approx(10.0, rel=1e-9)
    paper = DPProjectionRetriever(kb, **kw)
    assert event_epsilon(paper.event, 1e-4)[0] == pytest.approx(10.62, abs=5e-3)
    assert isinstance(paper.event, GaussianEvent)
    five = event_epsilon(SelfComposedEvent(analytic.event, 5), 1e-4)[0]
    assert 10.0 < five < 50.0
