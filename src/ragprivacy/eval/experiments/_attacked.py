"""What the experiments that attack configured systems share (``membership``,
``extraction``): the systems parsed from ``systems`` / ``system_specs``, the target's
generator behind the run's call cache, and each system built under a defense and a
budget scope (DP voting's word domain is the run context's vocabulary).

Builds are memoised per process (:func:`memo`): the cells a worker runs share one corpus
split, knowledge base and generator instead of rebuilding them cell by cell.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ragprivacy.eval.cache import CachedGenerator
from ragprivacy.eval.config import ExperimentConfig, ExperimentSpec
from ragprivacy.eval.context import RunContext, derive_seed
from ragprivacy.eval.experiments._budgeted import BudgetedSystem
from ragprivacy.eval.experiments._privacy_tally import PrivacyTally
from ragprivacy.eval.experiments._systems import (
    ONE_BY_ONE_SYSTEMS,
    SystemEntry,
    build_entry,
    parse_system_specs,
)
from ragprivacy.eval.experiments.base import Experiment
from ragprivacy.generate import Generator, create_generator
from ragprivacy.rag import RAGSystem, create_defense
from ragprivacy.retrieval import KnowledgeBase

__all__ = ["AttackedSystemsExperiment", "memo", "memo_key"]

T = TypeVar("T")
_MEMO: dict[str, Any] = {}


def memo_key(*parts: Any) -> str:
    """A memo key from JSON-able parts (configs, labels, option mappings)."""
    return json.dumps(parts, sort_keys=True, default=str)


def memo(key: str, build: Callable[[], T]) -> T:
    """``build()`` once per process and ``key``."""
    if key not in _MEMO:
        _MEMO[key] = build()
    value: T = _MEMO[key]
    return value


class AttackedSystemsExperiment(Experiment):
    """An experiment whose cells attack the systems of ``systems`` / ``system_specs``.

    Subclasses set :attr:`options_type`, a frozen dataclass with ``system_specs``,
    ``generator_options``, ``defense_options`` and ``accounting_delta`` fields.
    """

    options: Any

    def __init__(self, spec: ExperimentSpec, config: ExperimentConfig, index: int = 0) -> None:
        super().__init__(spec, config, index)
        self.options = self.parse_options()
        specs = parse_system_specs(
            self.options.system_specs or spec.systems, f"experiments[{index}].systems"
        )
        self.systems: dict[str, SystemEntry] = {s.label: s for s in specs}

    def _config_key(self) -> str:
        return memo_key(self.config.to_dict(), self.index)

    def _generator(
        self,
        ctx: RunContext,
        spec: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Generator:
        """The generator ``spec`` (default: the config's) with the config's options under
        ``options`` (default: the experiment's ``generator_options``), behind the run's
        call cache when it has one."""
        models = self.config.models
        name = spec or models.generator
        extra = self.options.generator_options if options is None else options
        opts = {**models.generator_options, **extra}

        def build() -> Generator:
            kw = dict(opts)
            if name.partition(":")[0] == "reference" and "background" not in kw:
                kw["background"] = ctx.background_texts(self.corpus_name)
            gen = create_generator(name, **kw)
            return CachedGenerator(gen, ctx.cache) if ctx.cache is not None else gen

        cache = str(ctx.cache.path) if ctx.cache is not None else None  # one per run directory
        return memo(memo_key("generator", self._config_key(), name, opts, cache), build)

    def _budgeted(
        self,
        ctx: RunContext,
        label: str,
        defense: str,
        seed: int,
        *,
        k: int,
        kb: KnowledgeBase | None,
    ) -> BudgetedSystem:
        """The system ``label`` under ``defense`` over ``kb``, rebuilt per budget scope
        (see :class:`~ragprivacy.eval.experiments._budgeted.BudgetedSystem`)."""
        spec = self.systems[label]
        gen = self._generator(ctx)
        defense_opts = dict(self.options.defense_options.get(defense, {}) or {})
        builds = [0]

        def build(queries: int) -> RAGSystem:
            builds[0] += 1
            inner = build_entry(
                spec,
                kb=kb if spec.uses_data else None,
                generator=gen,
                k=k,
                queries=queries,
                seed=derive_seed(seed, "system", str(builds[0])),
                vocabulary=lambda: ctx.vocabulary(self.corpus_name),
            )
            return create_defense(defense, inner, **defense_opts)

        return BudgetedSystem(
            build,
            scope=spec.budget,
            tally=PrivacyTally(self.options.accounting_delta),
            one_by_one=spec.name in ONE_BY_ONE_SYSTEMS,
            on_calls=getattr(ctx, "calls", None),
            facts={"redact_pii": spec.redact_pii} if spec.redact_pii else None,
        )
