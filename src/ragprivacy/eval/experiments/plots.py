"""Small matplotlib helpers shared by experiment reports (Agg backend, PNG files)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["grouped_bars", "pyplot", "step_cdf"]


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend (PNG files, no display).

    Imported by the first figure, not with the reports' modules: importing pyplot costs
    a few tenths of a second in every process that imports ``ragprivacy.eval`` (the
    command line, each pool worker), and only a run's report draws.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    """Bars of ``series[name][g]`` per group ``g``, with optional (low, high) intervals.

    The value axis is linear and starts at 0 whatever ``ylim`` says (a bar's length is its
    value; a cut or logarithmic axis would misstate ratios)."""
    plt = pyplot()
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
    top = ylim[1] if ylim else max([v for vs in series.values() for v in vs], default=1.0) * 1.1
    ax.set_ylim(0.0, top)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def step_cdf(
    path: Path,
    *,
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    title: str,
    cap: float | None = None,
    cap_label: str = "cap",
) -> Path:
    """Empirical complementary CDFs: fraction of items with value ≥ x, per series.

    ``cap`` marks (a vertical line, named in the legend) the largest value the measure can
    take, so a series piled up against it reads as "hit the limit", not as a natural
    value."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.8), dpi=110)
    if cap is not None:  # under the series, so a series at the cap stays visible
        ax.axvline(cap, color="grey", ls="--", lw=2.0, alpha=0.6, zorder=1, label=cap_label)
    top = max([max(v) for v in series.values() if len(v)] + [cap or 0.0], default=1.0)
    end = top * 1.05 + 0.5
    for name, values in series.items():
        vals = sorted(values)
        n = len(vals)
        if n == 0:
            continue
        # "pre" steps: the fraction ≥ x is (n − i)/n on (v[i−1], v[i]], 1 from x = 0 to
        # the smallest value and 0 past the largest
        xs = [min(0.0, vals[0]), *vals, end]
        ys = [1.0, *[(n - i) / n for i in range(n)], 0.0]
        ax.step(xs, ys, where="pre", label=name, lw=1.6, zorder=2)
    ax.set_xlim(min(0.0, *[min(v) for v in series.values() if len(v)]), end)
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
