"""Plots of the ``private_rag`` experiment (Agg backend, PNG files).

Lines that coincide are drawn once and named together in the legend ("rag = projection"),
so no series hides under another; bar counts start at 0 on a linear axis; ablations are
drawn against the parameter they vary, not against a total ε that is the same (or ∞) for
every point; a point given with its 95 % interval ``(x, y, low, high)`` is drawn with an
error bar, and a reference line ``(y, low, high)`` with a shaded band.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter

__all__ = [
    "bin_size_plot",
    "merge_identical",
    "parameter_plot",
    "privacy_utility_plot",
    "reuse_plot",
]

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
_STYLES: tuple[str | tuple[int, tuple[int, int]], ...] = ("-", "--", "-.", ":", (0, (1, 3)))


def merge_identical(
    series: Mapping[str, Sequence[tuple[float, ...]]],
) -> dict[str, list[tuple[float, ...]]]:
    """Series with the same points under one label joined by " = " (in order), so a line
    drawn over another is named in the legend instead of hidden."""
    out: dict[str, list[tuple[float, ...]]] = {}
    for name, points in series.items():
        pts = sorted(tuple(float(v) for v in p) for p in points)
        match = next((k for k, v in out.items() if v == pts), None)
        if match is None:
            out[name] = pts
        else:
            out[f"{match} = {name}"] = out.pop(match)
    return out


def _error_bars(ax: plt.Axes, pts: Sequence[Sequence[float]], color: Any) -> None:
    """The 95 % interval of each point given as ``(x, y, low, high)`` (points without one
    get none)."""
    with_ci = [p for p in pts if len(p) == 4 and all(math.isfinite(v) for v in p)]
    if with_ci:
        ys = np.asarray([p[1] for p in with_ci])
        lows, highs = np.asarray([p[2] for p in with_ci]), np.asarray([p[3] for p in with_ci])
        ax.errorbar(
            [p[0] for p in with_ci],
            ys,
            yerr=[np.maximum(ys - lows, 0), np.maximum(highs - ys, 0)],
            fmt="none",
            ecolor=color,
            elinewidth=1,
            capsize=3,
            alpha=0.8,
        )


def _draw_series(ax: plt.Axes, merged: Mapping[str, Sequence[Sequence[float]]]) -> None:
    """One marked line per series, each point with its interval where it has one."""
    for i, (name, pts) in enumerate(merged.items()):
        (line,) = ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker=_MARKERS[i % len(_MARKERS)],
            linestyle=_STYLES[i % len(_STYLES)],
            markersize=5,
            label=name,
        )
        _error_bars(ax, pts, line.get_color())


def _ci_label(ylabel: str, ax: plt.Axes) -> str:
    """The y label, saying what the bars and bands are where any was drawn."""
    drawn = bool(ax.containers) or bool(ax.patches)
    return f"{ylabel} (bars, bands: 95% CI)" if drawn else ylabel


def _flat_lines(ax: plt.Axes, flat: Mapping[str, float | Sequence[float]], offset: int) -> None:
    """Reference lines; a value given as ``(y, low, high)`` gets its interval as a band."""
    as_points = {
        name: [(0.0, v)] if isinstance(v, (int, float)) else [(0.0, *v)] for name, v in flat.items()
    }
    merged = merge_identical(as_points)
    for i, (name, pts) in enumerate(merged.items()):
        color = f"C{(i + offset) % 10}"
        ax.axhline(
            pts[0][1],
            linestyle=_STYLES[(i + 1) % len(_STYLES)],
            color=color,
            lw=1.2,
            label=name,
        )
        if len(pts[0]) == 4 and all(math.isfinite(v) for v in pts[0]):
            ax.axhspan(pts[0][2], pts[0][3], color=color, alpha=0.12, lw=0)


def privacy_utility_plot(
    path: Path,
    series: Mapping[str, Sequence[tuple[float, ...]]],
    flat: Mapping[str, float | Sequence[float]],
    *,
    title: str,
    ylabel: str = "match accuracy",
) -> Path:
    """Utility (accuracy by default) against total ε (log scale) per DP system; systems
    without a finite ε (non-private, or ∞) as horizontal lines."""
    fig, ax = plt.subplots(figsize=(6.8, 4.0), dpi=110)
    finite = {k: [p for p in v if p[0] > 0] for k, v in series.items()}
    merged = merge_identical({k: v for k, v in finite.items() if v})
    _draw_series(ax, merged)
    _flat_lines(ax, flat, len(merged))
    ax.set_xscale("log")
    ax.set_xlabel("total ε (log scale)")
    ax.set_ylabel(_ci_label(ylabel, ax))
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def parameter_plot(
    path: Path,
    series: Mapping[str, Sequence[tuple[float, ...]]],
    *,
    xlabel: str,
    title: str,
    ylabel: str = "match accuracy",
    log_x: bool = False,
    flat: Mapping[str, float | Sequence[float]] | None = None,
) -> Path:
    """An ablation: utility against the parameter it varies (projection dimension, τ,
    clipping bound), one line per remaining setting; ``flat`` adds reference lines."""
    fig, ax = plt.subplots(figsize=(6.8, 4.0), dpi=110)
    merged = merge_identical(series)
    _draw_series(ax, merged)
    _flat_lines(ax, flat or {}, len(merged))
    xs = sorted({p[0] for pts in merged.values() for p in pts})
    if log_x:
        ax.set_xscale("log")
    if xs:  # ticks at the values run, not at powers of ten
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(_ci_label(ylabel, ax))
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def reuse_plot(path: Path, hist: Mapping[str, int], *, title: str) -> Path:
    """Private-RAG Fig. 1: documents by the number of questions whose top-50 holds them
    (linear counts from 0, each bar labelled)."""
    xs = sorted(int(k) for k in hist)
    fig, ax = plt.subplots(figsize=(6.0, 3.4), dpi=110)
    bars = ax.bar(xs, [hist[str(x)] for x in xs])
    ax.bar_label(bars, fontsize=7, padding=2)
    ax.set_xticks(xs)
    ax.set_xlabel("questions per document (top-50)")
    ax.set_ylabel("documents")
    ax.set_ylim(0, max([hist[str(x)] for x in xs], default=1) * 1.12)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def bin_size_plot(path: Path, table: Mapping[str, float]) -> Path:
    """Private-RAG Fig. 5 (left): threshold error against bin size per ε_thr."""
    by_eps: dict[str, list[tuple[float, float]]] = {}
    for key, err in table.items():
        eps, size = key.split("|")
        by_eps.setdefault(eps, []).append((float(size), err))
    fig, ax = plt.subplots(figsize=(6.0, 3.6), dpi=110)
    for i, (eps, pts) in enumerate(by_eps.items()):
        pts.sort()
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker=_MARKERS[i % len(_MARKERS)],
            linestyle=_STYLES[i % len(_STYLES)],
            label=f"ε_thr = {eps}",
        )
    sizes = sorted({float(k.split("|")[1]) for k in table})
    ax.set_xscale("log")
    ax.set_xticks(sizes, [f"{s:g}" for s in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("bin size (log scale)")
    ax.set_ylabel("mean |τ̂ − τ|")
    ax.set_ylim(0, max(table.values(), default=1.0) * 1.1)  # an error: its scale starts at 0
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
