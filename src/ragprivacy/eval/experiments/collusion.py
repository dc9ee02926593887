"""Sweeps of the k-account collusion attack and the falsification gates (collusion paper §4).

* :func:`scalar_sweep` — Figure 2(a): M* with the pooled-mean adversary A* (or the Bayes
  LLR, or the diversified split of §A.2) over k × ε_acc; per cell the Mann–Whitney AUC,
  its DeLong standard error, the closed-form prediction (eq. 3.10/3.11) and
  z = (AUC − predicted)/SE. Exact sufficient statistics: a cell of T = 10⁴ trials per
  world costs two vector draws and one rank computation.
* :func:`topk_sweep` — Figure 2(b) / Figure 5: the probe attack through the multi-tenant
  service's noisy top-K (statistic: the number of answers containing the planted slot),
  same-tenant or external under M4.
* :func:`gates` — P1 (slope in √k) and P3 (within 2 SE of the prediction; above chance).
* :func:`sweep_estimate` — the memory and time a sweep needs, checked before it starts.

Gate rules (stated so that they can fail):

* **P1** — per ε_acc row, a weighted least-squares line AUC = a + b√k (weights 1/SE²).
  The row passes if its slope b is within z* standard errors of the slope of the predicted
  curve fitted the same way (z* Bonferroni-corrected for the number of rows, two-sided 5 %
  in all: 2.39 for three rows), and the line fits (χ² p-value ≥ 0.001). The gate also needs
  b > 0 at z ≥ 2 in the row with the largest ε_acc (the paper's "clears the slope test").
  For top-K sweeps (no closed-form prediction) a row passes if b > 0 at z ≥ 2.
* **P3** — at least ⌈0.9·cells⌉ cells within 2 SE of the prediction (14 of 15; the
  binomial expectation at 95 % coverage is 14.25), and every cell whose predicted
  advantage is resolvable (predicted − ½ ≥ 3 SE) above chance at z ≥ 2.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ragprivacy._resources import ResourceEstimate
from ragprivacy._validation import check_choice, check_positive_int
from ragprivacy.attacks import (
    DiversifiedSplit,
    PooledMeanAttack,
    auc_with_se,
    bayes_llr,
)
from ragprivacy.dp import ScalarMechanism, stream
from ragprivacy.errors import ConfigError
from ragprivacy.eval.experiments.collusion_topk import TopKHarness

__all__ = [
    "GateVerdict",
    "SweepCell",
    "SweepResult",
    "gates",
    "scalar_sweep",
    "sweep_estimate",
    "topk_sweep",
]

ADVERSARIES = ("pooled-mean", "bayes-llr", "split")


@dataclass(frozen=True, slots=True)
class SweepCell:
    """One (k, ε_acc) cell of a sweep."""

    k: int
    eps_acc: float
    auc: float
    se: float
    predicted: float | None
    z: float | None
    trials: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        extra = out.pop("extra")
        out.update(extra)
        return out


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """A gate's verdict and the numbers it rests on."""

    name: str
    passed: bool
    details: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "pass": self.passed, **self.details}


@dataclass(frozen=True, slots=True)
class SweepResult:
    """A sweep's cells, its gate verdicts, and its run time."""

    mechanism: str
    settings: dict[str, Any]
    cells: list[SweepCell]
    gates: list[GateVerdict]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "settings": self.settings,
            "cells": [c.to_dict() for c in self.cells],
            "gates": {g.name: g.to_dict() for g in self.gates},
            "seconds": self.seconds,
        }


def _ints(name: str, values: Sequence[int]) -> list[int]:
    out = [check_positive_int(name, v) for v in values]
    if not out:
        raise ConfigError(f"The '{name}' list must not be empty.")
    return out


