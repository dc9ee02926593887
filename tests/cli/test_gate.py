"""``ragprivacy gate``: thresholds and a baseline diff over a run's results, through the
CLI, with the exit codes CI reads (0 pass, 1 fail, 2 usage) and its JSON and JUnit
reports. The results are hand-made in the shape a run writes, so each rule is checked
against a known answer."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from ragprivacy.cli import main


def _membership(
    system: str, auc: tuple[float, float, float], tpr: float | None = None
) -> dict[str, Any]:
    value, low, high = auc
    return {
        "type": "membership",
        "cell": {"system": system, "attack": "mba", "defense": "none"},
        "result": {
            "metrics": {
                "auc": value, "auc_low": low, "auc_high": high,
                "n_members": 200, "n_non_members": 200, "tpr_at_1pct_fpr": tpr,
            }
        },
    }  # fmt: skip


def _extraction(system: str, leaked: int, total: int) -> dict[str, Any]:
    return {
        "type": "extraction",
        "cell": {"system": system, "defense": "none", "mode": "targeted"},
        "result": {"metrics": {"items": total, "leaked": leaked}},
    }


def _run(tmp_path: Path, name: str, cells: list[dict[str, Any]]) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "results.json").write_text(json.dumps({"cells": cells}))
    return d


def test_a_figure_whose_interval_reaches_the_limit_passes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    run = _run(tmp_path, "r", [_membership("dp", (0.52, 0.40, 0.64))])
    assert main(["gate", str(run), "--max-auc", "0.6"]) == 0
    assert capsys.readouterr().out.startswith("PASS  1 checks, 0 failed")


def test_a_leak_above_a_threshold_fails_with_its_interval_and_reports(
    tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    run = _run(tmp_path, "r", [_membership("rag", (0.95, 0.90, 1.0), tpr=0.4),
                               _extraction("rag", 27, 30)])  # fmt: skip
    args = ["gate", str(run), "--max-auc", "0.6", "--max-tpr", "0.1", "--max-extraction", "0.5",
            "--json", str(tmp_path / "g.json"), "--junit", str(tmp_path / "g.xml")]  # fmt: skip
    assert main(args) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL rag / mba / auc (threshold): auc 0.950 (0.900–1.000) lies above the limit 0.6" in out
    )
    assert "tpr_at_1pct_fpr 0.400" in out and "extraction_rate 0.900" in out
    report = json.loads((tmp_path / "g.json").read_text())
    assert report["passed"] is False and report["failed"] == 3
    suite = ET.parse(tmp_path / "g.xml").getroot()
    assert suite.get("tests") == "3" and suite.get("failures") == "3"
    assert len(suite.findall("testcase/failure")) == 3


def test_a_regression_is_beyond_both_intervals_and_a_new_figure_is_not_one(
    tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    base = _run(tmp_path, "base", [_membership("dp", (0.55, 0.45, 0.65))])
    within = _run(tmp_path, "within", [_membership("dp", (0.62, 0.52, 0.72)),
                                       _membership("other", (0.9, 0.8, 1.0))])  # fmt: skip
    assert main(["gate", str(within), "--baseline", str(base)]) == 0
    assert "1 new (not in the baseline)" in capsys.readouterr().out
    worse = _run(tmp_path, "worse", [_membership("dp", (0.9, 0.8, 1.0))])
    assert main(["gate", str(worse / "results.json"), "--baseline", str(base)]) == 1
    assert "worse beyond both intervals" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-auc", "0.6"], "no such file"),
        (["--max-auc", "1.5"], "--max-auc must be in [0, 1]"),
        ([], "Nothing to check"),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    tmp_path: Path, capsys, args: list[str], message: str
) -> None:  # type: ignore[no-untyped-def]
    run = _run(tmp_path, "r", [_membership("dp", (0.5, 0.4, 0.6))])
    target = str(tmp_path / "missing") if message == "no such file" else str(run)
    assert main(["gate", target, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
