from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragprivacy.errors import ConfigError
from ragprivacy.eval import parse_config, run_config

CONFIG = {
    "name": "runner-test",
    "seed": 9,
    "workers": 1,
    "corpora": {"k": {"synthetic": "knowledge", "n": 50}},
    "models": {"background_n": 40},
    "experiments": [
        {"type": "qa", "corpus": "k", "systems": ["non-rag", "rag"], "k": 3, "questions": 15}
    ],
}


def _metrics(result) -> list:
    return [c["result"]["by_hops"] for c in result.results["cells"]]


def test_pool_and_inline_runs_agree(tmp_path: Path) -> None:
    cfg = parse_config(CONFIG)
    inline = run_config(cfg, tmp_path / "a", workers=1, progress=False)
    pooled = run_config(cfg, tmp_path / "b", workers=2, progress=False)
    assert _metrics(inline) == _metrics(pooled)
    cells = inline.results["cells"]
    assert {c["cell"]["system"] for c in cells} == {"non-rag", "rag"}
    assert all(c["seed"]["entropy"] == 9 for c in cells)
    assert len({tuple(c["seed"]["spawn_key"]) for c in cells}) == 2


def test_a_lost_cell_is_recomputed_from_the_cache(tmp_path: Path) -> None:
    cfg = parse_config(CONFIG)
    first = run_config(cfg, tmp_path, workers=1, progress=False)
    files = sorted((tmp_path / "cells").glob("*.json"))
    assert len(files) == 2
    files[0].unlink()  # as if the run had crashed before this cell finished
    second = run_config(cfg, tmp_path, workers=1, progress=False)
    assert _metrics(first) == _metrics(second)
    assert (tmp_path / ".cache" / "generations.sqlite").is_file()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["settings"]["seed"] == 9


def test_unknown_experiment_option_is_refused(tmp_path: Path) -> None:
    bad = {**CONFIG, "experiments": [{"type": "qa", "corpus": "k", "questons": 5}]}
    with pytest.raises(ConfigError, match="questons"):
        run_config(parse_config(bad), tmp_path, progress=False)
    bad = {**CONFIG, "experiments": [{"type": "nope", "corpus": "k"}]}
    with pytest.raises(ConfigError, match="Unknown experiment type 'nope'"):
        run_config(parse_config(bad), tmp_path, progress=False)


def test_editing_one_experiment_keeps_the_others_finished_cells(tmp_path: Path) -> None:
    """A checkpoint is keyed by what its cell depends on: changing the second experiment,
    ``workers`` or the run's name reruns only the second experiment's cells."""
    second = {"type": "qa", "corpus": "k", "systems": ["rag"], "k": 3, "questions": 10}
    cfg = {**CONFIG, "experiments": [*CONFIG["experiments"], second]}
    run_config(parse_config(cfg), tmp_path, workers=1, progress=False)
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cells").glob("*.json")}
    assert len(before) == 3
    edited = {**second, "questions": 12}
    cfg2 = {**cfg, "name": "renamed", "workers": 2}
    cfg2["experiments"] = [CONFIG["experiments"][0], edited]
    run_config(parse_config(cfg2), tmp_path, workers=1, progress=False)
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cells").glob("*.json")}
    assert all(after[name] == t for name, t in before.items())  # none rewritten
    assert len(set(after) - set(before)) == 1  # only the edited experiment's cell ran


def test_reports_say_how_the_noise_was_drawn(tmp_path: Path) -> None:
    from ragprivacy.eval.report import noise_summary

    assert noise_summary([{"system": {"name": "rag"}}]) is None
    simulated = [{"system": {"screening": {"simulation": True}}}, {"x": [{"simulation": True}]}]
    assert (noise_summary(simulated) or "").startswith("simulated")
    assert (noise_summary([{"simulation": False}]) or "").startswith("secure")
    assert (noise_summary([{"simulation": False}, {"simulation": True}]) or "").startswith(
        "mixed — 1 of 2"
    )
    # A plain QA run uses no private mechanism: results.json says None and the report is quiet.
    run = run_config(parse_config(CONFIG), tmp_path, workers=1, progress=False)
    assert run.results["noise"] is None
    assert "- Noise:" not in (tmp_path / "report.md").read_text()
