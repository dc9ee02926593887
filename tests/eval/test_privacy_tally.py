"""PrivacyTally: the privacy an attacker's accounts spent, and the AUC bound it implies
only where the guarantee covers the whole answer."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from ragprivacy.dp import (
    GaussianEvent,
    NoOpEvent,
    PrivacyEvent,
    PureDpEvent,
    event_epsilon,
    max_auc_gdp,
    max_auc_pure_dp,
)
from ragprivacy.eval.experiments._membership_report import NO_BOUND_RETRIEVAL, membership_report
from ragprivacy.eval.experiments._privacy_tally import PrivacyTally
from ragprivacy.types import PrivacyCost, Response


def _response(event: PrivacyEvent, scope: str) -> Response:
    epsilon, delta = event_epsilon(event, 1e-6)
    cost = PrivacyCost(event=event, epsilon=epsilon, delta=delta, scope=scope)
    return Response(text="", privacy=cost)


@pytest.mark.parametrize("scope", ["answer", "retrieval"])
def test_the_auc_bound_needs_an_answer_scoped_epsilon(scope: str) -> None:
    tally = PrivacyTally(delta=1e-6)
    for _ in range(4):
        tally.record("a", _response(GaussianEvent(sigma=4.0), scope))
    row = tally.account_summary("a")
    assert row["mu"] == pytest.approx(0.5)  # four releases at mu = 1/4 compose to 1/2
    assert row["epsilon"] > 0 and row["scope"] == scope  # the epsilon is reported either way
    if scope == "answer":
        assert row["auc_bound"] == pytest.approx(max_auc_gdp(0.5))
    else:  # it covers which documents were retrieved, not the generated text
        assert row["auc_bound"] is None
    total = tally.summary()
    assert total["scope"] == scope and total["auc_bound"] == row["auc_bound"]


def test_one_retrieval_scoped_answer_takes_the_bound_away() -> None:
    tally = PrivacyTally()
    tally.record("a", _response(PureDpEvent(1.0), "answer"))
    assert tally.account_summary("a")["auc_bound"] == pytest.approx(max_auc_pure_dp(1.0))
    tally.record("a", _response(PureDpEvent(1.0), "retrieval"))
    assert tally.account_summary("a")["auc_bound"] is None
    tally.record("b", _response(PureDpEvent(1.0), "answer"))  # another account, answer-scoped
    total = tally.summary()
    assert total["auc_bound"] is None and total["scope"] == "retrieval"
    assert total["epsilon"] == pytest.approx(2.0)


def test_no_guarantee_stays_infinite_with_the_trivial_bound() -> None:
    tally = PrivacyTally()
    tally.record("a", _response(NoOpEvent(), "retrieval"))
    tally.record("a", Response(text=""))  # NonPrivateEvent: no guarantee
    row = tally.account_summary("a")
    assert math.isinf(row["epsilon"]) and row["auc_bound"] == 1.0


def test_the_membership_report_prints_no_bound_for_a_retrieval_epsilon(tmp_path) -> None:
    def cell(system: str, privacy: dict) -> dict:
        metrics = {
            "auc": 0.6,
            "auc_se": 0.01,
            "accuracy": 0.6,
            "f1": 0.6,
            "tpr_at_1pct_fpr": 0.0,
            "tpr_at_01pct_fpr": 0.0,
            "retrieval_recall": 1.0,
            "queries_per_target": 1.0,
        }
        return {
            "cell": {"system": system, "attack": "rag-mia", "defense": "none"},
            "result": {
                "metrics": metrics,
                "roc": {"fpr": [0, 1], "tpr": [0, 1]},
                "privacy": privacy,
            },
        }

    retrieval = PrivacyTally()
    retrieval.record("a", _response(GaussianEvent(sigma=2.0), "retrieval"))
    answer = PrivacyTally()
    answer.record("a", _response(GaussianEvent(sigma=2.0), "answer"))
    options = SimpleNamespace(
        member_fraction=0.8,
        targets=2,
        calibration=2,
        criterion="youden",
        accounting_delta=1e-6,
    )
    exp = SimpleNamespace(options=options, corpus_name="c", index=0)
    results = [cell("noisy", retrieval.summary()), cell("voted", answer.summary())]
    text = membership_report(exp, results, tmp_path).markdown
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| ")}
    assert f"| {NO_BOUND_RETRIEVAL} |" in rows["| noisy"]
    assert f"| {max_auc_gdp(0.5):.3f} |" in rows["| voted"]
    assert "no membership AUC bound follows from it" in text  # the reason, in the report
