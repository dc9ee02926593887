"""The privacy scorecard: every attack against the undefended system and each defense
on one corpus (:mod:`~ragprivacy.eval.scorecard.plan`), summarised with intervals and a
verdict (:mod:`~ragprivacy.eval.scorecard.summary`) on one self-contained web page
(:mod:`~ragprivacy.eval.scorecard.page`, figures in
:mod:`~ragprivacy.eval.scorecard.figures`)."""

from __future__ import annotations

from ragprivacy.eval.scorecard.page import render_page, write_scorecard
from ragprivacy.eval.scorecard.plan import (
    SCORECARD_ATTACKS,
    SCORECARD_EPSILONS,
    SCORECARD_MODES,
    scorecard_config,
)
from ragprivacy.eval.scorecard.summary import (
    Estimate,
    ExtractionRate,
    Scorecard,
    ScorecardRow,
    summarize,
)

__all__ = [
    "SCORECARD_ATTACKS",
    "SCORECARD_EPSILONS",
    "SCORECARD_MODES",
    "Estimate",
    "ExtractionRate",
    "Scorecard",
    "ScorecardRow",
    "render_page",
    "scorecard_config",
    "summarize",
    "write_scorecard",
]
