"""Resource guards: a job whose big knobs would not fit in memory or would run for hours
is refused before it starts, with the estimate, one line and exit code 2; ``--force``
runs it anyway."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ragprivacy._resources as resources
from ragprivacy._resources import ResourceEstimate, check_resources
from ragprivacy.cli import main
from ragprivacy.corpus import synthesis_estimate
from ragprivacy.errors import ConfigError
from ragprivacy.eval import sweep_estimate


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def test_a_billion_trial_sweep_is_refused_with_its_estimate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["collusion", "sweep", "--trials", "1000000000"]) == 2
    err = _one_line_error(capsys)
    # 15 cells x 10^9 trials: ~160 bytes and ~2 µs per trial and cell
    assert "15 cells x 1,000,000,000 trials" in err
    assert "160 GB of memory" in err and "8.33 h" in err
    assert "--trials" in err and "--force" in err


def test_a_huge_synthetic_corpus_is_refused_with_its_estimate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "k.jsonl"
    args = ["corpus", "synth", "--kind", "knowledge", "--n", "100000000", "--out", str(out)]
    assert main(args) == 2
    err = _one_line_error(capsys)
    assert "100,000,000 synthetic knowledge documents" in err and "--force" in err
    assert "600 GB" in err and "h" in err
    # forced, the knowledge kind still says how large it can be (not a traceback)
    assert main([*args, "--force"]) == 2
    err = _one_line_error(capsys)
    assert "holds at most about" in err and "n=100,000,000" in err
    assert not out.exists()


def test_a_config_with_a_huge_corpus_is_refused_before_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "big.yaml"
    config.write_text(
        "name: big\nworkers: 2\n"
        "corpora: {knowledge: {synthetic: knowledge, n: 100000000}}\n"
        "experiments:\n  - {type: qa, corpus: knowledge, systems: [rag]}\n"
    )
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 2
    err = _one_line_error(capsys)
    assert "'big'" in err and "1.2 TB of memory" in err and "--force" in err  # 2 workers
    assert not out.exists()


def test_force_runs_what_the_guard_would_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a machine where any job counts as too long: the guard refuses, --force runs it
    monkeypatch.setattr(resources, "MAX_SECONDS", 0.0)
    args = ["collusion", "sweep", "--eps", "1", "--k", "1,2", "--trials", "200", "--json"]
    assert main(args) == 2
    assert "--force" in _one_line_error(capsys)
    assert main([*args, "--force"]) == 0
    assert len(json.loads(capsys.readouterr().out)["cells"]) == 2

    out = tmp_path / "m.jsonl"
    synth = ["corpus", "synth", "--kind", "medical", "--n", "5", "--out", str(out)]
    assert main(synth) == 2 and not out.exists()
    capsys.readouterr()
    assert main([*synth, "--force"]) == 0
    assert len(out.read_text().splitlines()) == 5


def test_check_resources_refuses_on_memory_or_time_only() -> None:
    small = ResourceEstimate(memory=1e6, seconds=1.0)
    check_resources(small, what="x", knob="--n", memory_available=10**9)
    with pytest.raises(ConfigError, match=r"about 2 GB of memory \(1 GB available\)"):
        check_resources(
            ResourceEstimate(memory=2e9, seconds=1.0), what="x", knob="--n", memory_available=10**9
        )
    with pytest.raises(ConfigError, match=r"about 2 h; lower --n"):
        check_resources(
            ResourceEstimate(memory=1e6, seconds=7200.0),
            what="x",
            knob="--n",
            memory_available=10**9,
        )
    check_resources(
        ResourceEstimate(memory=2e12, seconds=1e6),
        what="x",
        knob="--n",
        force=True,
        memory_available=10**9,
    )


def test_estimates_grow_with_their_knobs() -> None:
    a = sweep_estimate(mechanism="scalar", rows=3, ks=[1, 2], n=100, trials=10**4)
    b = sweep_estimate(mechanism="scalar", rows=3, ks=[1, 2], n=100, trials=10**6)
    assert b.memory > a.memory and b.seconds == pytest.approx(100 * a.seconds)
    exact = sweep_estimate(mechanism="topk", rows=1, ks=[20], n=200, trials=2000)
    service = sweep_estimate(mechanism="topk", rows=1, ks=[20], n=200, trials=2000, mode="service")
    assert service.seconds > 50 * exact.seconds  # it sends all 2 x 2000 x 20 x 200 queries
    small, large = synthesis_estimate("medical", 10), synthesis_estimate("medical", 10**6)
    assert small is not None and large is not None and large.seconds > small.seconds
    assert synthesis_estimate("no-such-kind", 10) is None
