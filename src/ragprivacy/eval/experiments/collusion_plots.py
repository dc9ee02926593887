"""Figures of the collusion sweeps (Figure 2, Figure 5, §A.2) and of the estimator
calibration (Figure 4), as PNG."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ragprivacy.eval.experiments.collusion import SweepResult
from ragprivacy.eval.experiments.plots import pyplot

__all__ = ["plot_calibration", "plot_sweep", "plot_sweeps"]


def plot_sweep(result: SweepResult, path: str | Path, *, title: str | None = None) -> Path:
    """AUC against k per ε_acc with ±1 DeLong SE, and the prediction as dashed lines."""
    return plot_sweeps({"": result}, path, title=title)


def _prediction_label(res: SweepResult) -> str:
    """What a sweep's predicted curve is: the closed form for the scalar mechanism (eq.
    (3.10)/(3.11), or the split adversary's of §A.2), the scalar prediction as an upper
    bound for top-K (Remark 3.8)."""
    if res.mechanism == "scalar":
        return "predicted"
    return "scalar prediction (upper bound, Rem. 3.8)"


def plot_sweeps(
    results: Mapping[str, SweepResult], path: str | Path, *, title: str | None = None
) -> Path:
    """Several sweeps on one axis (e.g. same-tenant vs external under M4, Figure 5): the
    measured AUC ± 1 SE per ε_acc, and each ε_acc's predicted curve in the same colour,
    dashed and named in the legend (drawn once where sweeps share it)."""
    from matplotlib.ticker import NullFormatter

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=110)
    styles = ["o-", "s--", "^:", "d-."]
    eps_all = sorted({c.eps_acc for res in results.values() for c in res.cells})
    colour = {e: f"C{i % 10}" for i, e in enumerate(eps_all)}
    drawn: set[tuple[float, tuple[tuple[int, float], ...]]] = set()
    ks_all: set[int] = set()
    for si, (label, res) in enumerate(results.items()):
        for e in sorted({c.eps_acc for c in res.cells}):
            row = sorted((c for c in res.cells if c.eps_acc == e), key=lambda c: c.k)
            ks = [c.k for c in row]
            ks_all.update(ks)
            name = f"ε_acc={e:g}" + (f" {label}" if label else "") + ", measured"
            ax.errorbar(
                ks,
                [c.auc for c in row],
                yerr=[c.se for c in row],
                fmt=styles[si % 4],
                color=colour[e],
                capsize=3,
                label=name,
                markersize=4,
            )
            if all(c.predicted is not None for c in row):
                curve = tuple((c.k, float(c.predicted or 0.0)) for c in row)
                if (e, curve) not in drawn:
                    drawn.add((e, curve))
                    ax.plot(
                        ks,
                        [p for _, p in curve],
                        color=colour[e],
                        ls=(0, (4, 2)),
                        lw=1.0,
                        alpha=0.8,
                        label=f"ε_acc={e:g}, {_prediction_label(res)}",
                    )
    ax.axhline(0.5, color="k", ls=":", lw=0.8, label="chance (AUC 0.5)")
    ax.set_xscale("log")
    if ks_all:  # ticks at the coalition sizes run
        ax.set_xticks(sorted(ks_all), [str(k) for k in sorted(ks_all)])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("coalition size k (log scale)")
    ax.set_ylabel("membership AUC (Mann–Whitney)")
    first = next(iter(results.values()))
    ax.set_title(
        title
        or f"{first.mechanism} mechanism, n={first.settings['n']}, T={first.settings['trials']}"
    )
    ax.grid(alpha=0.3)
    # below the axes: inside, it would cover the curves it names
    ax.legend(fontsize=6.5, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def plot_calibration(
    thetas: Sequence[float],
    null_fpr: Sequence[float],
    mean_k_hat: Mapping[str, Sequence[float]],
    path: str | Path,
    *,
    theta_star: float | None,
    k_figure: int = 10,
    accounts: int = 30,
) -> Path:
    """Figure 4: (a) null FPR against θ, (b) mean ĉ at k_true against θ per pattern."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.0, 3.6), dpi=110)
    a.plot(thetas, null_fpr, "o-", markersize=4)
    a.axhline(0.05, color="r", ls=":", lw=0.8)
    if theta_star is not None:
        a.axvline(theta_star, color="g", ls="--", lw=0.8, label=f"θ* = {theta_star:.2f}")
        a.legend(fontsize=8)
    a.set_xlabel("θ")
    a.set_ylabel("null false-positive rate")
    a.set_title("(a) null FPR")
    for pattern, ks in mean_k_hat.items():
        b.plot(thetas, ks, "o-", markersize=3, label=pattern)
    b.axhline(k_figure, color="k", ls=":", lw=0.8)
    b.axhline(accounts, color="grey", ls=":", lw=0.8)
    b.set_xlabel("θ")
    b.set_ylabel(f"mean ĉ at k_true = {k_figure}")
    b.set_title("(b) coalition-size recovery")
    b.legend(fontsize=8)
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
