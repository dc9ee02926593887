"""``benchmarks/bench_fastpaths.py``: the smoke run of the whole table (``--quick``), the
full run's plan (each script at its defaults, each accepting ``--json``), and the generic
reading of bench_retrieval's rows (a row added later still shows up)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_fastpaths.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ragprivacy_bench_fastpaths", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_full_plan_runs_each_script_at_its_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    module = _module()
    result = module.main(["--plan"])
    assert set(result["plan"]) == {"retrieval", "dp_vote", "coalition", "ledger"}
    for name, cmd in result["plan"].items():
        assert cmd[0] == sys.executable and cmd[1].endswith(module.SCRIPTS[name].file)
        assert cmd[2:4] == ["--json", cmd[3]] and cmd[3].endswith(f"{name}.json")
        helped = subprocess.run([*cmd[:2], "--help"], capture_output=True, text=True, check=True)
        assert "--json" in helped.stdout  # every script writes the JSON the table reads
    assert capsys.readouterr().out.count("--json") == 4


def test_retrieval_rows_are_read_generically() -> None:
    module = _module()
    res = {
        "machine_cpus": 2,
        "floor": [
            {"row": "exact noisy top-K, float", "n": 10**6, "baseline": "FAISS flat",
             "retrieve_ms": 130.0, "baseline_ms": 100.0, "ratio_to_faiss_flat": 1.3,
             "noise_share": 0.1},
            {"row": "exact noisy top-K, secure", "n": 10**6, "baseline": "FAISS flat",
             "retrieve_ms": 170.0, "baseline_ms": 100.0, "ratio_to_faiss_flat": 1.7,
             "noise_ms": 40.0, "noise_share": 0.25},
        ],
        "noise_first": [
            {"row": "noise-first", "n": 10**6, "baseline": "full noise",
             "noise_first_ms": 50.0, "baseline_ms": 100.0, "ratio_to_full_noise": 0.5},
        ],
    }  # fmt: skip
    rows = {r["row"]: r for r in module.retrieval_rows(res)}
    assert rows["exact noisy top-K, float, n = 1,000,000"]["met"] is True  # 1.3 ≤ 1.3
    secure = rows["exact noisy top-K, secure, n = 1,000,000"]
    assert secure["met"] is False and secure["ratio"] == 1.7
    share = rows["exact noisy top-K, secure, n = 1,000,000: noise's share of the query"]
    assert share["met"] is False and share["goal"] == "≤ 20%"
    new = rows["noise-first, n = 1,000,000"]
    assert new["ratio"] == 0.5 and new["measured"] == "50.0 ms" and new["goal"] == "—"
    assert new["baseline"] == "full noise: 100.0 ms" and new["met"] is None


def test_quick_runs_every_script_and_prints_one_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    out = tmp_path / "fastpaths.json"
    result = _module().main(["--quick", "--out-dir", str(tmp_path), "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert all(run["returncode"] == 0 for run in result["runs"].values())
    names = [r["row"] for r in result["rows"]]
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
    recall = next(r for r in result["rows"] if "pair recall" in r["row"])
    assert recall["met"] is True  # P-C: same ĉ, every linked pair found
    assert all(r["ratio"] is None or r["ratio"] > 0 for r in result["rows"])
    printed = capsys.readouterr().out
    assert printed.count("| row | measured | named baseline | ratio | goal | met? |") == 1
    lines = [line for line in printed.splitlines() if line.startswith("|")]
    assert len(lines) == len(result["rows"]) + 2  # header, rule, one line a row
    # --from makes the same table from the JSON the run kept, running nothing
    again = _module().main(["--from", str(tmp_path)])
    assert again["rows"] == json.loads(json.dumps(result["rows"]))
    with pytest.raises(SystemExit, match="does not exist"):
        _module().main(["--from", str(tmp_path / "nothing")])


def _ledger_result(writers: int, single: float, after: float) -> dict[str, object]:
    rows = [
        {"writers": w, "mode": m, "appends_per_s": a, "efficiency": 0.5,
         "vs_single_writer": a / single}
        for w in (1, writers)
        for m, a in (("before", single), ("after", after if w == writers else single))
    ]  # fmt: skip
    return {
        "store": "ledger",
        "writers": [1, writers],
        "fsync_per_s": 500.0,
        "single_writer_appends_per_s": single,
        "rows": rows,
    }


def test_group_commit_goal_is_against_the_single_writer_rate() -> None:
    module = _module()
    met = module.ledger_rows({"concurrent_ledger": _ledger_result(64, 400.0, 4400.0)})[0]
    assert met["ratio"] == 11.0 and met["met"] is True and met["goal"] == "≥ 10× at 64 writers"
    assert met["baseline"] == "one writer, one commit per append: 400/s"
    missed = module.ledger_rows({"concurrent_ledger": _ledger_result(64, 400.0, 3600.0)})[0]
    assert missed["met"] is False
    few = module.ledger_rows({"concurrent_ledger": _ledger_result(8, 400.0, 3600.0)})[0]
    assert few["met"] is None and few["goal"] == "—"  # the goal is stated at 64 writers
