"""A privacy gate for CI: a run's leakage figures against thresholds and a baseline run.

``ragprivacy gate RUN --max-auc 0.6 --baseline BASE`` reads the membership and extraction
figures of a run (``results.json`` of ``attack``, ``scorecard`` or ``run``) — each system
under attack (a row of the scorecard) × each attack: AUC, TPR at 1 % FPR where the sample
resolves it, extraction rate — each with its 95 % interval, and fails the build when:

* **a threshold is exceeded**: the figure's whole interval lies above the limit (a figure
  whose interval reaches the limit is not resolved above it with this sample);
* **a figure regressed**: the same system × attack × figure of the baseline run is
  beaten beyond both intervals (the new interval's low end above the baseline's high end);
  a change inside the intervals is not a regression. A figure the baseline does not have
  is reported as new, never as a failure.

Exit 0 (pass), 1 (a threshold or a regression, with the rows and their intervals), 2 (a
usage error). The checks are also written as JSON and as a JUnit report (one test case
per check) that CI systems show beside the tests.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ragprivacy._stats import proportion_interval
from ragprivacy.errors import ConfigError
from ragprivacy.eval.metrics import extraction_counts

__all__ = ["Figure", "GateCheck", "GateResult", "failed_lines", "figures_of", "run_gate"]


@dataclass(frozen=True, slots=True)
class Figure:
    """One leakage figure of a run: ``system`` × ``attack`` (or extraction mode), which
    ``metric`` (``auc``, ``tpr_at_1pct_fpr``, ``extraction_rate``), its value and 95 %
    interval."""

    system: str
    attack: str
    metric: str
    value: float
    low: float
    high: float

    @property
    def key(self) -> tuple[str, str, str]:
        return self.system, self.attack, self.metric

    def text(self) -> str:
        return f"{self.value:.3f} ({self.low:.3f}–{self.high:.3f})"


@dataclass(frozen=True, slots=True)
class GateCheck:
    """One check: ``kind`` is ``threshold`` or ``baseline``; ``limit`` the threshold, or
    the baseline's interval high end; ``status`` pass, fail or new."""

    figure: Figure
    kind: str
    limit: float | None
    status: str
    detail: str

    @property
    def name(self) -> str:
        f = self.figure
        return f"{f.system} / {f.attack} / {f.metric} ({self.kind})"


@dataclass(frozen=True, slots=True)
class GateResult:
    """The checks of one gate run."""

    checks: tuple[GateCheck, ...]

    @property
    def failed(self) -> list[GateCheck]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def passed(self) -> bool:
        return not self.failed

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failed": len(self.failed),
            "checks": [
                {**asdict(c.figure), "kind": c.kind, "limit": c.limit, "status": c.status,
                 "detail": c.detail}
                for c in self.checks
            ],
        }  # fmt: skip

    def junit(self) -> str:
        """A JUnit XML report: one test case per check, a failure per failed check."""
        suite = ET.Element(
            "testsuite",
            name="ragprivacy-gate",
            tests=str(len(self.checks)),
            failures=str(len(self.failed)),
        )
        for c in self.checks:
            case = ET.SubElement(suite, "testcase", classname="privacy", name=c.name)
            if c.status == "fail":
                ET.SubElement(case, "failure", message=c.detail).text = c.detail
            elif c.status == "new":
                ET.SubElement(case, "system-out").text = c.detail
        return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def _label(cell: Mapping[str, Any]) -> str:
    system, defense = str(cell.get("system", "?")), str(cell.get("defense", "none"))
    return system if defense == "none" else f"{system} + {defense}"


def figures_of(results: Mapping[str, Any]) -> list[Figure]:
    """Every membership and extraction figure of a run's ``results.json`` (cells that
    were skipped have none)."""
    cells = results.get("cells")
    if not isinstance(cells, list):
        raise ConfigError("Not a run's results: it has no 'cells' (give results.json).")
    out: list[Figure] = []
    for item in cells:
        kind, cell, res = item.get("type"), item.get("cell", {}), item.get("result", {})
        if "study" in cell or "skipped" in res or "metrics" not in res:
            continue
        m = res["metrics"]
        system = _label(cell)
        if kind == "membership":
            attack = str(cell.get("attack"))
            out.append(Figure(system, attack, "auc", m["auc"], m["auc_low"], m["auc_high"]))
            tpr, n = m.get("tpr_at_1pct_fpr"), int(m.get("n_members", 0))
            if tpr is not None and n:
                low, high = proportion_interval(round(float(tpr) * n), n)
                out.append(Figure(system, attack, "tpr_at_1pct_fpr", float(tpr), low, high))
        elif kind == "extraction":
            mode = str(cell.get("mode"))
            leaked, total = extraction_counts(mode, m)
            if total:
                low, high = proportion_interval(leaked, total)
                out.append(Figure(system, mode, "extraction_rate", leaked / total, low, high))
    return out


def run_gate(
    results: Mapping[str, Any],
    *,
    max_auc: float | None = None,
    max_tpr: float | None = None,
    max_extraction: float | None = None,
    baseline: Mapping[str, Any] | None = None,
) -> GateResult:
    """Check a run's figures against the thresholds and the baseline (module
    docstring)."""
    for name, limit in (("--max-auc", max_auc), ("--max-tpr", max_tpr),
                        ("--max-extraction", max_extraction)):  # fmt: skip
        if limit is not None and not (0.0 <= limit <= 1.0 and math.isfinite(limit)):
            raise ConfigError(f"{name} must be in [0, 1]; got {limit!r}.")
    figures = figures_of(results)
    if not figures:
        raise ConfigError("The run has no membership or extraction figure to gate.")
    limits = {"auc": max_auc, "tpr_at_1pct_fpr": max_tpr, "extraction_rate": max_extraction}
    before = {f.key: f for f in figures_of(baseline)} if baseline is not None else {}
    checks: list[GateCheck] = []
    for f in figures:
        limit = limits[f.metric]
        if limit is not None:
            over = f.low > limit
            checks.append(
                GateCheck(
                    f,
                    "threshold",
                    limit,
                    "fail" if over else "pass",
                    f"{f.metric} {f.text()} "
                    + ("lies above" if over else "reaches or stays below")
                    + f" the limit {limit:g}",
                )
            )
        if baseline is None:
            continue
        old = before.get(f.key)
        if old is None:
            note = f"{f.metric} {f.text()}: not in the baseline"
            checks.append(GateCheck(f, "baseline", None, "new", note))
            continue
        worse = f.low > old.high
        checks.append(
            GateCheck(
                f,
                "baseline",
                old.high,
                "fail" if worse else "pass",
                f"{f.metric} {f.text()} against the baseline's {old.text()}"
                + (": worse beyond both intervals" if worse else ": within the intervals"),
            )
        )
    if not checks:
        raise ConfigError(
            "Nothing to check: give a threshold (--max-auc, --max-tpr, --max-extraction) "
            "or --baseline."
        )
    return GateResult(tuple(checks))


def failed_lines(result: GateResult, limit: int = 20) -> Sequence[str]:
    """The failed checks, one line each (for the terminal)."""
    return [f"FAIL {c.name}: {c.detail}" for c in result.failed[:limit]]
