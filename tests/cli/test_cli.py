"""End-to-end tests through the command line (in-process and as a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ragprivacy.cli import main

TINY = """
name: tiny
seed: 5
workers: 1
corpora:
  knowledge: {synthetic: knowledge, n: 60}
  medical: {synthetic: medical, n: 40}
models: {embedder: lsa, index: exact, generator: reference, background_n: 60}
experiments:
  - {type: qa, corpus: knowledge, systems: [non-rag, rag], k: 3, questions: 20, hops: [1]}
  - {type: leakage, corpus: medical, systems: [rag], k: 2, targets: 10}
"""


def run_cli(*args: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ragprivacy", *args], capture_output=True, text=True, timeout=300
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_corpus_synth_and_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "docs.jsonl"
    assert (
        main(
            ["corpus", "synth", "--kind", "medical", "--n", "25", "--seed", "7", "--out", str(out)]
        )
        == 0
    )
    lines = out.read_text().splitlines()
    assert len(lines) == 25 and json.loads(lines[0])["id"]
    capsys.readouterr()
    assert main(["corpus", "info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["documents"] == 25 and info["pii"]


def test_same_seed_same_file(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for p in (a, b):
        main(
            ["corpus", "synth", "--kind", "knowledge", "--n", "20", "--seed", "3", "--out", str(p)]
        )
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["corpus", "synth", "--kind", "nope", "--n", "5", "--out", "x.jsonl"], "Unknown"),
        (["corpus", "synth", "--kind", "medical", "--n", "0", "--out", "x.jsonl"], "'n'"),
        (["corpus", "info", "missing.jsonl"], "missing.jsonl"),
        (["run", "missing.yaml"], "does not exist"),
    ],
)
def test_bad_input_gives_one_line_and_exit_2(
    args: list[str],
    needle: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert err.strip().count("\n") == 0


def test_empty_corpus_and_unknown_backend(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["corpus", "info", str(empty)]) == 2
    assert "no documents" in capsys.readouterr().err
    cfg = tmp_path / "c.yaml"
    cfg.write_text(TINY.replace("embedder: lsa", "embedder: nosuch"))
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Unknown embedder 'nosuch'" in err and "lsa" in err


def test_run_config_end_to_end_subprocess(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY)
    out = tmp_path / "out"
    code, _stdout, stderr = run_cli("run", str(cfg), "--out", str(out), "--no-progress")
    assert code == 0, stderr
    results = json.loads((out / "results.json").read_text())
    assert results["root_seed"] == 5 and results["versions"]["numpy"]
    assert len(results["cells"]) == 3
    report = (out / "report.md").read_text()
    assert "reference reader" in report and "QA utility" in report
    assert list(out.glob("*.png"))
    rag = next(c for c in results["cells"] if c["type"] == "qa" and c["cell"]["system"] == "rag")
    non = next(
        c for c in results["cells"] if c["type"] == "qa" and c["cell"]["system"] == "non-rag"
    )
    assert (
        rag["result"]["by_hops"]["1"]["match_accuracy"]
        > non["result"]["by_hops"]["1"]["match_accuracy"]
    )
    # a rerun reuses the checkpointed cells and gives identical metrics
    code, _, stderr = run_cli("run", str(cfg), "--out", str(out), "--no-progress")
    assert code == 0, stderr
    again = json.loads((out / "results.json").read_text())
    assert [c["result"] for c in again["cells"]] == [c["result"] for c in results["cells"]]


def test_dataset_load_from_local_file_and_unavailable_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "hcm.json"
    src.write_text(
        json.dumps(
            [
                {"instruction": "x", "input": "I have a cough.", "output": "Rest and fluids."},
                {"instruction": "x", "input": "My knee hurts.", "output": "Ice it."},
            ]
        )
    )
    out = tmp_path / "hcm.jsonl"
    args = ["corpus", "load", "--dataset", "healthcaremagic", "--path", str(src)]
    assert main([*args, "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "empty-hf" / "datasets"))
    capsys.readouterr()
    code = main(["corpus", "load", "--dataset", "healthcaremagic", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "offline" in err and "Traceback" not in err


def test_usage_errors_exit_2_without_traceback() -> None:
    code, _, err = run_cli("corpus", "synth", "--kind", "medical")
    assert code == 2 and "--out" in err and "Traceback" not in err
    code, out, _ = run_cli("--help")
    assert code == 0 and "corpus" in out


def test_ctrl_c_exits_130_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ragprivacy.corpus

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(ragprivacy.corpus, "load_corpus", interrupted)
    assert main(["corpus", "info", str(tmp_path / "docs.jsonl")]) == 130
    assert "Traceback" not in capsys.readouterr().err


def test_corpus_synth_to_an_unwritable_output_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cases = {
        str(tmp_path): "is a directory",
        str(blocker / "out.jsonl"): "is a file, not a directory",
        "/proc/no-such-dir/out.jsonl": "Cannot write",
    }
    for out, message in cases.items():
        capsys.readouterr()
        assert main(["corpus", "synth", "--kind", "medical", "--n", "3", "--out", out]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
