from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
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
    # utility and what was released sit beside every attack row, studies included
    rows = _attack_rows(report)
    assert len(rows) == 5
    for row in rows:
        assert _number(row["utility"]) > 0.0  # ROUGE-L of the benign probe
        assert re.fullmatch(r"\d\.\d{3} \(\d\.\d{3}–\d\.\d{3}\)", row["utility"].strip())
        assert _number(row["answered"]) == pytest.approx(1.0)
        assert _number(row["docs/answer"]) == pytest.approx(3.0)  # k = 3 reach the reader
    assert "no retrieval, scores" in report
    # a crash before a cell finished loses nothing else: the rerun redoes one cell
    first = sorted((tmp_path / "cells").glob("*.json"))[0]
    first.unlink()
    again = run_config(cfg, tmp_path, progress=False)
    assert json.dumps(again.results["cells"], sort_keys=True, default=str).count('"auc"') == 5


def _number(cell: str) -> float:
    """The figure of a table cell, without its interval ("0.223 (0.156–0.290)")."""
    return float(cell.strip().split(" (", 1)[0])


def _attack_rows(report: str) -> list[dict[str, str]]:
    """Every row of the report's attack tables (main and studies), by column name."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| system | attack") or line.startswith("| parameter | value"):
            header = cells
        elif header and line.startswith("|---"):
            continue
        elif header and line.startswith("|"):
            rows.append(dict(zip(header, cells)))
        else:
            header = None
    return rows


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


DP_CONFIG = {
    "name": "membership-dp-test",
    "seed": 5,
    "workers": 1,
    "corpora": {"med": {"synthetic": "medical", "n": 120}},
    "models": {"background_n": 80, "embedder": "hashing"},
    "experiments": [
        {
            "type": "membership",
            "corpus": "med",
            "k": 3,
            "attacks": ["rag-mia", "min-k"],
            "defenses": ["none", "prompt-modifying"],
            "targets": 12,
            "calibration": 4,
            "generator_options": {"compliance": 1.0},
            "system_specs": [
                "non-rag",
                {
                    "name": "rag",
                    "retriever": "noisy_topk",
                    "retriever_options": {"epsilon_acc": 2.0},
                    "budget": "target",
                    "label": "noisy",
                },
                {"name": "naive_multi", "epsilon_q": 4.0, "total_epsilon": 20.0, "k": 2},
            ],
        }
    ],
}


def test_dp_systems_report_privacy_refusals_and_progress(tmp_path: Path) -> None:
    from ragprivacy.eval.context import RunContext
    from ragprivacy.eval.experiments import create_experiment

    cfg = parse_config(DP_CONFIG)
    exp = create_experiment(cfg.experiments[0], cfg, 0)
    assert [c["system"] for c in exp.cells()][::4] == [
        "non-rag",
        "noisy",
        "naive_multi(epsilon_q=4.0,total_epsilon=20.0),k=2",
    ]
    ctx = RunContext(cfg)
    done: list[int] = []
    ctx.progress = done.append
    cell = {"system": "noisy", "attack": "rag-mia", "defense": "prompt-modifying"}
    res = exp.run_cell(cell, ctx, np.random.default_rng(0))
    assert sum(done) == exp.cell_units(cell) == 16  # targets counted within the cell
    p = res["privacy"]
    # one fresh account per target: each target's single query composes to ε_acc
    assert p["accounts"] == 16 and p["refused"] == 0
    assert p["epsilon"] == pytest.approx(2.0, rel=1e-6)
    # ... which covers the retrieval, not the generated text: no membership AUC bound
    assert p["scope"] == "retrieval" and p["auc_bound"] is None
    assert res["system"]["name"] == "prompt-modifying"

    result = run_config(cfg, tmp_path, progress=False)
    got = {(c["cell"]["system"], c["cell"]["attack"]): c["result"] for c in result.results["cells"]}
    assert got[("non-rag", "rag-mia")]["privacy"]["epsilon"] == 0.0
    # NAIVE-MULTI: ε_q = 4 per query, a total of 20 allows 5 of the 16 queries
    vote = got[("naive_multi(epsilon_q=4.0,total_epsilon=20.0),k=2", "rag-mia")]
    assert vote["privacy"]["refused"] == 16 - 5
    assert vote["privacy"]["epsilon"] == pytest.approx(20.0)
    assert vote["privacy"]["auc_bound"] == pytest.approx(1 / (1 + np.exp(-20.0)))
    skipped = got[("naive_multi(epsilon_q=4.0,total_epsilon=20.0),k=2", "min-k")]
    assert "log-probabilities" in skipped["skipped"]
    report = (tmp_path / "report.md").read_text()
    assert "ε spent" in report and "| noisy | rag-mia | none |" in report
    noisy = [line for line in report.splitlines() if line.startswith("| noisy | rag-mia |")]
    assert noisy and all("| — (retrieval ε) |" in line for line in noisy)
    rows = {(r["system"], r["attack"], r["defense"]): r for r in _attack_rows(report)}
    assert len(rows) == 12
    for key, row in rows.items():
        assert {"utility", "answered", "docs/answer", "voted tokens/answer"} <= set(row)
        if "skipped" not in row["AUC (95% CI)"]:
            assert row["utility"] != "–" and row["docs/answer"] != "–", key
    assert _number(rows[("non-rag", "rag-mia", "none")]["docs/answer"]) == 0.0
    vote = rows[("naive_multi(epsilon_q=4.0,total_epsilon=20.0),k=2", "rag-mia", "none")]
    # 11 of 16 queries refused: answered shows it; the vote's released tokens are counted
    assert _number(vote["answered"]) <= 5 / 16 + 1e-9
    assert vote["voted tokens/answer"] != "–"
    assert rows[("noisy", "rag-mia", "none")]["voted tokens/answer"] == "–"


def test_overview_matrix_spans_every_membership_experiment(tmp_path: Path) -> None:
    """The run-level matrix has one column per system and defense of every membership
    experiment, n/a where an attack was skipped, and a heatmap; a single experiment gets
    none (its own table already is the matrix)."""
    from types import SimpleNamespace

    from ragprivacy.eval.experiments._membership_report import membership_overview

    def cell(system: str, attack: str, defense: str, auc: float | None) -> dict:
        res = {"skipped": "no log-probabilities"} if auc is None else {"metrics": {"auc": auc}}
        res["privacy"] = {"epsilon": 2.0, "budget": "target", "accounts": 3}
        return {"cell": {"system": system, "attack": attack, "defense": defense}, "result": res}

    exp0 = SimpleNamespace(corpus_name="medical", index=0)
    exp1 = SimpleNamespace(corpus_name="medical", index=1)
    first = [cell("rag", "mba", "none", 0.97), cell("rag", "mba", "paraphrasing", 0.81)]
    second = [cell("dp", "mba", "none", 0.52), cell("dp", "min-k", "none", None)]
    study = cell("rag", "min-k", "none", 0.99)
    study["cell"]["study"] = 0  # parameter studies stay out of the matrix
    section = membership_overview([(exp0, [*first, study]), (exp1, second)], tmp_path)
    assert section is not None
    text = section.markdown
    assert "| attack | rag | rag + paraphrasing | dp |" in text
    assert "| mba | 0.970 | 0.810 | 0.520 |" in text
    assert "| min-k | – | – | n/a |" in text  # not run for rag; skipped for dp
    assert "| *ε spent* | 2 /target | 2 /target | 2 /target |" in text
    assert (tmp_path / section.figures[0]).stat().st_size > 1000
    assert membership_overview([(exp0, first)], tmp_path) is None
    # the same system label in two experiments keeps both columns apart
    again = [cell("rag", "mba", "none", 0.60)]
    text = membership_overview([(exp0, first), (exp1, again)], tmp_path).markdown
    assert "| attack | rag | rag + paraphrasing | rag (exp. 1) |" in text
    assert "| mba | 0.970 | 0.810 | 0.600 |" in text


def test_progress_counts_no_targets_for_cells_that_will_be_skipped() -> None:
    """Attacks that need log-probabilities are skipped on voting systems: their cells
    count no targets, so the progress bar's total is the work actually done."""
    from ragprivacy.attacks import attack_factory
    from ragprivacy.eval.experiments import create_experiment

    assert attack_factory("s2mia-sp").requires_logprobs
    assert not attack_factory("s2mia-s").requires_logprobs
    cfg = parse_config(
        {
            "name": "t",
            "corpora": {"m": {"synthetic": "medical", "n": 60}},
            "experiments": [
                {
                    "type": "membership",
                    "corpus": "m",
                    "targets": 10,
                    "calibration": 4,
                    "attacks": ["s2mia-s", "s2mia-sp", "min-k"],
                    "defenses": ["none"],
                    "system_specs": [{"name": "dp_vote", "epsilon": 10}],
                }
            ],
        }
    )
    exp = create_experiment(cfg.experiments[0], cfg, 0)
    assert [exp.cell_units(c) for c in exp.cells()] == [14, 0, 0]


