"""The ``collusion`` experiment type: sweeps inside ``ragprivacy run`` configs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from ragprivacy._stats import auc_interval_from
from ragprivacy.errors import ConfigError
from ragprivacy.eval import run_config
from ragprivacy.eval.config import ExperimentConfig, from_mapping
from ragprivacy.eval.experiments import experiment_types
from ragprivacy.eval.experiments.collusion import (
    SweepCell,
    _null_se,
    _z,
    gates,
    scalar_sweep,
)

_CONFIG = """
name: collusion test
seed: 5
workers: 1
experiments:
  - type: collusion
    mechanism: scalar
    seed: 3
    eps_acc: [2, 4]
    coalition_sizes: [1, 5, 20]
    n: 10000
    trials: 3000
  - type: collusion
    mechanism: topk
    k: 5
    eps_acc: [16]
    coalition_sizes: [1, 20]
    n: 200
    trials: 500
"""


def _config(text: str = _CONFIG) -> ExperimentConfig:
    return from_mapping(ExperimentConfig, yaml.safe_load(text), "config")


def test_sweeps_run_as_an_experiment_type(tmp_path: Path) -> None:
    assert "collusion" in experiment_types()
    run_config(_config(), tmp_path, workers=1, progress=False)
    report = (tmp_path / "report.md").read_text()
    assert report.count("gate **P1**") == 2 and "eq. (3.10)/(3.11)" in report
    assert (tmp_path / "collusion_0_scalar.png").stat().st_size > 1000
    assert (tmp_path / "collusion_1_topk.png").exists()
    # one cell per epsilon row, same numbers as one sweep with the same seed
    direct = scalar_sweep(eps=[2.0, 4.0], ks=[1, 5, 20], n=10_000, trials=3000, seed=3)
    for c in direct.cells:
        ci = auc_interval_from(c.auc, c.se, c.trials)
        assert ci.low < c.auc < ci.high or ci.method == "paired-exact"
        cell = f"{c.auc:.4f} ({ci.low:.4f}–{ci.high:.4f})"
        assert f"| {c.eps_acc:g} | {c.k} | {cell}" in report and f" | {c.se:.4f} |" in report
    # the top-K curve rises with k at eps = 16
    rows = [ln for ln in report.splitlines() if ln.startswith("| 16 |")]
    auc = [float(r.split("|")[3].split()[0]) for r in rows]
    assert len(rows) == 2 and auc[1] > auc[0] + 0.1


def test_options_are_validated() -> None:
    bad = _CONFIG.replace("mechanism: topk", "mechanism: laplace")
    from ragprivacy.eval.experiments import create_experiment

    cfg = _config(bad)
    with pytest.raises(ConfigError, match="mechanism"):
        create_experiment(cfg.experiments[1], cfg, 1)
    cfg = _config(_CONFIG.replace("coalition_sizes: [1, 20]", "coalition_sizes: [0, 20]"))
    with pytest.raises(ConfigError):
        create_experiment(cfg.experiments[1], cfg, 1)


def test_only_document_experiments_need_a_corpus() -> None:
    """Collusion sweeps name no corpus; a membership experiment without one is refused
    with a message that lists the config's corpora."""
    from ragprivacy.eval.experiments import create_experiment

    cfg = _config()
    assert cfg.experiments[0].corpus is None and not cfg.corpora
    text = "name: t\ncorpora:\n  med: {synthetic: medical, n: 20}\nexperiments:\n"
    cfg = _config(text + "  - {type: membership, targets: 4}\n")
    with pytest.raises(ConfigError, match=r"needs a 'corpus'.*med"):
        create_experiment(cfg.experiments[0], cfg, 0)


def test_null_se_is_the_exact_mann_whitney_se_at_one_half() -> None:
    for trials in (10, 200, 10_000):
        assert _null_se(0.5, trials) == pytest.approx(math.sqrt((2 * trials + 1) / 12) / trials)
    assert _null_se(0.9, 100) == pytest.approx(_null_se(0.1, 100))
    assert 0 < _null_se(1.0, 100) < _null_se(0.99, 100)


def test_a_perfectly_separated_cell_is_tested_not_counted_as_a_miss() -> None:
    # Every pair ordered: DeLong's SE is 0. A prediction of 0.9995 at 2,000 trials per
    # world expects about 0.05 % misordered pairs, so AUC = 1 agrees with it.
    perfect = SweepCell(20, 64.0, 1.0, 0.0, 0.9995, _z(1.0, 0.0, 0.9995, 2000), 2000)
    assert perfect.z is not None and 0 < perfect.z < 2
    far = _z(1.0, 0.0, 0.9, 2000)
    assert far > 2  # a prediction far from 1 is still rejected
    (p3,) = (g for g in gates([perfect] * 10) if g.name == "P3")
    assert p3.passed and p3.details["within_2se"] == 10
    assert json.loads(json.dumps(perfect.to_dict(), allow_nan=False))["z"] == perfect.z


def test_a_tied_cell_is_not_above_chance() -> None:
    tied = SweepCell(1, 1.0, 0.5, 0.0, 0.6, _z(0.5, 0.0, 0.6, 200), 200)
    verdicts = {g.name: g for g in gates([tied, tied], has_prediction=False)}
    assert verdicts["above_chance"].details["above_chance"] == 0


def test_saturated_sweep_has_finite_z_everywhere() -> None:
    result = scalar_sweep(eps=[256.0], ks=[5, 20], n=200, trials=50, seed=1)
    assert any(c.se == 0 for c in result.cells)
    for c in result.cells:
        assert c.z is not None and math.isfinite(c.z)


def test_tied_cells_agreeing_with_their_prediction_pass_p3() -> None:
    # all scores tied: AUC 0.5, SE 0; a prediction a hair above chance is not resolvable
    tied = SweepCell(1, 1.0, 0.5, 0.0, 0.5 + 1e-6, _z(0.5, 0.0, 0.5 + 1e-6, 100), 100)
    (p3,) = (g for g in gates([tied] * 3) if g.name == "P3")
    assert p3.details["resolvable_cells"] == 0 and p3.passed


def test_null_se_stays_positive_for_huge_trial_counts() -> None:
    assert _null_se(1.0, 10**8) > 0
    assert _z(1.0, 0.0, 1.0, 10**8) == 0.0
