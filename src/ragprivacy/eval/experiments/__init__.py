"""Experiment types (``type:`` in configs): ``qa`` utility and ``leakage`` extraction."""

from __future__ import annotations

from ragprivacy.eval.experiments.base import (
    Experiment,
    ReportSection,
    create_experiment,
    experiment_types,
    register_experiment,
)
from ragprivacy.eval.experiments.collusion_experiment import (
    CollusionExperiment,
    CollusionOptions,
)
from ragprivacy.eval.experiments.collusion_topk import TopKCellResult, TopKHarness
from ragprivacy.eval.experiments.extraction import ExtractionExperiment, ExtractionOptions
from ragprivacy.eval.experiments.leakage import LeakageExperiment, LeakageOptions
from ragprivacy.eval.experiments.membership import MembershipExperiment, MembershipOptions
from ragprivacy.eval.experiments.private_rag import PrivateRAGExperiment, PrivateRAGOptions
from ragprivacy.eval.experiments.private_rag_medical import PrivateRAGMedicalExperiment
from ragprivacy.eval.experiments.qa import QAExperiment, QAOptions

__all__ = [
    "CollusionExperiment",
    "CollusionOptions",
    "Experiment",
    "ExtractionExperiment",
    "ExtractionOptions",
    "LeakageExperiment",
    "LeakageOptions",
    "MembershipExperiment",
    "MembershipOptions",
    "PrivateRAGExperiment",
    "PrivateRAGMedicalExperiment",
    "PrivateRAGOptions",
    "QAExperiment",
    "QAOptions",
    "ReportSection",
    "TopKCellResult",
    "TopKHarness",
    "create_experiment",
    "experiment_types",
    "register_experiment",
]