def scalar_sweep(
    *,
    eps: Sequence[float] = (1.0, 2.0, 4.0),
    ks: Sequence[int] = (1, 2, 5, 10, 20),
    n: int = 10_000,
    trials: int = 10_000,
    delta_acc: float = 1e-6,
    seed: int = 0,
    adversary: str = "pooled-mean",
    rho: float = 0.5,
) -> SweepResult:
    """Figure 2(a): AUC of the k-account attack on M* against eq. (3.11), per cell.

    Each cell draws its own stream ``stream(seed, ("scalar", ε, k))``, so cells are
    reproducible and independent.
    """
    check_choice("adversary", adversary, ADVERSARIES)
    ks = _ints("k", ks)
    trials = check_positive_int("trials", trials)
    start = time.perf_counter()
    cells = []
    for e in eps:
        mech = ScalarMechanism(epsilon_acc=e, delta_acc=delta_acc, n=n)
        # A* and the LLR read the same draws (the LLR is a monotone map of A*'s ȳ).
        family = "split" if adversary == "split" else "pooled"
        split = DiversifiedSplit(mechanism=mech, rho=rho) if adversary == "split" else None
        for k in ks:
            rng = stream(seed, ("scalar", family, repr(float(e)), k))
            if split is not None:
                x = split.simulate(member=True, k=k, trials=trials, rng=rng)
                y = split.simulate(member=False, k=k, trials=trials, rng=rng)
                predicted = split.predicted_auc(k)
                extra: dict[str, Any] = {"rho": rho, "target_accounts": split.target_accounts(k)}
            else:
                attack = PooledMeanAttack(mech)
                x = attack.simulate(member=True, k=k, trials=trials, rng=rng)
                y = attack.simulate(member=False, k=k, trials=trials, rng=rng)
                if adversary == "bayes-llr":
                    x = bayes_llr(x, mechanism=mech, queries=k * n)
                    y = bayes_llr(y, mechanism=mech, queries=k * n)
                predicted = mech.predicted_auc(k)
                extra = {}
            auc, se = auc_with_se(x, y)
            cells.append(
                SweepCell(
                    k=k,
                    eps_acc=float(e),
                    auc=auc,
                    se=se,
                    predicted=predicted,
                    z=_z(auc, se, predicted, trials),
                    trials=trials,
                    extra={"sigma": mech.sigma, **extra},
                )
            )
    seconds = time.perf_counter() - start
    return SweepResult(
        mechanism="scalar",
        settings={
            "eps": [float(e) for e in eps],
            "k": ks,
            "n": n,
            "trials": trials,
            "delta_acc": delta_acc,
            "seed": seed,
            "adversary": adversary,
            **({"rho": rho} if adversary == "split" else {}),
        },
        cells=cells,
        gates=gates(cells),
        seconds=seconds,
    )


def topk_sweep(
    *,
    eps: Sequence[float] = (4.0, 8.0, 16.0),
    ks: Sequence[int] = (1, 2, 5, 10, 20),
    n: int = 200,
    trials: int = 2_000,
    delta_acc: float = 1e-6,
    seed: int = 0,
    regime: str = "same-tenant",
    mode: str = "exact",
    top_k: int = 5,
    background: int = 50,
    dim: int = 32,
) -> SweepResult:
    """Figure 2(b) / Figure 5: the hit-count statistic through the noisy top-K.

    ``predicted`` is the scalar score-release prediction at the same (k, ε_acc, n): an
    upper bound for top-K (Remark 3.8), so z is expected to be negative. ``mode="exact"``
    samples the hit counts from Binomial(kn, p_b) with p_b from the service's scores (see
    :mod:`ragprivacy.eval.experiments.collusion_topk`); ``mode="service"`` sends every query.
    """
    ks = _ints("k", ks)
    trials = check_positive_int("trials", trials)
    start = time.perf_counter()
    cells = []
    for e in eps:
        harness = TopKHarness(
            epsilon_acc=e,
            delta_acc=delta_acc,
            n=n,
            top_k=top_k,
            background=background,
            dim=dim,
            regime=regime,
            index_seed=seed,
        )
        mech = ScalarMechanism(epsilon_acc=e, delta_acc=delta_acc, n=n)
        for k in ks:
            rng = stream(seed, ("topk", regime, mode, repr(float(e)), k))
            res = harness.run(k=k, trials=trials, mode=mode, rng=rng)
            auc, se = auc_with_se(res.hits_member, res.hits_nonmember)
            predicted = mech.predicted_auc(k)
            extra: dict[str, Any] = {"regime": regime, "mode": mode}
            if res.p_member is not None:
                extra.update(p_member=res.p_member, p_nonmember=res.p_nonmember)
            cells.append(
                SweepCell(
                    k=k,
                    eps_acc=float(e),
                    auc=auc,
                    se=se,
                    predicted=predicted,
                    z=_z(auc, se, predicted, trials),
                    trials=trials,
                    extra=extra,
                )
            )
    seconds = time.perf_counter() - start
    return SweepResult(
        mechanism="topk",
        settings={
            "eps": [float(e) for e in eps],
            "k": ks,
            "n": n,
            "trials": trials,
            "delta_acc": delta_acc,
            "seed": seed,
            "regime": regime,
            "mode": mode,
            "top_k": top_k,
            "background": background,
            "dim": dim,
        },
        cells=cells,
        gates=gates(cells, has_prediction=False),
        seconds=seconds,
    )


