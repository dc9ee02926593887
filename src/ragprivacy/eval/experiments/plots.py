"""Small matplotlib helpers shared by experiment reports (Agg backend, PNG files)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["grouped_bars", "step_cdf"]


def grouped_bars(
    path: Path,
    *,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    errors: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    ylabel: str,
    title: str,
    ylim: tuple[float, float] | None = (0.0, 1.1),
) -> Path:
    """Bars of ``series[name][g]`` per group ``g``, with optional (low, high) intervals."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        yerr = None
        if errors and name in errors:
            lo = [max(0.0, v - e[0]) for v, e in zip(values, errors[name])]
            hi = [max(0.0, e[1] - v) for v, e in zip(values, errors[name])]
            yerr = [lo, hi]
        bars = ax.bar(xs, values, width, label=name, yerr=yerr, capsize=3)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if ylim:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def step_cdf(path: Path, *, series: Mapping[str, Sequence[float]], xlabel: str, title: str) -> Path:
    """Empirical complementary CDFs: fraction of items with value ≥ x, per series."""
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    for name, values in series.items():
        vals = sorted(values)
        n = len(vals)
        if n == 0:
            continue
        ys = [1 - i / n for i in range(n)]
        ax.step(vals, ys, where="post", label=name)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of targets ≥ x")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
