"""The scorecard's summary and verdict rules (on hand-made results, so each rule is
checked against a known answer), its plan's validation, and the page's escaping."""

from __future__ import annotations

from typing import Any

import pytest

from ragprivacy.errors import ConfigError
from ragprivacy.eval import render_page, scorecard_config, summarize
from ragprivacy.eval.experiments._systems import entry_spec, parse_system_specs
from ragprivacy.eval.scorecard.figures import _frontier


def _membership(
    system: str,
    attack: str,
    auc: tuple[float, float, float],
    *,
    defense: str = "none",
    eps: float = float("inf"),
    utility: tuple[float, float, float] = (0.2, 0.18, 0.22),
) -> dict[str, Any]:
    value, low, high = auc
    return {
        "experiment": 0,
        "type": "membership",
        "cell": {"system": system, "attack": attack, "defense": defense},
        "result": {
            "system": {"name": "rag"},
            "privacy": {"budget": "target", "accounts": 40, "epsilon": eps, "auc_bound": None},
            "release": {"answered": 1.0},
            "utility": {
                "metric": "rouge_l",
                "value": utility[0],
                "low": utility[1],
                "high": utility[2],
                "no_retrieval": 0.05,
                "queries": 40,
            },
            "metrics": {
                "auc": value,
                "auc_low": low,
                "auc_high": high,
                "n_members": 20,
                "n_non_members": 20,
            },
            "roc": {"fpr": [0.0, 0.5, 1.0], "tpr": [0.0, 0.9, 1.0]},
        },
    }


def _extraction(system: str, leaked: int, total: int) -> dict[str, Any]:
    return {
        "experiment": 1,
        "type": "extraction",
        "cell": {"system": system, "defense": "none", "mode": "targeted"},
        "result": {
            "system": {"name": "rag"},
            "privacy": {},
            "metrics": {"items": total, "leaked": leaked, "rate": leaked / total},
            "examples": [{"prompt": "Call <b>[NAME]</b>", "answer": "[PHONE]", "kind": "phone"}],
        },
    }


def _results(cells: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "t",
        "root_seed": 1,
        "started": "now",
        "seconds": 1.0,
        "settings": {
            "models": {"generator": "reference"},
            "experiments": [{"corpus": "medical"}, {"corpus": "medical"}],
        },
        "versions": {"python": "3.11"},
        "noise": None,
        "cells": cells,
    }


LEAKY = (0.95, 0.90, 1.00)
CHANCE = (0.52, 0.40, 0.64)


def test_the_verdict_recommends_the_most_useful_defense_that_stops_every_attack() -> None:
    cells = [
        _membership("rag", "mba", LEAKY),
        _membership("rag", "rag-mia", (0.7, 0.6, 0.8)),
        _membership("rag", "mba", LEAKY, defense="prompt-modifying"),
        _membership("dp-a", "mba", CHANCE, eps=1.0, utility=(0.06, 0.04, 0.08)),
        _membership("dp-b", "mba", CHANCE, eps=10.0, utility=(0.15, 0.13, 0.17)),
        _membership("dp-b", "rag-mia", (0.55, 0.49, 0.61), eps=10.0, utility=(0.15, 0.13, 0.17)),
        _extraction("rag", 27, 30),
        _extraction("dp-b", 0, 30),
    ]
    card = summarize(_results(cells))
    assert [r.label for r in card.rows] == ["rag", "rag + prompt-modifying", "dp-a", "dp-b"]
    assert card.baseline is not None and card.baseline.leaks_membership
    assert card.recommended is not None and card.recommended.label == "dp-b"
    text = card.verdict()
    assert "mba tells members from non-members with AUC 0.95 (0.90–1.00)" in text
    assert "recover 90% of its PII items (27/30" in text
    assert "dp-b (ε = 10 per target) stops every attack of the run" in text
    assert "releasing nothing" not in text
    assert "Still leaking: rag + prompt-modifying (mba AUC 0.95)" in text
    assert card.rows[2].kind == card.rows[3].kind == "dp"
    assert card.rows[1].kind == "prompt"


def test_a_defense_whose_utility_reaches_no_retrieval_releases_nothing() -> None:
    cells = [
        _membership("rag", "mba", LEAKY),
        _membership("dp", "mba", CHANCE, eps=1.0, utility=(0.06, 0.04, 0.08)),
    ]
    text = summarize(_results(cells)).verdict()
    assert "stops every attack" in text
    assert "releasing nothing useful" in text  # 0.04 ≤ no-retrieval 0.05


