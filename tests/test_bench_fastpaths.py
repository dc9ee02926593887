"""``benchmarks/bench_fastpaths.py``: the smoke run of the whole table (``--quick``), the
full run's plan (each script at its defaults, each accepting ``--json``), the table read
from the scripts' rows by field (a row added later still shows up), and the goals the
scripts set on their rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tests._bench import check_rows, harness, load_bench, run_quick


def test_full_plan_runs_each_script_at_its_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    module = load_bench("fastpaths")
    result = module.main(["--plan"])
    assert set(result["plan"]) == {"retrieval", "dp_vote", "coalition", "ledger"}
    for name, cmd in result["plan"].items():
        assert cmd[0] == sys.executable and cmd[1].endswith(module.SCRIPTS[name].file)
        assert cmd[2:] == ["--json", cmd[3]] and cmd[3].endswith(f"{name}.json")
    assert capsys.readouterr().out.count("--json") == 4
    # every script has --json, --quick and --repeats: tests/test_bench_harness.py
    plan = module.main(["--plan", "--quick", "--repeats", "2", "--only", "ledger"])["plan"]
    assert plan["ledger"][4:] == ["--quick", "--repeats", "2"]


def _row(name: str, measured: float, baseline: float, **kw: Any) -> harness.Row:
    return harness.Row(
        name=name, measured=measured, unit="ms", baseline="base", baseline_measured=baseline, **kw
    )


def test_rows_are_read_by_field(tmp_path: Path) -> None:
    """Every retrieval row (whatever it is), the batched vote, the ivf rows, and group
    commit at the most writers of each store; goals and ratios as the scripts set them."""
    session = harness.start("demo", harness.bench_parser("demo", repeats=1), [])
    machine = session.machine()
    files = {
        "retrieval": [
            _row("exact noisy top-K, float", 130.0, 100.0, goal="≤ 1.3×", met=True),
            _row("a row added later", 50.0, 100.0),
        ],
        "dp_vote": [
            _row("vote", 9.0, 3.0, config={"path": "batched"}, goal="≤ 3×", met=True),
            _row("vote, unbatched", 90.0, 3.0, config={"path": "unbatched"}),
        ],
        "coalition": [
            _row("ivf", 1.0, 2.0, config={"search": "ivf"}),
            _row("exact", 2.0, 4.0, config={"search": "exact"}),
        ],
        "ledger": [
            _row(f"{mode} {s} {w}", 1.0, 1.0, config={"store": s, "writers": w, "mode": mode})
            for s, most in (("ledger", 64), ("budget", 8))
            for w in sorted({1, 8, most})
            for mode in ("before", "after")
        ],
    }
    for name, rows in files.items():
        harness.write_results(
            tmp_path / f"{name}.json", harness.results_document(name, machine, rows)
        )
    out = load_bench("fastpaths").main(["--from", str(tmp_path)])
    names = [r["name"] for r in out["rows"]]
    assert names == [
        "exact noisy top-K, float",
        "a row added later",
        "vote",
        "ivf",
        "after ledger 64",
        "after budget 8",
    ]
    first = harness.Row.from_dict(out["rows"][0])
    assert first.ratio == 1.3 and first.met is True and first.goal == "≤ 1.3×"


def test_quick_runs_every_script_and_prints_one_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    res = run_quick("fastpaths", tmp_path, "--out-dir", str(tmp_path))
    result = res.details
    assert all(run["returncode"] == 0 for run in result["runs"].values())
    names = [r.name for r in res.rows]
    for start in (
        "exact noisy top-K, float",
        "exact noisy top-K, secure",
        "lazy noise-then-select, fallback",
        "lazy retriever, fallback remembered",
        "DP voting per token, hf-tiny-random reader",
        "coalition ĉ, 10,000 × 64, ivf, nprobe 32: time",
        "coalition ĉ, 10,000 × 64, ivf, nprobe 32: ĉ and pair recall at θ*",
        "group commit, ledger store, 8 writers",
        "group commit, budget store, 8 writers",
    ):
        assert any(n.startswith(start) for n in names), start
    recall = next(r for r in res.rows if "pair recall" in r.name)
    assert recall.met is True  # P-C: same ĉ, every linked pair found
    assert all(r.ratio > 0 for r in res.rows)
    printed = capsys.readouterr().out
    assert printed.count("| row | measured | named baseline | ratio | goal | met? |") == 1
    lines = [line for line in printed.splitlines() if line.startswith("|")]
    assert len(lines) == len(res.rows) + 2  # header, rule, one line a row
    for name, run in result["runs"].items():  # each script's own results file, checked
        assert "--quick" in run["command"]
        check_rows(harness.load_results(tmp_path / f"{name}.json").rows)
    # --from makes the same table from the JSON the run kept, running nothing
    again = load_bench("fastpaths").main(["--from", str(tmp_path)])
    assert again["rows"] == json.loads((tmp_path / "fastpaths.json").read_text())["rows"]
    with pytest.raises(SystemExit, match="does not exist"):
        load_bench("fastpaths").main(["--from", str(tmp_path / "nothing")])


def test_the_scripts_set_the_goals() -> None:
    retrieval = load_bench("retrieval")
    common = {"n": 10**6, "sigma": 3584.0, "baseline": "FAISS flat", "baseline_ms": 100.0}
    res = {
        "floor": [
            {"row": "exact noisy top-K, float", **common, "retrieve_ms": 130.0, "noise_ms": 13.0},
            {"row": "exact noisy top-K, secure", **common, "retrieve_ms": 170.0, "noise_ms": 42.5},
            {"row": "gathered scores of a fraction f against one scan", "n": 10**6},
        ]
    }
    rows = {r.name: r for r in retrieval.rows(res)}
    assert set(rows) == {
        "exact noisy top-K, float, n = 1,000,000",
        "exact noisy top-K, secure, n = 1,000,000",
        "exact noisy top-K, secure, n = 1,000,000: noise's share of the query",
    }
    assert rows["exact noisy top-K, float, n = 1,000,000"].met is True  # 1.3 ≤ 1.3
    secure = rows["exact noisy top-K, secure, n = 1,000,000"]
    assert secure.met is False and secure.ratio == 1.7 and secure.goal == "≤ 1.6×"
    share = rows["exact noisy top-K, secure, n = 1,000,000: noise's share of the query"]
    assert share.met is False and share.goal == "≤ 20%" and share.ratio == 0.25

    ledger = load_bench("ledger")
    met = _ledger(ledger, 64, 400.0, 4400.0)
    assert met.ratio == 11.0 and met.met is True and met.goal == "≥ 10× at 64 writers"
    assert met.baseline == "one writer, one commit per append" and met.baseline_measured == 400
    assert _ledger(ledger, 64, 400.0, 3600.0).met is False
    few = _ledger(ledger, 8, 400.0, 3600.0)
    assert few.met is None and few.goal is None  # the goal is stated at 64 writers


def _ledger(module: Any, writers: int, single: float, after: float) -> harness.Row:
    """The group-commit row at ``writers`` of a made-up concurrent run."""
    rows = [
        {"writers": w, "mode": m, "appends_per_s": a, "appends_per_commit": 1.0,
         "efficiency": 0.5}
        for w in (1, writers)
        for m, a in (("before", single), ("after", after if w == writers else single))
    ]  # fmt: skip
    conc = {"store": "ledger", "writers": [1, writers], "rounds": 1, "fsync_per_s": 500.0,
            "single_writer_appends_per_s": single, "rows": rows}  # fmt: skip
    out = module.group_commit_rows(conc)
    return next(r for r in out if r.config["mode"] == "after" and r.config["writers"] == writers)
