"""The ``collusion`` experiment type: the k-account sweeps inside ``ragprivacy run`` configs.

A config entry (collusion paper §4.2–§4.4; the options are those of
:func:`~ragprivacy.eval.experiments.collusion.scalar_sweep` and
:func:`~ragprivacy.eval.experiments.collusion.topk_sweep`)::

    - type: collusion
      mechanism: scalar          # scalar (M*, eq. 3.3-3.4) or topk (the service harness)
      eps_acc: [1, 2, 4]
      coalition_sizes: [1, 2, 5, 10, 20]
      n: 10000                   # queries per account (the rate limit)
      trials: 10000              # Monte Carlo trials per world and cell

The experiment's top-K (``k``, default 5) is K of the top-K harness; ``systems`` are not
used. One cell per ε_acc row (the per-cell streams are keyed by (ε_acc, k), so the cells
give the same numbers as one :func:`scalar_sweep` call with the same seed). The report
gives per cell k, ε_acc, AUC, DeLong SE, the prediction of eq. (3.10)/(3.11) and z, the
gates P1/P3 over all cells, and the AUC-vs-k figure with the predicted curves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._stats import auc_interval_from
from ragprivacy._validation import check_choice, check_positive_int
from ragprivacy.errors import ConfigError
from ragprivacy.eval.config import ExperimentConfig, ExperimentSpec
from ragprivacy.eval.context import RunContext
from ragprivacy.eval.experiments.base import (
    Experiment,
    ReportSection,
    format_interval,
    register_experiment,
)
from ragprivacy.eval.experiments.collusion import (
    ADVERSARIES,
    SweepCell,
    SweepResult,
    gates,
    scalar_sweep,
    topk_sweep,
)

__all__ = ["CollusionExperiment", "CollusionOptions"]

_SETTINGS = ("n", "trials", "delta_acc", "adversary", "regime", "mode")


@dataclass(frozen=True, slots=True, kw_only=True)
class CollusionOptions:
    """Options of the ``collusion`` experiment.

    Attributes:
        mechanism: ``scalar`` (M* with adversary ``adversary``) or ``topk`` (hit count
            through the multi-tenant service, regime ``regime``, mode ``mode``).
        eps_acc: per-account ε values (one row, and one cell of the run, each).
        coalition_sizes: the k values.
        n: queries per account.
        trials: Monte Carlo trials per world and cell.
        delta_acc: per-account δ.
        adversary: scalar only: ``pooled-mean``, ``bayes-llr`` or ``split``.
        rho: scalar only, ``split``: fraction of the colluders on the target.
        regime: top-K only: ``same-tenant``, ``external-m4`` or ``external``.
        mode: top-K only: ``exact`` (binomial) or ``service`` (through the service).
        background: top-K only: background documents of the synthetic index.
        dim: top-K only: embedding dimension of the synthetic index.
        seed: the sweep's root seed (``null``: derived from the config seed).
    """

    mechanism: str = "scalar"
    eps_acc: tuple[float, ...] = (1.0, 2.0, 4.0)
    coalition_sizes: tuple[int, ...] = (1, 2, 5, 10, 20)
    n: int = 10_000
    trials: int = 10_000
    delta_acc: float = 1e-6
    adversary: str = "pooled-mean"
    rho: float = 0.5
    regime: str = "same-tenant"
    mode: str = "exact"
    background: int = 50
    dim: int = 32
    seed: int | None = None

    def __post_init__(self) -> None:
        check_choice("mechanism", self.mechanism, ("scalar", "topk"))
        check_choice("adversary", self.adversary, ADVERSARIES)
        if not self.eps_acc or not self.coalition_sizes:
            raise ConfigError(
                f"The 'eps_acc' and 'coalition_sizes' lists must not be empty; got "
                f"{list(self.eps_acc)!r} and {list(self.coalition_sizes)!r}."
            )
        for k in self.coalition_sizes:
            check_positive_int("coalition_sizes", k)
        check_positive_int("n", self.n)
        check_positive_int("trials", self.trials)


def _cell_from_dict(d: dict[str, Any]) -> SweepCell:
    base = ("k", "eps_acc", "auc", "se", "predicted", "z", "trials")
    return SweepCell(
        k=int(d["k"]),
        eps_acc=float(d["eps_acc"]),
        auc=float(d["auc"]),
        se=float(d["se"]),
        predicted=None if d["predicted"] is None else float(d["predicted"]),
        z=None if d["z"] is None else float(d["z"]),
        trials=int(d["trials"]),
        extra={key: v for key, v in d.items() if key not in base},
    )


class CollusionExperiment(Experiment):
    """Scalar or top-K k-account sweep with the P1/P3 gates (collusion paper §4)."""

    type = "collusion"
    options_type = CollusionOptions
    needs_corpus = False

    def __init__(self, spec: ExperimentSpec, config: ExperimentConfig, index: int = 0) -> None:
        super().__init__(spec, config, index)
        self.options: CollusionOptions = self.parse_options()

    @property
    def sweep_seed(self) -> int:
        o = self.options
        return int(o.seed) if o.seed is not None else int(self.seed % (2**63))

    def cells(self) -> list[dict[str, Any]]:
        return [{"eps_acc": float(e)} for e in self.options.eps_acc]

    def run_cell(
        self, cell: dict[str, Any], ctx: RunContext, rng: np.random.Generator
    ) -> dict[str, Any]:
        o = self.options
        common: dict[str, Any] = {
            "eps": [float(cell["eps_acc"])],
            "ks": list(o.coalition_sizes),
            "n": o.n,
            "trials": o.trials,
            "delta_acc": o.delta_acc,
            "seed": self.sweep_seed,
        }
        if o.mechanism == "scalar":
            res = scalar_sweep(**common, adversary=o.adversary, rho=o.rho)
        else:
            res = topk_sweep(
                **common,
                regime=o.regime,
                mode=o.mode,
                top_k=self.spec.k,
                background=o.background,
                dim=o.dim,
            )
        return res.to_dict()

    def _merge(self, results: list[dict[str, Any]]) -> SweepResult:
        cells = [_cell_from_dict(c) for item in results for c in item["result"]["cells"]]
        cells.sort(key=lambda c: (c.eps_acc, c.k))
        first = results[0]["result"]["settings"]
        settings = {**first, "eps": sorted({c.eps_acc for c in cells})}
        return SweepResult(
            mechanism=self.options.mechanism,
            settings=settings,
            cells=cells,
            gates=gates(cells, has_prediction=self.options.mechanism == "scalar"),
            seconds=float(sum(item["result"]["seconds"] for item in results)),
        )

    def report(self, results: list[dict[str, Any]], out_dir: Path) -> ReportSection:
        from ragprivacy.eval.experiments.collusion_plots import plot_sweep

        o = self.options
        res = self._merge(results)
        what = (
            f"M* (eq. 3.3–3.4), adversary `{o.adversary}`"
            if o.mechanism == "scalar"
            else f"noisy top-{self.spec.k} through the multi-tenant service ({o.regime}, "
            f"{o.mode} mode; {o.background} background documents, d = {o.dim})"
        )
        pred = (
            "eq. (3.10)/(3.11)"
            if o.mechanism == "scalar"
            else "the scalar prediction (an upper bound, Remark 3.8)"
        )
        lines = [
            f"{what}; n = {o.n} queries per account, δ_acc = {o.delta_acc:g}, "
            f"T = {o.trials} trials per world and cell, seed {self.sweep_seed}; "
            f"{len(res.cells)} cells in {res.seconds:.2f} s. AUC = Mann–Whitney, SE = DeLong; "
            "95 % interval DeLong's, or the exact one over the T member/non-member pairs "
            "where DeLong's collapses or leaves [0, 1] (†); "
            f"predicted = {pred}; z = (AUC − predicted)/SE.",
            "",
            "| ε_acc | k | AUC (95% CI) | SE | predicted | z |",
            "|---|---|---|---|---|---|",
        ]
        for c in res.cells:
            p = "–" if c.predicted is None else f"{c.predicted:.4f}"
            z = "–" if c.z is None else f"{c.z:.2f}"
            ci = auc_interval_from(c.auc, c.se, c.trials)
            auc = format_interval(c.auc, ci.low, ci.high, 4) + (
                "†" if ci.method == "paired-exact" else ""
            )
            lines.append(f"| {c.eps_acc:g} | {c.k} | {auc} | {c.se:.4f} | {p} | {z} |")
        lines.append("")
        for g in res.gates:
            lines.append(f"- gate **{g.name}**: {'PASS' if g.passed else 'FAIL'}")
        fig = f"collusion_{self.index}_{o.mechanism}.png"
        plot_sweep(res, out_dir / fig)
        lines += ["", f"![AUC vs coalition size]({fig})"]
        title = "Collusion: k-account attack, " + (
            "scalar mechanism" if o.mechanism == "scalar" else "top-K harness"
        )
        return ReportSection(title, "\n".join(lines), [fig])


register_experiment("collusion", CollusionExperiment)
