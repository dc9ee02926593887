"""Metrics, experiment configs, the runner, and reports with plots."""

from __future__ import annotations

from ragprivacy.eval.cache import CachedGenerator, GenerationCache
from ragprivacy.eval.calls import CallTally, Price, describe_calls
from ragprivacy.eval.config import (
    CorpusSpec,
    ExperimentConfig,
    ExperimentSpec,
    ModelSpec,
    RaySpec,
    from_mapping,
    load_config,
    parse_config,
)
from ragprivacy.eval.context import RunContext, derive_seed
from ragprivacy.eval.experiments import (
    DEFAULT_ATTACKS,
    EXTRACTION_MODES,
    Experiment,
    ReportSection,
    TopKCellResult,
    TopKHarness,
    create_experiment,
    experiment_types,
    plot_calibration,
    plot_sweep,
    production_scale_check,
    register_experiment,
    scalar_sweep,
    sweep_estimate,
    topk_sweep,
    trained_embedder_check,
)
from ragprivacy.eval.gate import GateResult, failed_lines, figures_of, run_gate
from ragprivacy.eval.runner import RunResult, package_versions, run_config
from ragprivacy.eval.schema import OptionDoc, OptionSection, option_sections, options_markdown
from ragprivacy.eval.scorecard import (
    SCORECARD_ATTACKS,
    SCORECARD_EPSILONS,
    Scorecard,
    render_page,
    scorecard_config,
    summarize,
    write_scorecard,
)

__all__ = [
    "CachedGenerator",
    "CallTally",
    "CorpusSpec",
    "DEFAULT_ATTACKS",
    "EXTRACTION_MODES",
    "Experiment",
    "ExperimentConfig",
    "ExperimentSpec",
    "GateResult",
    "GenerationCache",
    "ModelSpec",
    "OptionDoc",
    "OptionSection",
    "Price",
    "RaySpec",
    "ReportSection",
    "RunContext",
    "RunResult",
    "SCORECARD_ATTACKS",
    "SCORECARD_EPSILONS",
    "Scorecard",
    "TopKCellResult",
    "TopKHarness",
    "create_experiment",
    "derive_seed",
    "describe_calls",
    "experiment_types",
    "failed_lines",
    "figures_of",
    "from_mapping",
    "load_config",
    "option_sections",
    "options_markdown",
    "package_versions",
    "parse_config",
    "plot_calibration",
    "plot_sweep",
    "production_scale_check",
    "register_experiment",
    "render_page",
    "run_config",
    "run_gate",
    "scalar_sweep",
    "scorecard_config",
    "summarize",
    "sweep_estimate",
    "topk_sweep",
    "trained_embedder_check",
    "write_scorecard",
]
