"""The experiment-type interface and its registry.

An experiment type turns one ``ExperimentSpec`` into independent *cells* (e.g. one per
system), runs a cell inside a worker process with a :class:`RunContext`, and writes its
section of the report from all its cells' results.
"""

from __future__ import annotations

import builtins
import dataclasses
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ragprivacy._registry import Registry
from ragprivacy.errors import ConfigError
from ragprivacy.eval.config import ExperimentConfig, ExperimentSpec, from_mapping
from ragprivacy.eval.context import RunContext, derive_seed

__all__ = [
    "Experiment",
    "ReportSection",
    "create_experiment",
    "experiment_class",
    "experiment_types",
    "format_cell",
    "format_interval",
    "register_experiment",
]


@dataclass(slots=True)
class ReportSection:
    """Markdown for one experiment and the PNG files it refers to (relative paths)."""

    title: str
    markdown: str
    figures: list[str] = field(default_factory=list)


def format_cell(x: Any, digits: int = 3) -> str:
    """A number for a report table with ``digits`` decimals; "–" for a missing value
    (None or a float NaN)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"


def format_interval(x: Any, low: Any, high: Any, digits: int = 3) -> str:
    """A figure with its confidence interval, the one style every report uses:
    ``"0.812 (0.741–0.872)"``; the figure alone when the interval is missing, "–" when the
    figure is.

    >>> format_interval(0.8, 0.49, 0.943)
    '0.800 (0.490–0.943)'
    """
    cell = format_cell(x, digits)
    if cell == "–" or format_cell(low) == "–" or format_cell(high) == "–":
        return cell
    return f"{cell} ({low:.{digits}f}–{high:.{digits}f})"


class Experiment(ABC):
    """One experiment type. Subclasses validate ``spec.options`` in ``__init__``.

    ``seed`` is shared by every cell of the experiment (so all systems see the same
    questions or targets); each cell also gets its own ``rng`` stream for its noise.
    """

    type: str = "experiment"
    #: whether the experiment reads documents (then its spec must name a ``corpus``)
    needs_corpus: bool = True
    #: the frozen dataclass of the type's options (the keys of an experiment entry
    #: besides ``type``, ``corpus``, ``systems`` and ``k``); ``None`` when it has none.
    #: ``ragprivacy options`` and docs/options.md are generated from it.
    options_type: ClassVar[builtins.type | None] = None

    def __init__(self, spec: ExperimentSpec, config: ExperimentConfig, index: int = 0) -> None:
        self.spec = spec
        self.config = config
        self.index = index
        if self.needs_corpus and spec.corpus is None:
            raise ConfigError(
                f"experiments[{index}] ({spec.type}) needs a 'corpus': name one of the "
                f"config's corpora ({', '.join(sorted(config.corpora)) or 'none defined'})."
            )
        #: the corpus the experiment runs on ('' for types that read none)
        self.corpus_name: str = spec.corpus or ""
        self.seed = derive_seed(config.seed, "experiment", str(index), spec.type)

    def parse_options(self) -> Any:
        """``spec.options`` as an :attr:`options_type` instance; an unknown key is
        refused with every key the entry accepts (the spec's own and the options')."""
        if self.options_type is None:
            return None
        common = [f.name for f in dataclasses.fields(ExperimentSpec)]
        return from_mapping(
            self.options_type, self.spec.options, f"experiments[{self.index}]", also=common
        )

    def cells(self) -> list[dict[str, Any]]:
        """JSON-ready parameters of the independent cells (default: one per system)."""
        return [{"system": s} for s in self.spec.systems]

    def cell_units(self, cell: dict[str, Any]) -> int:
        """Work units (e.g. targets) of a cell that ``run_cell`` reports through
        ``ctx.progress`` as it goes; 0 (the default) when it reports none."""
        return 0

    @abstractmethod
    def run_cell(
        self, cell: dict[str, Any], ctx: RunContext, rng: np.random.Generator
    ) -> dict[str, Any]:
        """Run one cell; return JSON-ready metrics (and any per-item records)."""

    @abstractmethod
    def report(self, results: list[dict[str, Any]], out_dir: Path) -> ReportSection:
        """The report section from every cell's ``{"cell": ..., "result": ...}``."""

    @classmethod
    def overview(
        cls, parts: list[tuple[Experiment, list[dict[str, Any]]]], out_dir: Path
    ) -> ReportSection | None:
        """A section over every experiment of this type in the run (each with its cells),
        placed before the per-experiment sections; ``None`` (the default) for none."""
        return None


_REGISTRY: Registry[Experiment] = Registry("experiment type")


def register_experiment(name: str, cls: type[Experiment], *, replace: bool = False) -> None:
    """Register an experiment type (``type:`` in configs)."""
    _REGISTRY.register(name, cls, replace=replace)


def create_experiment(spec: ExperimentSpec, config: ExperimentConfig, index: int = 0) -> Experiment:
    """The experiment of ``spec`` (its ``index`` in the config seeds its samples)."""
    return _REGISTRY.factory(spec.type)(spec, config, index)


def experiment_class(name: str) -> type[Experiment]:
    """The class registered as experiment type ``name``."""
    factory = _REGISTRY.factory(name)
    if not (isinstance(factory, type) and issubclass(factory, Experiment)):
        raise ConfigError(f"Experiment type {name!r} is registered as a function, not a class.")
    return factory


def experiment_types() -> list[str]:
    return _REGISTRY.names()
