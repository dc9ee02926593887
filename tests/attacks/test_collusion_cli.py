"""``ragprivacy collusion sweep`` and ``ragprivacy audit commit|verify|report``."""

from __future__ import annotations

import json

from ragprivacy.cli import main


def test_collusion_sweep_json(tmp_path, capsys) -> None:
    code = main(
        [
            "collusion",
            "sweep",
            "--mechanism",
            "scalar",
            "--eps",
            "2,4",
            "--k",
            "1,5,20",
            "--n",
            "10000",
            "--trials",
            "4000",
            "--seed",
            "1",
            "--out",
            str(tmp_path),
            "--json",
        ]
    )
    assert code == 0
    record = json.loads(capsys.readouterr().out)
    assert len(record["cells"]) == 6
    for cell in record["cells"]:
        assert {"k", "eps_acc", "auc", "se", "predicted", "z"} <= set(cell)
    assert {"P1", "P3"} <= set(record["gates"])
    assert (tmp_path / "collusion_scalar.png").stat().st_size > 1000


def test_collusion_sweep_topk_table(capsys) -> None:
    code = main(
        [
            "collusion",
            "sweep",
            "--mechanism",
            "topk",
            "--eps",
            "16",
            "--k",
            "1,20",
            "--n",
            "200",
            "--trials",
            "500",
        ]
    )
    assert code == 0
    assert "gate P1" in capsys.readouterr().out


def test_audit_commit_verify_report(tmp_path, capsys) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    assert main(["audit", "commit", "--out", str(good)]) == 0
    assert main(["audit", "verify", "--dir", str(good), "--json"]) == 0
    out = capsys.readouterr().out
    verdict = json.loads(out[out.index("{") :])
    assert verdict["verdict"] == "PASS" and verdict["epsilon_audit"] > 0
    assert main(["audit", "commit", "--out", str(bad), "--tamper", "wrong-seed"]) == 0
    assert main(["audit", "verify", "--dir", str(bad)]) == 1
    assert "claim A2" in capsys.readouterr().out
    report = tmp_path / "report.md"
    assert main(["audit", "report", "--dir", str(good), "--out", str(report)]) == 0
    assert "PASS" in report.read_text()
    assert main(["audit", "verify", "--dir", str(tmp_path / "missing")]) == 2


def test_audit_commit_changed_record_in_place(tmp_path, capsys) -> None:
    out = tmp_path / "in-place"
    args = ["audit", "commit", "--out", str(out), "--tamper", "changed-record-in-place"]
    assert main(args) == 0
    assert main(["audit", "verify", "--dir", str(out), "--json"]) == 1
    text = capsys.readouterr().out
    assert json.loads(text[text.index("{") :])["failed_check"] == "ledger_integrity"
    assert main(["audit", "commit", "--out", str(out), "--tamper", "in-place"]) == 2
    assert "changed-record-in-place" in capsys.readouterr().err