# Cost model of one cell (numpy's normal and binomial draws, then the rank-based AUC with
# its DeLong SE): time per trial and cell for each mechanism, a set-up per ε_acc row for
# the top-K harness, time per query sent in the service mode; memory per trial (both
# worlds' statistics, their concatenation, ranks and sort buffers) over the interpreter
# with numpy and scipy loaded. Measured on a 2-core machine and rounded up (docs/scale.md,
# "The resource guards' cost models").
_BASE_MEMORY = 200e6
_BYTES_PER_TRIAL = 160.0
_SECONDS_PER_TRIAL = {"scalar": 2.0e-6, "topk": 1.5e-6}
_SECONDS_PER_QUERY = 10e-6
_TOPK_SETUP_SECONDS = 2.0


def sweep_estimate(
    *,
    mechanism: str,
    rows: int,
    ks: Sequence[int],
    n: int,
    trials: int,
    mode: str = "exact",
) -> ResourceEstimate:
    """About how much memory and time a sweep of ``rows`` ε_acc values needs.

    ``mechanism`` is ``scalar`` or ``topk``; ``mode="service"`` (top-K) sends every one of
    the ``2 · trials · k · n`` queries of a cell. Cells run one after the other, so the
    peak memory is that of the largest cell.

    >>> est = sweep_estimate(mechanism="scalar", rows=3, ks=[1, 2, 5, 10, 20], n=10_000,
    ...                      trials=10**9)
    >>> round(est.memory / 1e9), round(est.seconds / 3600, 1)
    (160, 8.3)
    """
    check_choice("mechanism", mechanism, ("scalar", "topk"))
    memory = _BASE_MEMORY + _BYTES_PER_TRIAL * trials
    if mechanism == "topk" and mode == "service":
        seconds = rows * sum(2 * trials * k * n for k in ks) * _SECONDS_PER_QUERY
    else:
        seconds = rows * len(ks) * trials * _SECONDS_PER_TRIAL[mechanism]
    if mechanism == "topk":
        seconds += rows * _TOPK_SETUP_SECONDS
    return ResourceEstimate(memory=memory, seconds=seconds)


def _null_se(auc0: float, trials: int) -> float:
    """Hanley & McNeil's (1982) standard error of an empirical AUC over ``trials`` scores
    per class when the true AUC is ``auc0`` (the formula is symmetric about ½)."""
    a = min(max(auc0, 1.0 - auc0), 1.0 - 0.5 / trials**2)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (trials - 1) * (q1 - a * a + q2 - a * a)) / trials**2
    # at a = 1 (or trials so large that a rounds to 1) the formula gives 0: fall back to
    # the AUC's resolution, one misordered pair in trials² pairs
    return math.sqrt(var) if var > 0 else 1.0 / trials**2


def _se_for_test(cell: SweepCell, auc0: float) -> float:
    """The SE a test of "AUC = auc0" divides by: DeLong's, or where it is 0 (the empirical
    AUC is 0 or 1, or every score tied) the Hanley–McNeil SE at ``auc0`` — the spread the
    hypothesis itself implies — instead of an infinite z or a skipped cell."""
    return cell.se if cell.se > 0 else _null_se(auc0, cell.trials)


def _hypothesis(cell: SweepCell, has_prediction: bool) -> float:
    return cell.predicted if has_prediction and cell.predicted is not None else 0.5


