"""Experiment types (``type:`` in configs): ``qa`` utility and ``leakage`` extraction."""

from __future__ import annotations

from ragprivacy.eval.experiments.base import (
    Experiment,
    ReportSection,
    create_experiment,
    experiment_types,
    register_experiment,
)
from ragprivacy.eval.experiments.leakage import LeakageExperiment, LeakageOptions
from ragprivacy.eval.experiments.qa import QAExperiment, QAOptions

__all__ = [
    "Experiment",
    "LeakageExperiment",
    "LeakageOptions",
    "QAExperiment",
    "QAOptions",
    "ReportSection",
    "create_experiment",
    "experiment_types",
    "register_experiment",
]
