"""The root ``ragprivacy`` command: sub-commands, and the one place errors become exit
codes (a ``RagPrivacyError`` prints one line on stderr and exits 2; no traceback)."""

from __future__ import annotations

import click
import typer

from ragprivacy.cli import corpus_cmd, run_cmd
from ragprivacy.errors import RagPrivacyError

__all__ = ["app", "main"]

app = typer.Typer(
    name="ragprivacy",
    help="Protect, attack and audit the privacy of retrieval-augmented generation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(corpus_cmd.app, name="corpus")
run_cmd.register(app)

try:  # the DP commands live in their own module
    from ragprivacy.cli import dp_cmd

    app.add_typer(dp_cmd.app, name="dp", help="Privacy accounting and calibration.")
except ImportError:  # pragma: no cover - while the module is absent
    pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (the script exits
    with it)."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="ragprivacy", standalone_mode=False)
    except RagPrivacyError as exc:
        typer.secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        return 2
    except click.exceptions.Abort:
        typer.secho("Aborted.", err=True)
        return 130
    except click.exceptions.ClickException as exc:
        exc.show()
        return int(exc.exit_code or 0)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code or 0)
    except KeyboardInterrupt:
        return 130
    return 0
