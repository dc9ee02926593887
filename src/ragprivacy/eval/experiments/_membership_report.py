"""The report section of the ``membership`` experiment: the attacks × defenses table,
ROC curves per defense, MBA's γ study and the parameter studies."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from ragprivacy.eval.experiments.base import ReportSection

__all__ = ["membership_report", "roc_plot"]


def roc_plot(path: Path, curves: dict[str, tuple[list[float], list[float]]], title: str) -> Path:
    """ROC curves on linear axes with the chance diagonal."""
    fig, ax = plt.subplots(figsize=(5.2, 4.6), dpi=110)
    for name, (fpr, tpr) in curves.items():
        ax.step(fpr, tpr, where="post", label=name)
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}f}"


def _privacy_cells(p: dict[str, Any] | None) -> str:
    if not p:
        return "– | – | –"
    eps = p.get("epsilon", 0.0)
    spent = "0" if not eps else ("∞" if math.isinf(eps) else f"{eps:.3g}")
    if p.get("budget") == "target" and p.get("accounts", 0) > 1:
        spent += " /target"
    return f"{spent} | {_fmt(p.get('auc_bound'))} | {p.get('refused', 0)}"


def membership_report(exp: Any, results: list[dict[str, Any]], out_dir: Path) -> ReportSection:
    o = exp.options
    main = [r for r in results if "study" not in r["cell"]]
    studies = [r for r in results if "study" in r["cell"]]
    lines = [
        f"Corpus `{exp.corpus_name}`: {o.member_fraction:.0%} of the documents stored, the "
        f"rest held out; {o.targets} evaluation targets and {o.calibration} calibration "
        "targets, each half members and half non-members. Thresholds for accuracy and F1 "
        f"are chosen on the calibration split ({o.criterion}); AUC ± DeLong SE and "
        "TPR at a fixed FPR are measured on the evaluation split. *Recall* is the share "
        "of member targets retrieved by the attack's first query (evaluation-only view). "
        "Learning attacks fit on a shadow RAG over an auxiliary corpus. *ε spent* is what "
        "the attacker's account spent (the largest over accounts: one account per cell, or "
        "one per target where the system's budget is per target), ε at "
        f"δ = {o.accounting_delta:g} for Gaussian compositions; *AUC bound* is the largest "
        "AUC any membership test could reach at that spend (e^ε/(1+e^ε) for pure DP, "
        "Φ(μ/√2) for μ-GDP; – where neither applies); *refused* counts queries the "
        "system refused once a budget was spent (answered with an empty response).",
        "",
        "| system | attack | defense | AUC ± SE | accuracy | F1 | TPR@1%FPR | TPR@0.1%FPR "
        "| recall | queries/target | ε spent | AUC bound | refused |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    figures: list[str] = []
    curves: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for item in main:
        c, res = item["cell"], item["result"]
        if "skipped" in res:
            lines.append(
                f"| {c['system']} | {c['attack']} | {c['defense']} | skipped: "
                f"{res['skipped']} | | | | | | | | | |"
            )
            continue
        m = res["metrics"]
        lines.append(
            f"| {c['system']} | {c['attack']} | {c['defense']} | {_fmt(m['auc'])} ± "
            f"{_fmt(m['auc_se'])} | {_fmt(m['accuracy'])} | {_fmt(m['f1'])} | "
            f"{_fmt(m['tpr_at_1pct_fpr'])} | {_fmt(m['tpr_at_01pct_fpr'])} | "
            f"{_fmt(m['retrieval_recall'], 2)} | {m['queries_per_target']:.1f} | "
            f"{_privacy_cells(res.get('privacy'))} |"
        )
        key = f"{c['system']}/{c['defense']}"
        curves.setdefault(key, {})[f"{c['attack']} ({m['auc']:.2f})"] = (
            res["roc"]["fpr"],
            res["roc"]["tpr"],
        )
    for key, series in curves.items():
        safe = key.replace("/", "_").replace(":", "_")
        fig = f"membership_{exp.index}_roc_{safe}.png"
        roc_plot(out_dir / fig, series, f"ROC, {key}")
        figures.append(fig)
        lines += ["", f"![ROC {key}]({fig})"]
    gamma = [r for r in main if "gamma_f1" in r["result"]]
    if gamma:
        gs = list(gamma[0]["result"]["gamma_f1"])
        lines += [
            "",
            "MBA's own rule (member when at least γ·M masks are right): F1 on the "
            "evaluation split by γ (MBA 5.7.2).",
            "",
            "| system | defense | " + " | ".join(f"γ={g}" for g in gs) + " |",
            "|---|---|" + "---|" * len(gs),
        ]
        for r in gamma:
            row = r["result"]["gamma_f1"]
            lines.append(
                f"| {r['cell']['system']} | {r['cell']['defense']} | "
                + " | ".join(_fmt(row[g]) for g in gs)
                + " |"
            )
    if studies:
        lines += [
            "",
            "Parameter studies (MBA 5.7, S-RAG 5.4–5.5):",
            "",
            "| parameter | value | attack | defense | AUC ± SE | F1 | recall |",
            "|---|---|---|---|---|---|---|",
        ]
        for item in studies:
            c, res = item["cell"], item["result"]
            if "skipped" in res:
                continue
            m = res["metrics"]
            lines.append(
                f"| {c['param']} | {c['value']} | {c['attack']} | {c['defense']} | "
                f"{_fmt(m['auc'])} ± {_fmt(m['auc_se'])} | {_fmt(m['f1'])} | "
                f"{_fmt(m['retrieval_recall'], 2)} |"
            )
    return ReportSection(f"Membership inference ({exp.corpus_name})", "\n".join(lines), figures)
