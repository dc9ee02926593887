"""The report of the ``membership`` experiment: per experiment the attacks × defenses
table, ROC curves per defense, MBA's γ study and the parameter studies; over a run's
membership experiments the AUC matrix of every attack against every system and defense."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._stats import min_non_members, resolves_fpr
from ragprivacy.eval.experiments.base import ReportSection, format_cell, format_interval
from ragprivacy.eval.experiments.plots import pyplot

__all__ = [
    "membership_overview",
    "membership_report",
    "release_cells",
    "roc_plot",
    "utility_note",
]

NO_BOUND_RETRIEVAL = "— (retrieval ε)"
"""The AUC-bound cell where the ε spent covers only which documents were retrieved."""


def roc_plot(path: Path, curves: dict[str, tuple[list[float], list[float]]], title: str) -> Path:
    """ROC curves with the false-positive rate on a log axis (the low-FPR region is where
    a membership attack matters, and a linear axis hides it) and the chance line TPR = FPR.

    FPR = 0 cannot sit on a log axis: such points are drawn at the left edge, half the
    smallest non-zero FPR of the curves (one non-member in the evaluation split at most),
    and the axis label says so."""
    positive = [f for fpr, _ in curves.values() for f in fpr if f > 0]
    floor = min(positive, default=1e-3) / 2
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.4, 5.6), dpi=110)
    grid = sorted({f for fpr, _ in curves.values() for f in fpr})

    def shape(fpr: list[float], tpr: list[float]) -> tuple[float, ...]:
        # the step curve's TPR at every FPR any curve steps at: equal shapes coincide
        return tuple(max([t for f, t in zip(fpr, tpr) if f <= x], default=0.0) for x in grid)

    merged: dict[str, tuple[list[float], list[float]]] = {}
    shapes: dict[str, tuple[float, ...]] = {}
    for name, (fpr, tpr) in curves.items():  # a curve drawn over another is named with it
        mine = shape(list(fpr), list(tpr))
        same = next((k for k, v in shapes.items() if v == mine), None)
        if same is None:
            merged[name], shapes[name] = (list(fpr), list(tpr)), mine
        else:
            label = f"{same} = {name}"
            merged[label], shapes[label] = merged.pop(same), shapes.pop(same)
    styles = ["-", "--", "-.", ":"]
    for i, (name, (fpr, tpr)) in enumerate(merged.items()):
        ax.step(
            [max(f, floor) for f in fpr],
            tpr,
            where="post",
            label=name,
            ls=styles[(i // 10) % len(styles)],
            lw=1.4,
        )
    chance = np.geomspace(floor, 1.0, 64)
    ax.plot(chance, chance, color="grey", lw=0.8, ls="--", label="chance (TPR = FPR)")
    ax.set_xscale("log")
    ax.set_xlim(floor, 1.0)
    ax.set_xlabel(f"false positive rate (log scale; 0 drawn at {floor:.2g})")
    ax.set_ylabel("true positive rate")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    # below the axes: inside, it would cover the low-FPR corners of the curves
    ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _auc_cell(m: dict[str, Any]) -> str:
    """AUC (95 % interval), † where the interval is the exact paired one; results
    written before intervals were recorded keep their "± SE"."""
    if "auc_low" not in m:
        return f"{format_cell(m['auc'])} ± {format_cell(m['auc_se'])}"
    mark = "†" if m.get("auc_interval") == "paired-exact" else ""
    return format_interval(m["auc"], m["auc_low"], m["auc_high"]) + mark


def _accuracy_cell(m: dict[str, Any]) -> str:
    return format_interval(m["accuracy"], m.get("accuracy_low"), m.get("accuracy_high"))


def _tpr_cell(m: dict[str, Any], key: str, fpr: float) -> str:
    """TPR at ``fpr``, or why the sample cannot show it (too few non-members)."""
    n = m.get("n_non_members")
    if n is not None and not resolves_fpr(int(n), fpr):
        return f"n/a (needs ≥ {min_non_members(fpr)} non-members)"
    return format_cell(m[key])


def _sample_sizes(cells: list[dict[str, Any]]) -> str:
    """ "100 members / 100 non-members" over the cells that ran (each distinct pair)."""
    sizes = dict.fromkeys(
        (int(m["n_members"]), int(m["n_non_members"]))
        for r in cells
        if "n_members" in (m := r["result"].get("metrics", {}))
    )
    return " or ".join(f"{m} members / {n} non-members" for m, n in sizes) or "no targets"


def _privacy_cells(p: dict[str, Any] | None) -> str:
    if not p:
        return "– | – | –"
    eps = p.get("epsilon", 0.0)
    spent = "0" if not eps else ("∞" if math.isinf(eps) else f"{eps:.3g}")
    if p.get("budget") == "target" and p.get("accounts", 0) > 1:
        spent += " /target"
    bound = p.get("auc_bound")
    if bound is None and p.get("scope") == "retrieval":
        cell = NO_BOUND_RETRIEVAL  # ε covers the retrieval, not the generated text
    else:
        cell = format_cell(bound)
    return f"{spent} | {cell} | {p.get('refused', 0)}"


_UTILITY_NAMES = {"match": "match accuracy", "rouge_l": "ROUGE-L F"}
RELEASE_COLUMNS = ("utility", "answered", "docs/answer", "voted tokens/answer")
"""Columns beside every attack row: what the system is still good for, and what it
released (an AUC of 0.5 from a system that answered nothing is no defense)."""


def release_cells(res: dict[str, Any]) -> str:
    """The :data:`RELEASE_COLUMNS` cells of one attack row: the system's utility on the
    benign probe (under the row's defense), the share of the attack's queries answered
    with any text, and the documents passed to the generator per attack query."""
    u = res.get("utility") or {}
    r = res.get("release") or {}
    value = u.get("value") if u.get("metric") else None
    return (
        f"{format_interval(value, u.get('low'), u.get('high'))} | "
        f"{format_cell(r.get('answered'), 2)} | "
        f"{format_cell(r.get('documents_per_answer'), 1)} | "
        f"{format_cell(r.get('voted_tokens_per_answer'), 1)}"
    )


def utility_note(results: list[dict[str, Any]]) -> str:
    """The sentence that says what *utility* measured (and its no-retrieval baseline)."""
    probe = next(
        (
            r["result"]["utility"]
            for r in results
            if (r["result"].get("utility") or {}).get("metric")
        ),
        None,
    )
    release = (
        "*answered* is the share of the attack's queries answered with any text (refusals "
        "and empty answers are not), *docs/answer* the documents passed to the generator "
        "per attack query (0: a filter or refusal kept every document out), and *voted "
        "tokens/answer*, for DP voting systems, the tokens per answer the vote released "
        "from the documents (discoveries; – for other systems): their voters read the "
        "documents, whose text reaches the answer only through a discovery. An AUC near "
        "0.5 beside no answers, no documents or no discoveries says the system released "
        "nothing, not that it defends well."
    )
    if probe is None:
        return "*utility*: – (no benign probe for this corpus). " + release
    name = _UTILITY_NAMES.get(str(probe["metric"]), str(probe["metric"]))
    what = (
        "questions whose supporting documents are stored"
        if probe["metric"] == "match"
        else "held-out patient records (patient half in, the doctor's reply as reference)"
    )
    return (
        f"*utility* is the system's {name} under the row's defense on "
        f"{probe['queries']} benign {what}, asked like a user would (the generator alone, "
        f"with no retrieval, scores {format_cell(probe.get('no_retrieval'))}). " + release
    )


def membership_report(exp: Any, results: list[dict[str, Any]], out_dir: Path) -> ReportSection:
    o = exp.options
    main = [r for r in results if "study" not in r["cell"]]
    studies = [r for r in results if "study" in r["cell"]]
    stored = (
        f"{o.member_fraction:.0%} of the documents stored, the rest held out"
        if getattr(o, "members", None) is None
        else f"the documents listed in `{o.members}` are the members, the rest non-members"
    )
    lines = [
        f"Corpus `{exp.corpus_name}`: {stored}; {o.targets} evaluation targets and "
        f"{o.calibration} calibration targets, each half members and half non-members. "
        "Thresholds for accuracy and F1 "
        f"are chosen on the calibration split ({o.criterion}); AUC, accuracy and TPR at a "
        f"fixed FPR are measured on the evaluation split ({_sample_sizes(main)} per "
        "cell). Intervals are 95 %: for the AUC DeLong's normal interval, or, where that "
        "collapses or leaves [0, 1] (every member above every non-member, ties, a "
        "boundary AUC), the exact Clopper–Pearson interval over min(members, non-members) "
        "disjoint member/non-member pairs (marked †); for the accuracy Wilson's. A TPR at "
        "an FPR below 1/(non-members) is not resolved by the sample (it would be the TPR "
        "at FPR 0) and reads *n/a*. *Recall* is the share "
        "of member targets retrieved by the attack's first query (evaluation-only view). "
        "Learning attacks fit on a shadow RAG over an auxiliary corpus. *ε spent* is what "
        "the attacker's account spent (the largest over accounts: one account per cell, or "
        "one per target where the system's budget is per target), ε at "
        f"δ = {o.accounting_delta:g} for Gaussian compositions; *AUC bound* is the largest "
        "AUC any membership test could reach at that spend (e^ε/(1+e^ε) for pure DP, "
        "Φ(μ/√2) for μ-GDP; – where neither applies). For a private *retriever* under RAG "
        "(noisy top-K, DP-RP-G) ε covers which documents are retrieved, not the text the "
        "generator then reads from them (collusion paper §7), so no membership AUC bound "
        f"follows from it: *AUC bound* reads {NO_BOUND_RETRIEVAL}. *refused* counts queries "
        "the system refused once a budget was spent (answered with an empty response). "
        + utility_note(main),
        "",
        "| system | attack | defense | AUC (95% CI) | accuracy (95% CI) | F1 | TPR@1%FPR "
        "| TPR@0.1%FPR "
        "| recall | queries/target | ε spent | AUC bound | refused | "
        + " | ".join(RELEASE_COLUMNS)
        + " |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(RELEASE_COLUMNS),
    ]
    figures: list[str] = []
    curves: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for item in main:
        c, res = item["cell"], item["result"]
        if "skipped" in res:
            lines.append(
                f"| {c['system']} | {c['attack']} | {c['defense']} | skipped: "
                f"{res['skipped']} | | | | | | | | | | – | – | – | – |"
            )
            continue
        m = res["metrics"]
        lines.append(
            f"| {c['system']} | {c['attack']} | {c['defense']} | {_auc_cell(m)} | "
            f"{_accuracy_cell(m)} | {format_cell(m['f1'])} | "
            f"{_tpr_cell(m, 'tpr_at_1pct_fpr', 0.01)} | "
            f"{_tpr_cell(m, 'tpr_at_01pct_fpr', 0.001)} | "
            f"{format_cell(m['retrieval_recall'], 2)} | {m['queries_per_target']:.1f} | "
            f"{_privacy_cells(res.get('privacy'))} | {release_cells(res)} |"
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
                + " | ".join(format_cell(row[g]) for g in gs)
                + " |"
            )
    if studies:
        lines += [
            "",
            "Parameter studies (MBA 5.7, S-RAG 5.4–5.5):",
            "",
            "| parameter | value | attack | defense | AUC (95% CI) | F1 | recall | "
            + " | ".join(RELEASE_COLUMNS)
            + " |",
            "|---|---|---|---|---|---|---|" + "---|" * len(RELEASE_COLUMNS),
        ]
        for item in studies:
            c, res = item["cell"], item["result"]
            if "skipped" in res:
                continue
            m = res["metrics"]
            lines.append(
                f"| {c['param']} | {c['value']} | {c['attack']} | {c['defense']} | "
                f"{_auc_cell(m)} | {format_cell(m['f1'])} | "
                f"{format_cell(m['retrieval_recall'], 2)} | {release_cells(res)} |"
            )
    return ReportSection(f"Membership inference ({exp.corpus_name})", "\n".join(lines), figures)


def _column(cell: dict[str, Any]) -> str:
    system, defense = str(cell["system"]), str(cell["defense"])
    return system if defense == "none" else f"{system} + {defense}"


_SKIPPED = "n/a"


def _label(value: Any) -> str:
    """A matrix entry without an AUC: ``"n/a"`` (skipped) as is, else "–"."""
    return value if isinstance(value, str) else "–"


def auc_heatmap(
    path: Path,
    attacks: list[str],
    columns: list[str],
    auc: list[list[float | str | None]],
    *,
    note: str = "",
) -> Path:
    """Attacks (rows) × systems and defenses (columns), each cell printing its AUC and
    coloured by how well the attack separates members, max(AUC, 1 − AUC), from 0.5
    (chance) to 1: an AUC of 0.25 separates as well as 0.75 (flip the score), so it must
    not look like a perfect defense. ``"n/a"`` marks a skipped cell and ``None`` a pair
    the run did not have."""
    import numpy as np

    data = np.array(
        [[v if isinstance(v, float) else np.nan for v in row] for row in auc], dtype=float
    )
    width = max(5.0, 1.0 + 0.85 * len(columns))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(width, 1.2 + 0.45 * len(attacks)), dpi=110)
    separation = np.maximum(data, 1.0 - data)
    img = ax.imshow(separation, cmap="RdYlGn_r", vmin=0.5, vmax=1.0, aspect="auto")
    for i in range(len(attacks)):
        for j in range(len(columns)):
            v = data[i, j]
            sep = separation[i, j]
            dark = not np.isnan(v) and (sep >= 0.9 or sep <= 0.56)  # the colour map's ends
            ax.text(
                j,
                i,
                f"{v:.2f}" if not np.isnan(v) else _label(auc[i][j]),
                ha="center",
                va="center",
                fontsize=7,
                color="white" if dark else "black",
            )
    ax.set_xticks(range(len(columns)), columns, rotation=35, ha="right", fontsize=7)
    ax.set_yticks(range(len(attacks)), attacks, fontsize=8)
    ax.set_title("membership AUC (0.5 = chance)" + (f"\n{note}" if note else ""), fontsize=9)
    bar = fig.colorbar(img, ax=ax, fraction=0.03, pad=0.02)
    bar.set_label("max(AUC, 1 − AUC)", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def membership_overview(
    parts: list[tuple[Any, list[dict[str, Any]]]], out_dir: Path
) -> ReportSection | None:
    """One AUC matrix per corpus over every membership experiment of the run (its main
    cells, not the parameter studies); ``None`` when the run has a single experiment,
    whose own table already is the matrix."""
    if len(parts) < 2:
        return None
    lines: list[str] = []
    figures: list[str] = []
    corpora = list(dict.fromkeys(exp.corpus_name for exp, _ in parts))
    for corpus in corpora:
        attacks: list[str] = []
        columns: list[str] = []
        owner: dict[str, int] = {}  # column label → the experiment it came from
        auc: dict[tuple[str, str], float | str] = {}
        spent: dict[str, str] = {}
        useful: dict[str, str] = {}
        released: dict[str, str] = {}
        baseline: str | None = None
        for exp, cells in parts:
            if exp.corpus_name != corpus:
                continue
            for item in cells:
                c, res = item["cell"], item["result"]
                if "study" in c:
                    continue
                col = _column(c)
                if owner.setdefault(col, exp.index) != exp.index:  # same label elsewhere
                    col = f"{col} (exp. {exp.index})"
                    owner.setdefault(col, exp.index)
                attacks += [c["attack"]] if c["attack"] not in attacks else []
                columns += [col] if col not in columns else []
                value = float("nan") if "skipped" in res else float(res["metrics"]["auc"])
                auc[(c["attack"], col)] = _SKIPPED if "skipped" in res else value
                if "privacy" in res and col not in spent:
                    spent[col] = _privacy_cells(res["privacy"]).split(" | ")[0]
                if "metrics" in res and col not in useful:
                    parts4 = release_cells(res).split(" | ")
                    useful[col] = parts4[0]
                    no_retrieval = (res.get("utility") or {}).get("no_retrieval")
                    if baseline is None and no_retrieval is not None:
                        baseline = format_cell(no_retrieval)
                    released[col] = parts4[2] + ("" if parts4[3] == "–" else f" ({parts4[3]} tok)")
        grid = [[auc.get((a, col)) for col in columns] for a in attacks]
        fig = f"membership_overview_{len(figures)}.png"
        # each column names its utility: a chance AUC from a system that lost its
        # utility (released nothing) must not read as a good defense
        shown = [f"{col}\nutility {useful.get(col, '–')}" for col in columns]
        note = (
            f"column labels: utility on the benign probe (no retrieval: {baseline})"
            if baseline is not None
            else ""
        )
        auc_heatmap(out_dir / fig, attacks, shown, grid, note=note)
        figures.append(fig)
        lines += [
            f"Corpus `{corpus}`: the AUC of every attack (rows) against every system and "
            "defense (columns) of the run, on each experiment's evaluation targets (their "
            "counts, the ε each test spent and the other metrics are in the sections "
            "below; *n/a*: the system exposes no log-probabilities; –: not run). "
            "*ε spent* is the first attack's spend (per target where each target meets a "
            "fresh budget), as a scale; *utility* the system's score on the benign probe "
            "and *docs/answer* the documents its answers to the first attack passed to the "
            "generator (with the tokens a DP vote released from them; see the sections "
            "below): a low AUC beside a utility no better than no retrieval, or 0 "
            "documents, is a system that released nothing.",
            "",
            "| attack | " + " | ".join(columns) + " |",
            "|---|" + "---|" * len(columns),
            "| *ε spent* | " + " | ".join(spent.get(col, "–") for col in columns) + " |",
            "| *utility* | " + " | ".join(useful.get(col, "–") for col in columns) + " |",
            "| *docs/answer* | " + " | ".join(released.get(col, "–") for col in columns) + " |",
        ]
        for a, row in zip(attacks, grid):
            lines.append(
                f"| {a} | "
                + " | ".join(format_cell(v) if isinstance(v, float) else (v or "–") for v in row)
                + " |"
            )
        lines += ["", f"![membership AUC, {corpus}]({fig})", ""]
    return ReportSection("Attacks × defenses (membership AUC)", "\n".join(lines), figures)