def test_a_defense_that_stops_membership_but_copies_documents_is_still_leaking() -> None:
    """Noisy top-K at a small ε stops membership inference, yet its answers copy the
    documents it draws: every attack column enters the verdict."""
    cells = [
        _membership("rag", "mba", LEAKY),
        _membership("dp", "mba", CHANCE, eps=1.0),
        _extraction("rag", 27, 30),
        _extraction("dp", 15, 30),
    ]
    card = summarize(_results(cells))
    assert card.recommended is None
    text = card.verdict()
    assert "stops every attack of the run" not in text
    assert "No defense of the run stops every attack: dp (50% of PII items recovered" in text
    assert "Still leaking: dp (targeted extraction 15/30)." in text


def test_without_measured_utility_nothing_is_recommended() -> None:
    """A user's corpus without questions: utility is '–' in every row, so no defense is
    recommended (one that answers nothing would stop every attack)."""
    cells = [_membership("rag", "mba", LEAKY), _membership("dp", "mba", CHANCE, eps=1.0)]
    for c in cells:
        del c["result"]["utility"]
    card = summarize(_results(cells))
    assert card.recommended is None and not card.utility_measured
    text = card.verdict()
    assert "Utility was not measured" in text and "no defense is recommended" in text
    assert "stops every attack of the run" not in text


def test_with_no_stopping_defense_the_verdict_names_the_least_leaky() -> None:
    cells = [
        _membership("rag", "mba", LEAKY),
        _membership("a", "mba", (0.8, 0.7, 0.9), eps=10.0),
        _membership("b", "mba", (0.65, 0.55, 0.75), eps=10.0),
    ]
    text = summarize(_results(cells)).verdict()
    assert "No defense of the run stops membership inference" in text
    assert "b's 0.65 (0.55–0.75)" in text


def test_an_undefended_system_without_a_resolvable_leak_is_not_called_leaky() -> None:
    text = summarize(_results([_membership("rag", "mba", CHANCE)])).verdict()
    assert "showed no membership leak the run could resolve" in text


def test_the_frontier_keeps_only_undominated_rows() -> None:
    cells = [
        _membership("rag", "mba", LEAKY, utility=(0.2, 0.18, 0.22)),
        _membership("good", "mba", CHANCE, eps=1.0, utility=(0.15, 0.1, 0.2)),
        _membership("worse", "mba", (0.7, 0.6, 0.8), eps=1.0, utility=(0.1, 0.05, 0.15)),
    ]
    card = summarize(_results(cells))
    assert [r.label for r in _frontier(card.rows)] == ["good", "rag"]


def test_the_page_escapes_what_it_shows() -> None:
    label = "<script>x</script>"
    cells = [_membership(label, "mba", LEAKY), _extraction(label, 1, 2)]
    page = render_page(summarize(_results(cells)))
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "Call &lt;b&gt;[NAME]&lt;/b&gt;" in page
    verdict = page[page.index("<p class=verdict>") : page.index("</section>")]
    assert "`" not in verdict and "<code>medical</code>" in verdict  # names set as code


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attacks": ("nope",)}, "Unknown attack 'nope'"),
        ({"attacks": ()}, "at least one membership attack"),
        ({"epsilons": (0.0,)}, "positive"),
        ({"corpus": "missing/docs.jsonl"}, "no such file"),
        ({"target": "openai:m@http://127.0.0.1:9/v1"}, "--target needs --corpus FILE"),
        ({"members": "m.txt"}, "--members goes with --target"),
    ],
)
def test_bad_plans_are_refused_with_one_clear_line(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        scorecard_config(**options)


def test_the_plan_attacks_each_defense_at_each_budget() -> None:
    config = scorecard_config(epsilons=(1.0, 10.0))
    specs = [s for e in config.experiments for s in e.options.get("system_specs", [])]
    labels = {s["label"] for s in specs if isinstance(s, dict)}
    assert {"PII redaction", "noisy top-K ε=1", "MURAG ε=1", "noisy top-K ε=10"} <= labels
    murag_1 = next(s for s in specs if isinstance(s, dict) and s["label"] == "MURAG ε=1")
    # one discovery within the budget: the spec's rule, not the plan, sets ε_0
    (entry,) = parse_system_specs([murag_1], "system_specs")
    assert entry_spec(entry, k=5, queries=1, seed=0).vote_epsilon_token == 1.0
    assert {e.type for e in config.experiments} == {"membership", "extraction"}
