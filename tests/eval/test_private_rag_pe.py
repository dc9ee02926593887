"""End to end: the ``pe`` row of the private_rag experiment (Private-RAG's Private
Evolution baseline) next to MURAG at the same total ε."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ragprivacy.dp import pe_epsilon
from ragprivacy.errors import ConfigError
from ragprivacy.eval import parse_config, run_config
from ragprivacy.eval.experiments.base import create_experiment
from ragprivacy.eval.metrics import wilson_interval


def _config(**options: object) -> dict[str, object]:
    return {
        "name": "private-rag-pe",
        "seed": 5,
        "workers": 1,
        "corpora": {"c": {"synthetic": "knowledge", "n": 60}},
        "models": {"background_n": 60},
        "experiments": [
            {
                "corpus": "c",
                "type": "private_rag",
                "systems": ["non-rag", "murag", "pe"],
                "k": 4,
                "copies": 3,
                "questions": 8,
                "epsilons": [10, 40],
                "pe_samples": 40,
                "pe_iterations": 3,
                **options,
            }
        ],
    }


def test_pe_row_runs_at_the_same_total_epsilon(tmp_path: Path) -> None:
    res = run_config(parse_config(_config()), tmp_path / "pe", workers=1, progress=False)
    cells = res.results["cells"]
    pe = {c["cell"]["epsilon"]: c["result"] for c in cells if c["cell"]["system"] == "pe"}
    murag = {c["cell"]["epsilon"]: c["result"] for c in cells if c["cell"]["system"] == "murag"}
    assert set(pe) == set(murag) == {10.0, 40.0}
    n_private = 60 * 3  # every copy votes: each is a document of the accounting
    delta = 1 / (n_private * math.log(n_private))
    for eps, r in pe.items():
        # the same total ε as MURAG's row (M = 1), and it is the composition of T
        # Gaussian mechanisms at the σ the run used
        assert r["total_epsilon"] == pytest.approx(murag[eps]["total_epsilon"])
        assert r["total_epsilon"] == pytest.approx(
            pe_epsilon(r["pe"]["sigma"], 3, delta, simulation=True)
        )
        assert r["pe"]["delta"] == pytest.approx(delta)
        assert r["pe"]["samples"] == 40 and r["pe"]["verbatim_private"] == 0
        for key in ("precision", "recall", "precision_random", "recall_random"):
            assert -1.0 <= r["pe"][key] <= 1.0
        assert r["documents_charged"] == 0  # answers are free after the release
        hits = round(r["accuracy"] * r["n"])
        assert r["accuracy_ci95"] == pytest.approx(list(wilson_interval(hits, r["n"])))
        assert math.isnan(r["precision_top50"])  # synthetic documents: not defined
    assert pe[10.0]["pe"]["sigma"] > pe[40.0]["pe"]["sigma"]
    report = (tmp_path / "pe" / "report.md").read_text()
    assert "| pe | – | 10 | 10 |" in report and "| pe | – | 40 | 40 |" in report
    assert "PE (plain RAG over a DP synthetic datastore" in report
    assert "0 verbatim private documents" in report and "embedding precision" in report


@pytest.mark.parametrize(("key", "value"), [("pe_samples", 0), ("pe_delta", 1.0)])
def test_pe_options_are_checked(key: str, value: float) -> None:
    cfg = parse_config(_config(**{key: value}))
    with pytest.raises(ConfigError, match=key):
        create_experiment(cfg.experiments[0], cfg)
