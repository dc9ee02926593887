"""``ragprivacy dp``: collusion accounting, audit ε, MIA predictions (collusion paper §3, §5.5).

Every command prints a rich table, or JSON on stdout with ``--json``. Invalid input raises
``ConfigError`` (the root command turns it into one line on stderr and exit code 2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from ragprivacy.cli._parsing import parse_list

__all__ = ["app"]

app = typer.Typer(
    help="Privacy accounting under account collusion, audit epsilon and MIA predictions.",
    no_args_is_help=True,
)

_DELTA_ACC = typer.Option(1e-6, "--delta-acc", help="Per-account delta, in (0, 1).")
_EPS_ACC = typer.Option(1.0, "--eps-acc", help="Per-account epsilon.")
_N = typer.Option(10_000, "--n", help="Queries per account in the audit window.")
_JSON = typer.Option(False, "--json", help="Print JSON to stdout instead of a table.")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "-" if value is None else str(value)


def _emit(record: Mapping[str, Any], title: str, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(dict(record), indent=2))
        return
    at_delta: Mapping[str, float] = record.get("at_delta") or {}
    table = Table(title=title)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    if at_delta:
        table.add_column("at δ", justify="right")
    for key, value in record.items():
        if key == "at_delta":
            continue
        row = [key, _fmt(value)]
        if at_delta:
            row.append(_fmt(at_delta[key]) if key in at_delta and value is not None else "")
        table.add_row(*row)
    Console().print(table)


def _methods(method: str) -> Sequence[str]:
    return [m.strip() for m in method.split(",") if m.strip()]


@app.command("collusion")
def collusion(
    eps_acc: float = _EPS_ACC,
    delta_acc: float = _DELTA_ACC,
    k: int = typer.Option(10, "--k", help="Coalition size (accounts)."),
    n: int = _N,
    delta: float | None = typer.Option(
        None, "--delta", help="Composition slack delta >= delta_acc (default: delta_acc)."
    ),
    method: str = typer.Option(
        "advanced,rdp,exact",
        "--method",
        help=(
            "advanced, rdp, pld, exact or all (comma-separated allowed). pld is opt-in: "
            "it takes seconds to minutes at large k*n (all includes it)."
        ),
    ),
    as_json: bool = _JSON,
) -> None:
    """The epsilon of a k-account coalition (Thm 3.5, Thm 3.9, PLD, exact GDP)."""
    from ragprivacy.dp import collusion_report

    report = collusion_report(eps_acc, delta_acc, k, n, delta=delta, method=_methods(method))
    _emit(report.to_dict(), f"k = {k} colluding accounts", as_json)


@app.command("audit-epsilon")
def audit_epsilon(
    eps_acc: float = _EPS_ACC,
    delta_acc: float = _DELTA_ACC,
    k_max: int = typer.Option(..., "--k-max", help="Policy coalition cap k_max."),
    delta_policy: float = typer.Option(
        ..., "--delta-policy", help="Final joint failure probability (> k_max * delta_acc)."
    ),
    n: int = _N,
    as_json: bool = _JSON,
) -> None:
    """epsilon_audit of eq. (5.2) with delta_comp = delta_policy - k_max * delta_acc."""
    from ragprivacy.audit import epsilon_audit

    result = epsilon_audit(eps_acc, delta_acc, k_max, delta_policy, n=n)
    _emit(result.to_dict(), "epsilon_audit (eq. 5.2)", as_json)


@app.command("predict-auc")
def predict_auc(
    eps_acc: float = _EPS_ACC,
    delta_acc: float = _DELTA_ACC,
    n: int = _N,
    k: int = typer.Option(1, "--k", help="Coalition size (accounts)."),
    delta_gap: float = typer.Option(
        1.0, "--delta-gap", help="Score gap between member and non-member (1 = sensitivity)."
    ),
    as_json: bool = _JSON,
) -> None:
    """Predicted MIA AUC (eq. 3.10/3.11) and advantage bounds (eq. 3.8, 3.9)."""
    from ragprivacy.dp import mia_prediction

    _emit(
        mia_prediction(eps_acc, delta_acc, n, k, delta_gap).to_dict(),
        "membership-inference prediction",
        as_json,
    )


@app.command("table")
def table(
    ks: str = typer.Option("1,2,5,10,20,50,100", "--k", help="Coalition sizes, comma-separated."),
    eps: str = typer.Option("0.5,1,2,4", "--eps-acc", help="Per-account epsilons."),
    delta_acc: float = _DELTA_ACC,
    n: int = _N,
    delta_policy: float | None = typer.Option(
        None, "--delta-policy", help="Fixed delta_policy (default: (k+1)*delta_acc per cell)."
    ),
    as_json: bool = _JSON,
) -> None:
    """The epsilon_audit grid (k x eps_acc) of the collusion paper (leading term of eq. 5.2)."""
    from ragprivacy.audit import epsilon_audit_table

    k_list = parse_list(ks, int)
    e_list = parse_list(eps, float)
    rows = epsilon_audit_table(k_list, e_list, delta_acc=delta_acc, n=n, delta_policy=delta_policy)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    grid = Table(title=f"epsilon_audit, leading term (delta_acc = {delta_acc:g}, n = {n})")
    grid.add_column("k")
    for e in e_list:
        grid.add_column(f"eps_acc = {e:g}", justify="right")
    for i, k in enumerate(k_list):
        cells = rows[i * len(e_list) : (i + 1) * len(e_list)]
        grid.add_row(str(k), *(f"{c.eps_audit_leading:.2f}" for c in cells))
    Console().print(grid)
