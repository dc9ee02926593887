"""``ragprivacy gate RUN``: fail a build when a run's leakage passes a threshold or regresses
against a baseline run (:mod:`ragprivacy.eval.gate`). Exit 0 pass, 1 fail, 2 usage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

__all__ = ["register"]


def _results(path: Path, what: str) -> dict[str, Any]:
    """``results.json`` of a run directory, or the file itself."""
    from ragprivacy.errors import ConfigError

    file = path / "results.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"{what} {file}: no such file (give a run directory or its results.json)."
        ) from None
    except OSError as exc:
        raise ConfigError(f"{what} {file}: {exc.strerror or exc}.") from None
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"{what} {file}: not a run's results.json (not JSON).") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {file}: not a run's results.json.")
    return data


def gate(
    run: Path = typer.Argument(..., help="A run directory (or its results.json)."),
    max_auc: float | None = typer.Option(
        None, "--max-auc", help="Fail when an attack's AUC interval lies above this."
    ),
    max_tpr: float | None = typer.Option(
        None, "--max-tpr", help="Fail when a TPR at 1 % FPR interval lies above this."
    ),
    max_extraction: float | None = typer.Option(
        None, "--max-extraction", help="Fail when an extraction rate's interval lies above this."
    ),
    baseline: Path | None = typer.Option(
        None, "--baseline", help="A baseline run: fail on a figure worse beyond both intervals."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the checks as JSON here."),
    junit_out: Path | None = typer.Option(None, "--junit", help="Write a JUnit report here."),
) -> None:
    """Gate a change on privacy: thresholds per figure and a baseline diff (exit 1 on a
    failure, with the rows and their intervals)."""
    from ragprivacy.eval import failed_lines, run_gate

    result = run_gate(
        _results(run, "run"),
        max_auc=max_auc,
        max_tpr=max_tpr,
        max_extraction=max_extraction,
        baseline=None if baseline is None else _results(baseline, "baseline"),
    )
    if json_out is not None:
        json_out.write_text(json.dumps(result.to_dict(), indent=1), encoding="utf-8")
    if junit_out is not None:
        junit_out.write_text(result.junit(), encoding="utf-8")
    new = sum(c.status == "new" for c in result.checks)
    summary = f"{len(result.checks)} checks, {len(result.failed)} failed" + (
        f", {new} new (not in the baseline)" if new else ""
    )
    if result.passed:
        typer.echo(f"PASS  {summary}")
        return
    for line in failed_lines(result):
        typer.echo(line)
    typer.echo(f"FAIL  {summary}")
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("gate")(gate)
