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
)
app.add_typer(corpus_cmd.app, name="corpus")
run_cmd.register(app)

app.add_typer(dp_cmd.app, name="dp", help="Privacy accounting and calibration.")
app.add_typer(collusion_cmd.app, name="collusion", help="The k-account collusion attack.")
app.add_typer(audit_cmd.app, name="audit", help="The verifiable audit protocol.")
attack_cmd.register(app)
scorecard_cmd.register(app)
serve_cmd.register(app)
app.add_typer(admin_cmd.app, name="admin", help="Administer a service's state directory.")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (the script exits
    with it).

    Usage errors are click's own (usage line, message, exit code 2); a
    ``RagPrivacyError`` becomes one line on stderr and exit code 2; Ctrl-C exits with
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
    except SystemExit as exc:  # click exits with the command's code in standalone mode
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