def _z(auc: float, se: float, predicted: float, trials: int) -> float:
    """z = (AUC − predicted)/SE (§3.8), with :func:`_se_for_test`'s rule when SE = 0."""
    return (auc - predicted) / (se if se > 0 else _null_se(predicted, trials))


def _wls(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float, float, float]:
    """Weighted least squares y = a + b x: (a, b, se_b, χ²)."""
    sw, sx, sy = w.sum(), (w * x).sum(), (w * y).sum()
    sxx, sxy = (w * x * x).sum(), (w * x * y).sum()
    det = sw * sxx - sx * sx
    if det <= 0:
        return float(sy / sw), 0.0, math.inf, 0.0
    b = (sw * sxy - sx * sy) / det
    a = (sy - b * sx) / sw
    se_b = math.sqrt(sw / det)
    resid = y - (a + b * x)
    return float(a), float(b), se_b, float((w * resid**2).sum())


def gates(cells: Sequence[SweepCell], *, has_prediction: bool = True) -> list[GateVerdict]:
    """The falsification gates P1 and P3 of §3.8 (see the module docstring for the rules)."""
    from scipy.stats import chi2, norm  # here: scipy.stats is a costly import (ragprivacy._stats)

    rows: dict[float, list[SweepCell]] = {}
    for c in cells:
        rows.setdefault(c.eps_acc, []).append(c)
    p1_rows = []
    zcrit = float(norm.ppf(1 - 0.05 / (2 * max(1, len(rows)))))
    for e, row in sorted(rows.items()):
        row = sorted(row, key=lambda c: c.k)
        x = np.sqrt([c.k for c in row])
        y = np.array([c.auc for c in row])
        # the hypothesis of this gate: the prediction, or for top-K (no prediction) chance
        se = np.array([_se_for_test(c, _hypothesis(c, has_prediction)) for c in row])
        _, b, se_b, chisq = _wls(x, y, 1 / se**2)
        entry: dict[str, Any] = {"eps_acc": e, "slope": b, "slope_se": se_b}
        dof = len(row) - 2
        entry["fit_p"] = float(chi2.sf(chisq, dof)) if dof > 0 else 1.0
        if has_prediction and all(c.predicted is not None for c in row):
            yp = np.array([c.predicted for c in row], dtype=float)
            _, bp, _, _ = _wls(x, yp, 1 / se**2)
            entry["predicted_slope"] = bp
            entry["pass"] = bool(abs(b - bp) <= zcrit * se_b and entry["fit_p"] >= 1e-3)
        else:
            entry["pass"] = bool(b > 0 and b / se_b >= 2)
        entry["slope_z"] = b / se_b if se_b > 0 else math.inf
        p1_rows.append(entry)
    top = p1_rows[-1] if p1_rows else {"slope_z": 0.0}
    p1 = GateVerdict(
        "P1",
        bool(p1_rows) and all(r["pass"] for r in p1_rows) and top["slope_z"] >= 2,
        {
            "rows": p1_rows,
            "z_critical": zcrit,
            "rule": "slope in sqrt(k) matches prediction; top eps row slope z >= 2",
        },
    )
    out = [p1]
    if has_prediction:
        zs = [c.z for c in cells if c.z is not None]
        within = sum(1 for z in zs if abs(z) <= 2)
        need = math.ceil(0.9 * len(zs))
        resolvable = [
            c
            for c in cells
            if c.predicted is not None and c.predicted - 0.5 >= 3 * _se_for_test(c, c.predicted)
        ]
        above = [c for c in resolvable if c.auc - 0.5 >= 2 * _se_for_test(c, 0.5)]
        out.append(
            GateVerdict(
                "P3",
                within >= need and len(above) == len(resolvable),
                {
                    "cells": len(zs),
                    "within_2se": within,
                    "required": need,
                    "max_abs_z": max((abs(z) for z in zs), default=0.0),
                    "resolvable_cells": len(resolvable),
                    "above_chance": len(above),
                },
            )
        )
    else:
        above = [c for c in cells if c.auc - 0.5 >= 2 * _se_for_test(c, 0.5)]
        out.append(
            GateVerdict(
                "above_chance",
                bool(above),
                {"cells": len(cells), "above_chance": len(above)},
            )
        )
    return out
