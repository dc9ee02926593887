"""``ragprivacy dp ...`` through a small Typer root (as the real root mounts it)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from ragprivacy.cli.dp_cmd import app as dp_app
from ragprivacy.errors import ConfigError

root = typer.Typer()
root.add_typer(dp_app, name="dp")
runner = CliRunner()


def _json(*args: str) -> object:
    result = runner.invoke(root, ["dp", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("k", "eps", "expected"), [(10, "1", 3.16), (50, "1", 7.07), (50, "2", 14.14), (100, "1", 10.0)]
)
def test_collusion_worked_figures(k: int, eps: str, expected: float) -> None:
    out = _json(
        "collusion",
        "--eps-acc",
        eps,
        "--delta-acc",
        "1e-6",
        "--k",
        str(k),
        "--n",
        "10000",
        "--method",
        "advanced",
    )
    assert round(out["eps_k_leading"], 2) == expected


def test_collusion_all_fields() -> None:
    out = _json("collusion", "--eps-acc", "1", "--delta-acc", "1e-6", "--k", "10", "--n", "10000")
    for key in (
        "eps_per_query",
        "delta_per_query",
        "sigma",
        "sigma_exact",
        "eps_k_leading",
        "eps_k_bound",
        "eps_k_rdp",
        "eps_k_exact",
        "delta_joint",
    ):
        assert isinstance(out[key], float), key
    assert out["sigma"] / out["sigma_exact"] > 8
    assert out["eps_k_pld"] is None  # PLD is opt-in (slow at large k*n)
    # every epsilon says the delta it holds at: delta + k*delta_acc, not the --delta slack
    at = out["at_delta"]
    assert at["eps_k_exact"] == at["eps_k_rdp"] == out["delta_joint"] == pytest.approx(1.1e-5)
    assert out["delta"] == 1e-6 and at["eps_acc_exact"] == 1e-6
    assert at["eps_k_bound"] == pytest.approx(10 * 10_000 * out["delta_per_query"] + 1e-6)
    assert "eps_k_pld" not in at
    pld = _json("collusion", "--k", "10", "--n", "10000", "--method", "pld")
    assert pld["eps_k_pld"] == pytest.approx(out["eps_k_exact"], rel=1e-3)
    assert out["eps_k_exact"] < out["eps_k_rdp"] < out["eps_k_bound"]


def test_audit_epsilon_and_ill_formed_policy() -> None:
    out = _json(
        "audit-epsilon",
        "--eps-acc",
        "1",
        "--delta-acc",
        "1e-6",
        "--k-max",
        "10",
        "--delta-policy",
        "1.1e-5",
    )
    assert round(out["eps_audit_leading"], 2) == 3.16
    assert out["delta_comp"] == pytest.approx(1e-6)
    for key in ("eps_audit_bound", "eps_audit_rdp"):
        assert out[key] > 0
    with pytest.raises(ConfigError, match="Ill-formed"):
        runner.invoke(
            root,
            ["dp", "audit-epsilon", "--k-max", "10", "--delta-policy", "1e-5", "--json"],
            catch_exceptions=False,
        )


def test_predict_auc() -> None:
    lo = _json("predict-auc", "--eps-acc", "4", "--delta-acc", "1e-6", "--n", "10000", "--k", "1")
    hi = _json("predict-auc", "--eps-acc", "4", "--delta-acc", "1e-6", "--n", "10000", "--k", "20")
    assert round(lo["auc"], 3) == 0.531
    assert round(hi["auc"], 3) == 0.638
    assert hi["mia_advantage_upper"] > hi["mia_advantage_lower"] > 0


def test_table_json_and_rich() -> None:
    rows = _json("table", "--k", "10,50", "--eps-acc", "1,2")
    assert [round(r["eps_audit_leading"], 2) for r in rows] == [3.16, 6.32, 7.07, 14.14]
    result = runner.invoke(root, ["dp", "table"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "3.16" in result.stdout and "14.14" in result.stdout
    result = runner.invoke(root, ["dp", "collusion"], catch_exceptions=False)
    assert result.exit_code == 0 and "eps_k_exact" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["collusion", "--delta-acc", "1.5"],
        ["collusion", "--delta-acc", "1e-6", "--delta", "1e-7"],
        ["collusion", "--method", "magic"],
        ["predict-auc", "--k", "0"],
        ["table", "--k", "a,b"],
    ],
)
def test_invalid_input_raises_config_error(args: list[str]) -> None:
    with pytest.raises(ConfigError):
        runner.invoke(root, ["dp", *args, "--json"], catch_exceptions=False)


def test_root_turns_errors_into_exit_code_2() -> None:
    """With a root that catches RagPrivacyError (as the real one does), exit code is 2."""
    from ragprivacy.errors import RagPrivacyError

    def main(argv: list[str]) -> int:
        command = typer.main.get_command(root)
        try:
            command.main(args=argv, prog_name="ragprivacy", standalone_mode=False)
        except RagPrivacyError:
            return 2
        return 0

    assert main(["dp", "collusion", "--delta-acc", "1", "--json"]) == 2
