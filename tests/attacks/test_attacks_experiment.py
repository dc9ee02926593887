from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragprivacy.cli import main
from ragprivacy.errors import ConfigError
from ragprivacy.eval import parse_config, run_config

CONFIG = {
    "name": "membership-test",
    "seed": 5,
    "workers": 1,
    "corpora": {"med": {"synthetic": "medical", "n": 120}},
    "models": {"background_n": 80, "embedder": "hashing"},
    "experiments": [
        {
            "type": "membership",
            "corpus": "med",
            "systems": ["rag"],
            "k": 3,
            "attacks": ["mba", "rag-mia"],
            "defenses": ["none", "prompt-modifying"],
            "targets": 16,
            "calibration": 8,
            "generator_options": {"compliance": 1.0},
            "attack_options": {"mba": {"n_masks": 6}},
            "studies": [{"param": "mba.n_masks", "values": [4]}],
        }
    ],
}


def test_membership_experiment_table_roc_and_resume(tmp_path: Path) -> None:
    cfg = parse_config(CONFIG)
    result = run_config(cfg, tmp_path, progress=False)
    cells = {
        (c["cell"]["attack"], c["cell"]["defense"], c["cell"].get("value")): c
        for c in result.results["cells"]
    }
    assert len(cells) == 5
    m = cells[("rag-mia", "prompt-modifying", None)]["result"]["metrics"]
    assert m["auc"] == pytest.approx(0.5)
    assert cells[("mba", "none", None)]["result"]["metrics"]["auc"] > 0.9
    report = (tmp_path / "report.md").read_text()
    assert "| rag | mba | none |" in report and "mba.n_masks" in report
    assert list(tmp_path.glob("membership_0_roc_*.png"))
    # a crash before a cell finished loses nothing else: the rerun redoes one cell
    first = sorted((tmp_path / "cells").glob("*.json"))[0]
    first.unlink()
    again = run_config(cfg, tmp_path, progress=False)
    assert json.dumps(again.results["cells"], sort_keys=True, default=str).count('"auc"') == 5


def test_bad_options_are_refused() -> None:
    bad = json.loads(json.dumps(CONFIG))
    bad["experiments"][0]["attacks"] = ["nope"]
    with pytest.raises(ConfigError, match="attacks"):
        run_config(parse_config(bad), "/tmp/never", progress=False)


def test_attack_command(tmp_path: Path) -> None:
    code = main(
        [
            "attack",
            "--attack",
            "rag-mia",
            "--corpus",
            "medical",
            "--defense",
            "none",
            "--n",
            "60",
            "--targets",
            "8",
            "--calibration",
            "4",
            "--workers",
            "1",
            "--embedder",
            "hashing",
            "--background-n",
            "40",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    assert code == 0
    assert "| rag | rag-mia | none |" in (tmp_path / "report.md").read_text()
    assert main(["attack", "--attack", "zzz", "--out", str(tmp_path)]) == 2
