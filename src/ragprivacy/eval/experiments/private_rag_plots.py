"""Plots of the ``private_rag`` experiment (Agg backend, PNG files)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

__all__ = ["bin_size_plot", "privacy_utility_plot", "reuse_plot"]


def privacy_utility_plot(
    path: Path,
    series: Mapping[str, Sequence[tuple[float, float]]],
    flat: Mapping[str, float],
    *,
    title: str,
    ylabel: str = "match accuracy",
) -> Path:
    """Utility (accuracy by default) against total ε (log scale) per DP system; non-DP
    systems as lines."""
    fig, ax = plt.subplots(figsize=(6.8, 4.0), dpi=110)
    for name, points in series.items():
        pts = sorted(p for p in points if p[0] > 0)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    styles = ["--", ":", "-.", (0, (1, 3))]
    for i, (name, acc) in enumerate(flat.items()):
        ax.axhline(acc, linestyle=styles[i % len(styles)], color=f"C{(i + 6) % 10}", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("total ε")
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def reuse_plot(path: Path, hist: Mapping[str, int], *, title: str) -> Path:
    """Private-RAG Fig. 1: documents by the number of questions whose top-50 holds them."""
    xs = sorted(int(k) for k in hist)
    fig, ax = plt.subplots(figsize=(6.0, 3.4), dpi=110)
    ax.bar(xs, [hist[str(x)] for x in xs])
    ax.set_xlabel("questions per document (top-50)")
    ax.set_ylabel("documents")
    ax.set_yscale("log")
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
    for eps, pts in by_eps.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"ε_thr = {eps}")
    ax.set_xscale("log")
    ax.set_xlabel("bin size")
    ax.set_ylabel("mean |τ̂ − τ|")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
