"""The verifier's four outcomes and the exit codes a script sees (issue: verdicts a script
can use). Without the auditor package an honest window is INCOMPLETE — its public checks
hold, re-execution was not possible — never FAIL and never PASS; a cheat that the public
checks see still FAILs without it."""

from __future__ import annotations

import json
import shutil

import pytest

from ragprivacy.audit import OUTCOMES, Verifier, save_window
from ragprivacy.audit.demo import demo_window
from ragprivacy.cli import main
from ragprivacy.cli.audit_cmd import VERIFY_EXIT


def test_outcomes_have_distinct_exit_codes_apart_from_usage_errors() -> None:
    assert set(VERIFY_EXIT) == set(OUTCOMES)
    failing = {VERIFY_EXIT["FAIL"], VERIFY_EXIT["INCOMPLETE"]}
    assert len(failing) == 2 and 0 not in failing and 2 not in failing  # 2: usage errors
    assert VERIFY_EXIT["PASS"] == 0


def test_an_honest_window_without_its_package_is_incomplete_not_fail() -> None:
    w = demo_window(seed=3)
    without = Verifier().verify(w.transcript, w.receipts, None)
    assert without.outcome == "INCOMPLETE" and without.incomplete
    assert not without.passed and without.failures == () and without.epsilon_audit is None
    assert without.records_checked == 0 and "per_record" in without.skipped
    with_package = Verifier().verify(w.transcript, w.receipts, w.package)
    assert with_package.outcome == "PASS" and with_package.skipped == ()


@pytest.mark.parametrize(
    ("tamper", "without_package"),
    [
        ("changed-record", "FAIL"),  # the ledger contradicts the signed head: public
        ("over-rate", "FAIL"),  # more than r records: public
        ("wrong-seed", "INCOMPLETE"),  # only re-execution sees the noise
    ],
)
def test_a_cheat_fails_with_the_package_and_without_it_as_far_as_public_checks_see(
    tamper: str, without_package: str
) -> None:
    w = demo_window(seed=3, tamper=tamper)
    assert Verifier().verify(w.transcript, w.receipts, w.package).outcome == "FAIL"
    assert Verifier().verify(w.transcript, w.receipts, None).outcome == without_package


def test_the_cli_exits_0_1_3_and_2(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    good, bad = tmp_path / "good", tmp_path / "bad"
    assert main(["audit", "commit", "--out", str(good), "--seed", "4"]) == 0
    assert main(["audit", "commit", "--out", str(bad), "--tamper", "wrong-seed"]) == 0
    assert main(["audit", "verify", "--dir", str(good)]) == 0
    assert main(["audit", "verify", "--dir", str(bad)]) == 1
    bare = tmp_path / "bare"  # what an outsider has: no auditor.json
    shutil.copytree(good, bare)
    (bare / "auditor.json").unlink()
    capsys.readouterr()
    assert main(["audit", "verify", "--dir", str(bare), "--json"]) == 3
    record = json.loads(capsys.readouterr().out)
    assert record["verdict"] == "INCOMPLETE" and record["failures"] == []
    assert main(["audit", "verify", "--dir", str(tmp_path / "missing")]) == 2
    assert main(["audit", "verify", "--dir", str(good), "--mode", "nope"]) == 2


def test_saved_windows_round_trip_the_verdict(tmp_path) -> None:  # type: ignore[no-untyped-def]
    w = demo_window(seed=5)
    save_window(tmp_path, w.transcript, w.receipts, None)
    from ragprivacy.audit import load_window

    transcript, receipts, package = load_window(tmp_path)
    assert package is None
    assert Verifier().verify(transcript, receipts, package).outcome == "INCOMPLETE"
