"""The root ``ragprivacy`` command: sub-commands, and the one place errors become exit
codes (a ``RagPrivacyError`` prints one line on stderr and exits 2; no traceback)."""

from __future__ import annotations

import typer

from ragprivacy.cli import (
    admin_cmd,
    attack_cmd,
    audit_cmd,
    collusion_cmd,
    corpus_cmd,
    dp_cmd,
    gate_cmd,
    run_cmd,
    scorecard_cmd,
    serve_cmd,
)
from ragprivacy.errors import RagPrivacyError, RunInterruptedError

__all__ = ["app", "main"]

app = typer.Typer(
    name="ragprivacy",
    help="Protect, attack and audit the privacy of retrieval-augmented generation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every sub-command too
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"ragprivacy {version('ragprivacy')}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Protect, attack and audit the privacy of retrieval-augmented generation."""


app.add_typer(corpus_cmd.app, name="corpus")
run_cmd.register(app)

app.add_typer(dp_cmd.app, name="dp", help="Privacy accounting and calibration.")
app.add_typer(collusion_cmd.app, name="collusion", help="The k-account collusion attack.")
app.add_typer(audit_cmd.app, name="audit", help="The verifiable audit protocol.")
attack_cmd.register(app)
scorecard_cmd.register(app)
gate_cmd.register(app)
serve_cmd.register(app)
app.add_typer(admin_cmd.app, name="admin", help="Administer a service's state directory.")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (the script exits
    with it).

    Usage errors are click's own (usage line, message, exit code 2); a
    ``RagPrivacyError``, or an ``OSError`` on a path the user gave, becomes one line on
    stderr and exit code 2; Ctrl-C exits with
    130, which typer's standalone mode raises as ``SystemExit``. A run stopped by
    Ctrl-C or SIGTERM (``RunInterruptedError``) prints one line saying what was kept
    and how to resume, and exits with 130 or 143.
    """
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="ragprivacy", standalone_mode=True)
    except RunInterruptedError as exc:
        typer.secho(f"stopped: {exc}", err=True, fg=typer.colors.YELLOW)
        return exc.exit_code
    except RagPrivacyError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        return 2
    except OSError as exc:  # a path the user gave that the system refuses: one line too
        where = f": {exc.filename}" if exc.filename else ""
        typer.secho(f"error: {exc.strerror or exc}{where}", err=True, fg=typer.colors.RED)
        return 2
    except SystemExit as exc:  # click exits with the command's code in standalone mode
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
