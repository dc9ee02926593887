"""The report figures cannot mislead: checks on the matplotlib Axes each plot helper
draws (scales, limits, legend entries, marked caps) and on the report tables."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ragprivacy.eval import parse_config
from ragprivacy.eval.experiments import create_experiment
from ragprivacy.eval.experiments._membership_report import auc_heatmap, roc_plot
from ragprivacy.eval.experiments.collusion import SweepCell, SweepResult
from ragprivacy.eval.experiments.collusion_plots import plot_sweeps
from ragprivacy.eval.experiments.plots import grouped_bars, step_cdf
from ragprivacy.eval.experiments.private_rag_plots import (
    merge_identical,
    privacy_utility_plot,
    reuse_plot,
)


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Figure]]:
    """The figures the helpers close, kept open for inspection."""
    figures: list[Figure] = []
    close = plt.close

    def keep(fig: Any = None) -> None:
        if isinstance(fig, Figure):
            figures.append(fig)

    monkeypatch.setattr(plt, "close", keep)
    yield figures
    for fig in figures:
        close(fig)


def _axes(figures: list[Figure]) -> Axes:
    assert figures, "the helper drew no figure"
    return figures[-1].axes[0]


def _labels(ax: Axes) -> list[str]:
    legend = ax.get_legend()
    assert legend is not None
    return [t.get_text() for t in legend.get_texts()]


def test_roc_puts_fpr_on_a_log_axis_and_names_coinciding_curves(
    tmp_path: Path, drawn: list[Figure]
) -> None:
    curves = {
        "mba (1.00)": ([0.0, 0.0, 0.1, 1.0], [0.0, 1.0, 1.0, 1.0]),
        "rag-mia (1.00)": ([0.0, 0.0, 1.0], [0.0, 1.0, 1.0]),  # the same step curve
        "min-k (0.60)": ([0.0, 0.05, 0.5, 1.0], [0.0, 0.1, 0.7, 1.0]),
    }
    roc_plot(tmp_path / "roc.png", curves, "ROC")
    ax = _axes(drawn)
    assert ax.get_xscale() == "log"
    lo, hi = ax.get_xlim()
    assert 0 < lo <= 0.05 / 2 + 1e-12 and hi == pytest.approx(1.0)
    labels = _labels(ax)
    assert "mba (1.00) = rag-mia (1.00)" in labels  # not one hidden under the other
    assert "min-k (0.60)" in labels and any("chance" in x for x in labels)


def test_bars_start_at_zero_on_a_linear_axis(tmp_path: Path, drawn: list[Figure]) -> None:
    grouped_bars(
        tmp_path / "bars.png",
        groups=["1-hop", "2-hop"],
        series={"rag": [0.9, 0.6]},
        ylabel="accuracy",
        title="t",
        ylim=(0.5, 1.0),  # a cut axis is refused: bars start at 0
    )
    ax = _axes(drawn)
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0.0
    reuse_plot(tmp_path / "reuse.png", {"1": 300, "2": 40, "5": 3}, title="reuse")
    ax = _axes(drawn)
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0.0
    assert ax.get_ylim()[1] >= 300


def _sweep(mechanism: str, predicted: bool) -> SweepResult:
    cells = [
        SweepCell(
            k=k,
            eps_acc=e,
            auc=0.5 + 0.01 * k * e,
            se=0.01,
            predicted=0.5 + 0.012 * k * e if predicted else None,
            z=0.0,
            trials=100,
        )
        for e in (1.0, 2.0)
        for k in (1, 2, 5)
    ]
    return SweepResult(mechanism, {"n": 10, "trials": 100}, cells, [], 0.0)


@pytest.mark.parametrize(("mechanism", "words"), [("scalar", "predicted"), ("topk", "upper bound")])
def test_sweep_legend_names_the_predicted_curves(
    tmp_path: Path, drawn: list[Figure], mechanism: str, words: str
) -> None:
    plot_sweeps({"": _sweep(mechanism, True)}, tmp_path / "s.png")
    labels = _labels(_axes(drawn))
    for e in ("1", "2"):
        assert any(f"ε_acc={e}," in x and words in x for x in labels), labels
        assert f"ε_acc={e}, measured" in labels
    # two sweeps sharing a prediction (Figure 5) draw it once
    plot_sweeps({"a": _sweep(mechanism, True), "b": _sweep(mechanism, True)}, tmp_path / "t.png")
    labels = _labels(_axes(drawn))
    assert sum(words in x for x in labels) == 2
    plot_sweeps({"": _sweep(mechanism, False)}, tmp_path / "u.png")
    assert not any(words in x for x in _labels(_axes(drawn)))


def test_leakage_cdf_marks_the_cap(tmp_path: Path, drawn: list[Figure]) -> None:
    step_cdf(
        tmp_path / "cdf.png",
        series={"rag": [64.0] * 5, "non-rag": [1.0, 3.0, 4.0]},
        xlabel="run",
        title="t",
        cap=64,
        cap_label="cap: max_tokens = 64",
    )
    ax = _axes(drawn)
    caps = [ln for ln in ax.get_lines() if ln.get_label() == "cap: max_tokens = 64"]
    assert len(caps) == 1 and list(caps[0].get_xdata()) == [64, 64]
    assert "cap: max_tokens = 64" in _labels(ax)
    assert ax.get_xlim()[1] > 64  # the cap is not on the frame
    rag = next(ln for ln in ax.get_lines() if ln.get_label() == "rag")
    assert rag.get_xdata()[0] == 0.0 and rag.get_ydata()[0] == 1.0  # visible up to the cap


def test_merge_identical_names_lines_drawn_over_each_other(
    tmp_path: Path, drawn: list[Figure]
) -> None:
    merged = merge_identical({"a": [(1, 0.5)], "b": [(2, 0.1)], "c": [(1, 0.5)]})
    assert list(merged) == ["b", "a = c"]
    privacy_utility_plot(
        tmp_path / "u.png",
        {"murag": [(10.0, 0.0), (40.0, 0.0)], "murag_ada": [(10.0, 0.0), (40.0, 0.0)]},
        {"rag": 1.0, "projection": 1.0, "non-rag": 0.0},
        title="t",
    )
    labels = _labels(_axes(drawn))
    assert "murag = murag_ada" in labels and "rag = projection" in labels


def _private_rag(ablation: dict[str, Any]) -> Any:
    cfg = parse_config(
        {
            "name": "p",
            "seed": 1,
            "corpora": {"c": {"synthetic": "knowledge", "n": 40}},
            "experiments": [{"type": "private_rag", "corpus": "c", "k": 4, **ablation}],
        }
    )
    return create_experiment(cfg.experiments[0], cfg, 0)


def test_projection_ablation_is_drawn_against_dimension(
    tmp_path: Path, drawn: list[Figure]
) -> None:
    exp = _private_rag({"systems": ["projection"], "ablation": "rp_dim", "rp_dims": [5, 25, 100]})
    results = [
        {
            "cell": cell,
            "result": {
                "n": 4,
                "accuracy": min(1.0, cell["dim"] / 100),
                "precision_top50": math.nan,
                "total_epsilon": math.inf,  # every point: the old x axis
                "documents_charged": 0,
                "discoveries": 0,
                "reuse": None,
            },
        }
        for cell in exp.cells()
    ]
    section = exp.report(results, tmp_path)
    ax = _axes(drawn)
    assert "dimension" in ax.get_xlabel() and "ε" not in ax.get_xlabel()
    xs = sorted({float(x) for ln in ax.get_lines() for x in ln.get_xdata()})
    assert xs == [5.0, 25.0, 100.0]
    assert section.figures and (tmp_path / section.figures[0]).exists()


def _y_span(patch: Any) -> tuple[float, float]:
    """(bottom, top) of an axhspan, a Rectangle or (older matplotlib) a Polygon whose y
    vertices are data coordinates."""
    if hasattr(patch, "get_height"):
        return (round(patch.get_y(), 2), round(patch.get_y() + patch.get_height(), 2))
    ys = [float(y) for _, y in patch.get_xy()]
    return (round(min(ys), 2), round(max(ys), 2))


def test_utility_points_and_reference_lines_carry_their_intervals(
    tmp_path: Path, drawn: list[Figure]
) -> None:
    series = {"murag": [(10.0, 0.55, 0.34, 0.74), (100.0, 0.7, 0.5, 0.85)]}
    flat = {"rag (ε = ∞)": (0.75, 0.53, 0.89), "non-rag (ε = 0)": (0.0, 0.0, 0.16)}
    privacy_utility_plot(tmp_path / "u.png", series, flat, title="t")
    ax = _axes(drawn)
    (bars,) = ax.containers  # one error-bar container: the murag points
    segments = bars.lines[2][0].get_segments()
    assert [(round(s[0][1], 2), round(s[1][1], 2)) for s in segments] == [
        (0.34, 0.74),
        (0.5, 0.85),
    ]
    bands = sorted(_y_span(p) for p in ax.patches)
    assert bands == [(0.0, 0.16), (0.53, 0.89)]
    assert "95% CI" in ax.get_ylabel()


def test_auc_heatmap_colours_an_auc_below_chance_by_its_separation(
    tmp_path: Path, drawn: list[Figure]
) -> None:
    """0.25 separates members as well as 0.75 (flip the score): same colour, and neither
    looks like chance; the cell still prints the AUC itself."""
    auc_heatmap(tmp_path / "h.png", ["a"], ["x", "y", "z"], [[0.25, 0.75, 0.5]])
    ax = _axes(drawn)
    (img,) = ax.images
    shown = img.get_array()
    assert shown[0][0] == shown[0][1] == 0.75 and shown[0][2] == 0.5
    assert [t.get_text() for t in ax.texts] == ["0.25", "0.75", "0.50"]
