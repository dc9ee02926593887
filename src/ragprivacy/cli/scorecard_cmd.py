"""``ragprivacy scorecard``: every attack against the undefended system and each defense
on the user's documents (or a synthetic corpus), as one web page.

``ragprivacy scorecard --out DIR [--corpus FILE|KIND] [--epsilon 1,10]`` runs the
scorecard's experiments (:mod:`ragprivacy.eval.scorecard.plan`) into ``DIR`` (its
``results.json``, ``report.md``, checkpoints and call cache: Ctrl-C keeps finished
cells, and the same command resumes) and writes ``DIR/index.html``, which opens from
disk with no network. ``--target openai:MODEL@URL --corpus FILE --members FILE`` scores
a RAG endpoint we do not run instead.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import typer

__all__ = ["demo_scorecard", "register", "run_scorecard"]

#: The demo's scorecard: its medical corpus (2,000 records, the same as the demo
#: config's), the attacks that take seconds (interrogation's many questions per target
#: against a fresh DP system per target take minutes), both default budgets.
DEMO_SCORECARD: dict[str, Any] = {
    "corpus": "medical",
    "n": 2000,
    "attacks": ("mba", "rag-mia", "min-k"),
}


def _floats(values: list[str], option: str) -> tuple[float, ...]:
    from ragprivacy.cli._parsing import split_names
    from ragprivacy.errors import ConfigError

    out = []
    for v in split_names(values, option):
        try:
            out.append(float(v))
        except ValueError:
            raise ConfigError(f"{option} takes numbers (e.g. {option} 1,10); got {v!r}.") from None
    return tuple(out)


def run_scorecard(
    out: Path,
    *,
    progress: bool = True,
    reproduce: str | None = None,
    **options: Any,
) -> Path:
    """Run the scorecard of ``options`` (:func:`~ragprivacy.eval.scorecard_config`'s
    keywords) into ``out`` and write ``out/index.html``; returns its path."""
    from ragprivacy.errors import RunInterruptedError
    from ragprivacy.eval import run_config, scorecard_config, write_scorecard

    config = scorecard_config(**options)
    shown = reproduce or "ragprivacy scorecard"
    try:
        result = run_config(config, out, progress=progress, config_path=shown)
    except RunInterruptedError as exc:
        raise exc.with_resume(shown) from None
    return write_scorecard(result.results, out, reproduce=shown)


def _command(out: Path, options: dict[str, Any]) -> str:
    """The ``ragprivacy scorecard`` command line that reruns (or resumes) ``options``."""
    argv = ["ragprivacy", "scorecard", "--out", str(out)]
    flags = {"corpus": "--corpus", "n": "--n", "targets": "--targets", "items": "--items"}
    flags |= {"seed": "--seed", "workers": "--workers", "generator": "--generator"}
    flags |= {"target": "--target", "members": "--members", "requests_per_second": "--rate"}
    flags |= {"price": "--price"}
    for key, flag in flags.items():
        if options.get(key) is not None:
            argv += [flag, str(options[key])]
    argv += ["--attack", ",".join(options["attacks"])]
    argv += ["--epsilon", ",".join(f"{e:g}" for e in options["epsilons"])]
    return shlex.join(argv)


def demo_scorecard(out: Path, *, workers: int = 2, progress: bool = True) -> Path:
    """The scorecard ``ragprivacy demo`` ends with (:data:`DEMO_SCORECARD`)."""
    from ragprivacy.eval import SCORECARD_EPSILONS

    options = {**DEMO_SCORECARD, "workers": workers, "epsilons": SCORECARD_EPSILONS}
    return run_scorecard(out, progress=progress, reproduce=_command(out, options), **options)


def _verdict(out: Path) -> str:
    """The page's verdict as plain text, for the terminal."""
    import json

    from ragprivacy.eval import summarize

    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    return "Verdict: " + summarize(results).verdict().replace("`", "")


def register(app: typer.Typer) -> None:
    """Add ``scorecard`` to the root command."""

    @app.command("scorecard")
    def scorecard(
        out: Path = typer.Option(Path("scorecard"), "--out", help="Output directory."),
        corpus: str = typer.Option(
            "medical", "--corpus", help="A synthetic kind or a JSONL/CSV file (id, text)."
        ),
        n: int = typer.Option(1000, "--n", help="Synthetic corpus size."),
        attack: list[str] = typer.Option(
            [],
            "--attack",
            help="Membership attacks (default: mba, rag-mia, min-k, interrogation, dcmi).",
        ),
        epsilon: list[str] = typer.Option(
            [], "--epsilon", help="Budgets of the DP defenses (default: 1,10)."
        ),
        targets: int = typer.Option(100, "--targets", help="Evaluation targets (half members)."),
        items: int = typer.Option(
            100, "--items", help="Extraction: PII items, and as many untargeted prompts."
        ),
        seed: int = typer.Option(7, "--seed", help="Root seed."),
        workers: int = typer.Option(2, "--workers", help="Processes."),
        generator: str = typer.Option(
            "reference",
            "--generator",
            help="Reader: reference, smollm2, openai:MODEL@URL, hf:PATH or gguf:PATH.",
        ),
        target: str | None = typer.Option(
            None,
            "--target",
            help="Score a RAG endpoint we do not run: openai:MODEL@http://HOST:PORT/v1 "
            "(with --corpus FILE and --members FILE).",
        ),
        members: str | None = typer.Option(
            None, "--members", help="With --target: file of the member ids, one per line."
        ),
        rate: float | None = typer.Option(
            None, "--rate", help="With --target: at most this many requests per second."
        ),
        price: str | None = typer.Option(
            None,
            "--price",
            help="With --target: PROMPT_USD,COMPLETION_USD per million tokens (the cost shown).",
        ),
        progress: bool = typer.Option(True, "--progress/--no-progress"),
    ) -> None:
        """Attacks × defenses on one corpus, as a self-contained web page (index.html)."""
        from ragprivacy.cli._parsing import split_names
        from ragprivacy.errors import ConfigError
        from ragprivacy.eval import SCORECARD_ATTACKS, SCORECARD_EPSILONS

        if workers < 1:
            raise ConfigError(f"The '--workers' option must be >= 1; got {workers}.")
        options: dict[str, Any] = {
            "corpus": corpus,
            "n": n,
            "attacks": tuple(split_names(attack, "--attack")) if attack else SCORECARD_ATTACKS,
            "epsilons": _floats(epsilon, "--epsilon") if epsilon else SCORECARD_EPSILONS,
            "targets": targets,
            "items": items,
            "prompts": items,
            "seed": seed,
            "workers": workers,
            "generator": generator,
            "target": target,
            "members": members,
            "requests_per_second": rate,
            "price": price,
        }
        path = run_scorecard(out, progress=progress, reproduce=_command(out, options), **options)
        typer.echo(_verdict(out))
        typer.echo(f"scorecard: {path.resolve()}")
