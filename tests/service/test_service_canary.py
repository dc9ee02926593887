"""Measured ε against a running service: ``admin canary`` builds the neighbouring tenants
and accounts, ``audit empirical --url --plan`` plays them over HTTP. A tenant whose noise
is far below the score gaps (ε_acc = 10⁴: retrieval as plain top-K) shows a loss far
above what a small ε allows; one at ε_acc = 1 shows none above its claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragprivacy.cli import main


@pytest.mark.parametrize(("eps", "leaks"), [("10000", True), ("1", False)])
def test_the_canary_game_over_http_measures_the_tenant_s_release(
    tmp_path: Path,
    admin,
    corpus_file,
    server_factory,
    capsys,
    eps: str,
    leaks: bool,  # type: ignore[no-untyped-def]
) -> None:
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "2")
    admin(state, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "clinic", 20)))
    plan = tmp_path / "plan.json"
    out = admin(state, "canary", "clinic", "--out", str(plan), "--accounts", "24", "--eps", eps,
                "--rate-limit", "2")  # fmt: skip
    assert "clinic-canary-in, clinic-canary-out" in out
    assert plan.stat().st_mode & 0o777 == 0o600
    admin(state, "window", "open")
    server = server_factory(state)
    capsys.readouterr()
    code = main(["audit", "empirical", "--url", server.url, "--plan", str(plan), "--json"])
    (result,) = json.loads(capsys.readouterr().out)["results"]
    assert code == 0 and not result["refuted"]
    assert result["claimed_epsilon"] == float(eps) and result["claimed_delta"] == 1e-6
    assert result["trials_per_side"] == 24 and result["queries_per_account"] == 2
    if leaks:  # every held-out account on D saw the canary, none on D'
        assert result["tpr"] == 1.0 and result["fpr"] == 0.0
        # all 12 held-out accounts of each side right: about 1.02 is the most 12 can show
        assert result["epsilon_lower"] > 0.9
    else:
        assert result["epsilon_lower"] <= 1.0
    # the plan is spent: every account used its whole budget, so a second run is refused
    assert main(["audit", "empirical", "--url", server.url, "--plan", str(plan)]) == 2
    assert "played once per window" in capsys.readouterr().err


def test_a_canary_setup_that_cannot_finish_leaves_nothing(
    tmp_path: Path,
    admin,
    corpus_file,  # type: ignore[no-untyped-def]
) -> None:
    from ragprivacy.errors import ConfigError
    from ragprivacy.service import ServiceState, setup_canary_audit

    state_dir = tmp_path / "state"
    admin(state_dir, "tenant", "create", "clinic", "--k", "2")
    admin(state_dir, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "clinic", 5)))
    state = ServiceState(state_dir, create=False)
    try:
        with pytest.raises(ConfigError, match="at least 2 accounts"):
            setup_canary_audit(state, "clinic", tmp_path / "p.json", accounts=1)
        with pytest.raises(ConfigError, match="Cannot write the plan file"):
            setup_canary_audit(state, "clinic", tmp_path / "missing" / "p.json")
        with pytest.raises(ConfigError, match="more than a window can draw"):  # half made
            setup_canary_audit(state, "clinic", tmp_path / "p.json", epsilon=1e-9)
        assert sorted(state.tenants()) == ["clinic"] and not (tmp_path / "p.json").exists()
    finally:
        state.close()
