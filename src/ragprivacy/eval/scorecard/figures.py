"""The scorecard's figures as inline SVG (text kept as text, so the page needs no font
or image file and stays readable from disk): the privacy–utility frontier and the ROC
curves on log-FPR axes."""

from __future__ import annotations

import io
from typing import Any

from ragprivacy.eval.scorecard.summary import Scorecard, ScorecardRow

__all__ = ["frontier_svg", "roc_svg"]


def _svg(fig: Any, salt: str) -> str:
    """The figure as an ``<svg>`` element (no XML prologue; ids salted per figure so
    two figures on one page never share a clip-path id)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def frontier_svg(card: Scorecard) -> str | None:
    """Utility (x) against the worst attack's AUC (y), one point per row with both 95 %
    intervals; the frontier joins the rows no other row beats on both; chance (AUC 0.5)
    and the no-retrieval utility are marked. ``None`` without utility figures."""
    points = [r for r in card.rows if r.utility is not None and r.worst is not None]
    if not points:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    markers = "osD^vP*Xhp<>"
    for i, r in enumerate(points):
        assert r.utility is not None and r.worst is not None
        u, (attack, a) = r.utility, r.worst
        xerr = None
        if u.low is not None and u.high is not None:
            xerr = [[u.value - u.low], [u.high - u.value]]
        yerr = None
        if a.low is not None and a.high is not None:
            yerr = [[a.value - a.low], [a.high - a.value]]
        # one marker and colour per row, named in the legend: labels written beside the
        # points overlap where rows sit together (they often do, at AUC 1)
        ax.errorbar(
            u.value,
            a.value,
            xerr=xerr,
            yerr=yerr,
            fmt=markers[i % len(markers)],
            color=plt.get_cmap("tab10")(i % 10),
            capsize=3,
            markersize=7,
            alpha=0.9,
            label=f"{r.label} ({attack})",
        )
    front = _frontier(points)
    if len(front) > 1:
        ax.plot(
            [r.utility.value for r in front if r.utility],
            [r.worst[1].value for r in front if r.worst],
            "--",
            color="#7f8c8d",
            linewidth=1,
            label="frontier (no row beats these on both)",
        )
    ax.axhline(0.5, color="#27ae60", linewidth=1, linestyle=":", label="AUC 0.5: chance")
    if card.no_retrieval is not None:
        ax.axvline(
            card.no_retrieval,
            color="#7f8c8d",
            linewidth=1,
            linestyle="-.",
            label="utility with no retrieval",
        )
    ax.set_ylim(0.0, 1.05)
    ax.set_xlabel(f"utility ({card.utility_metric or 'utility'}, higher is better)")
    ax.set_ylabel("worst membership AUC (lower is better)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _svg(fig, "frontier")


def _frontier(rows: list[ScorecardRow]) -> list[ScorecardRow]:
    """Rows not dominated (another row with at least their utility and at most their
    worst AUC, better in one), in order of utility."""
    keep = []
    for r in rows:
        assert r.utility is not None and r.worst is not None
        u, a = r.utility.value, r.worst[1].value
        beaten = any(
            o is not r
            and o.utility is not None
            and o.worst is not None
            and o.utility.value >= u
            and o.worst[1].value <= a
            and (o.utility.value > u or o.worst[1].value < a)
            for o in rows
        )
        if not beaten:
            keep.append(r)
    return sorted(keep, key=lambda r: r.utility.value if r.utility else 0.0)


def roc_svg(card: Scorecard, rows: list[ScorecardRow]) -> str | None:
    """One panel per row in ``rows``: each attack's ROC curve with the FPR axis on a log
    scale from the smallest FPR the sample resolves (1 / non-members) to 1, where the
    low-FPR regime that matters for membership is visible; chance is the diagonal."""
    rows = [r for r in rows if r.roc]
    if not rows:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.8), squeeze=False)
    for ax, r in zip(axes[0], rows):
        floor = 1.0 / max(1, r.non_members)
        for attack in card.attacks:
            if attack not in r.roc:
                continue
            fpr, tpr = r.roc[attack]
            # a log axis cannot show FPR 0: the curve starts at the resolution floor
            xs = [max(x, floor) for x in fpr]
            ax.step(xs, tpr, where="post", label=f"{attack} (AUC {r.auc[attack].value:.2f})")
        grid = [floor * (1 / floor) ** (i / 50) for i in range(51)]
        ax.plot(grid, grid, ":", color="#7f8c8d", linewidth=1, label="chance")
        ax.set_xscale("log")
        ax.set_xlim(floor, 1.0)
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel(f"false positive rate (log; ≥ 1/{r.non_members})")
        ax.set_ylabel("true positive rate")
        ax.set_title(r.label, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return _svg(fig, "roc-" + "-".join(r.label for r in rows))
