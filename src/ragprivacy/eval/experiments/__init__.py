"""Experiment types (``type:`` in configs: ``qa``, ``leakage``, ``membership``,
``extraction``, ``private_rag``, ``collusion``, ...) and the collusion sweeps, checks and
plots the command line runs directly."""

from __future__ import annotations

from ragprivacy.eval.experiments.base import (
    Experiment,
    ReportSection,
    create_experiment,
    experiment_types,
    register_experiment,
)
from ragprivacy.eval.experiments.collusion import scalar_sweep, sweep_estimate, topk_sweep
from ragprivacy.eval.experiments.collusion_experiment import (
    CollusionExperiment,
    CollusionOptions,
)
from ragprivacy.eval.experiments.collusion_plots import plot_calibration, plot_sweep
from ragprivacy.eval.experiments.collusion_scale import (
    production_scale_check,
    trained_embedder_check,
)
from ragprivacy.eval.experiments.collusion_topk import TopKCellResult, TopKHarness
from ragprivacy.eval.experiments.extraction import (
    EXTRACTION_MODES,
    ExtractionExperiment,
    ExtractionOptions,
)
from ragprivacy.eval.experiments.leakage import LeakageExperiment, LeakageOptions
from ragprivacy.eval.experiments.membership import (
    DEFAULT_ATTACKS,
    MembershipExperiment,
    MembershipOptions,
)
from ragprivacy.eval.experiments.private_rag import PrivateRAGExperiment, PrivateRAGOptions
from ragprivacy.eval.experiments.private_rag_medical import PrivateRAGMedicalExperiment
from ragprivacy.eval.experiments.qa import QAExperiment, QAOptions

__all__ = [
    "CollusionExperiment",
    "DEFAULT_ATTACKS",
    "CollusionOptions",
    "Experiment",
    "EXTRACTION_MODES",
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
    "plot_calibration",
    "plot_sweep",
    "production_scale_check",
    "register_experiment",
    "scalar_sweep",
    "sweep_estimate",
    "topk_sweep",
    "trained_embedder_check",
]
