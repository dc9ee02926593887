"""Metrics, experiment configs, the runner, and reports with plots."""

from __future__ import annotations

from ragprivacy.eval.cache import CachedGenerator, GenerationCache
from ragprivacy.eval.config import (
    CorpusSpec,
    ExperimentConfig,
    ExperimentSpec,
    ModelSpec,
    from_mapping,
    load_config,
    parse_config,
)
from ragprivacy.eval.context import RunContext, derive_seed
from ragprivacy.eval.experiments import (
    Experiment,
    ReportSection,
    TopKCellResult,
    TopKHarness,
    create_experiment,
    experiment_types,
    register_experiment,
)
from ragprivacy.eval.runner import RunResult, package_versions, run_config

__all__ = [
    "CachedGenerator",
    "CorpusSpec",
    "Experiment",
    "ExperimentConfig",
    "ExperimentSpec",
    "GenerationCache",
    "ModelSpec",
    "ReportSection",
    "RunContext",
    "RunResult",
    "TopKCellResult",
    "TopKHarness",
    "create_experiment",
    "derive_seed",
    "experiment_types",
    "from_mapping",
    "load_config",
    "package_versions",
    "parse_config",
    "register_experiment",
    "run_config",
]