def test_attack_command_targets_private_systems(tmp_path: Path) -> None:
    """``--system`` takes a name or an inline spec; a malformed one exits 2 with a line
    that shows the expected form."""
    args = ["attack", "--attack", "rag-mia", "--n", "60", "--targets", "6"]
    args += ["--calibration", "2", "--workers", "1", "--embedder", "hashing"]
    args += ["--background-n", "40", "--no-progress", "--out", str(tmp_path)]
    spec = "{name: rag, retriever: noisy_topk, retriever_options: {epsilon_acc: 2}, label: nt}"
    assert main([*args, "--system", "rag", "--system", spec]) == 0
    report = (tmp_path / "report.md").read_text()
    assert "| rag | rag-mia | none |" in report and "| nt | rag-mia | none |" in report
    assert main([*args, "--system", "{epsilon: 3}"]) == 2


def test_each_run_directory_gets_its_own_call_cache(tmp_path: Path) -> None:
    """Two runs of one config in one process write their generator calls to their own
    directories (the in-process memo must not hand the second run the first's cache)."""
    import sqlite3

    exp = {**CONFIG["experiments"][0], "attacks": ["rag-mia"], "defenses": ["none"]}
    cfg = parse_config({**CONFIG, "experiments": [{**exp, "studies": []}]})
    counts = []
    for name in ("a", "b"):
        run_config(cfg, tmp_path / name, workers=1, progress=False)
        db = sqlite3.connect(tmp_path / name / ".cache" / "generations.sqlite")
        tables = [r[0] for r in db.execute("select name from sqlite_master where type='table'")]
        counts.append(sum(db.execute(f"select count(*) from {t}").fetchone()[0] for t in tables))
        db.close()
    assert counts[0] > 0 and counts[1] == counts[0]
