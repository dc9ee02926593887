"""``report.md``: a header with what produced the results, an overview per experiment
type that has one (e.g. the attacks × defenses matrix over every membership experiment),
one section per experiment, and the settings needed to reproduce them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ragprivacy.eval.calls import describe_calls
from ragprivacy.eval.experiments.base import Experiment

__all__ = ["describe_generator", "noise_summary", "write_report"]

_GENERATOR_NOTES = {
    "reference": (
        "the **reference reader**, a deterministic, weight-free stand-in for an "
        "instruction-following LLM that copies what it retrieves (copy distribution over "
        "the retrieved context mixed with an n-gram background model fitted on non-member "
        "text). Its figures say what such a model leaks, not what a given hosted LLM does."
    ),
    "hf": "a Hugging Face causal language model loaded from a local path",
    "gguf": "a causal language model loaded from a local GGUF file (dequantised to float32)",
    "smollm2": (
        "SmolLM2-135M-Instruct, a small instruction-tuned LLM (Q4_1 GGUF, dequantised to "
        "float32), run locally"
    ),
    "openai": "an OpenAI-compatible HTTP endpoint",
}


def describe_generator(spec: str) -> str:
    """One sentence on which generator produced the results (reports must say it)."""
    name = spec.partition(":")[0]
    note = _GENERATOR_NOTES.get(name, "a registered generator backend")
    return f"`{spec}`: {note}" + ("" if note.endswith(".") else ".")


def _simulation_flags(value: Any, out: list[bool]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "simulation" and isinstance(item, bool):
                out.append(item)
            else:
                _simulation_flags(item, out)
    elif isinstance(value, list):
        for item in value:
            _simulation_flags(item, out)


def noise_summary(cells: list[dict[str, Any]]) -> str | None:
    """How the privacy noise of a run's private mechanisms was drawn, from the ``simulation``
    flags their descriptions record (``None`` when no cell ran a private mechanism).

    Experiments build private systems in simulation mode by default (seeded float noise,
    the same distributions as the secure samplers, far faster); a report must say so,
    since such noise protects nothing in a deployment.
    """
    flags: list[bool] = []
    _simulation_flags(cells, flags)
    if not flags:
        return None
    if all(flags):
        return (
            "simulated — every private mechanism drew seeded float noise (`simulation: true`, "
            "the experiments' default: the secure samplers' distributions, not their security)"
        )
    if not any(flags):
        return "secure — exact integer samplers from a cryptographic source"
    return (
        f"mixed — {sum(flags)} of {len(flags)} private mechanisms drew simulated (seeded "
        "float) noise, the others secure noise"
    )


def _calls_lines(calls: dict[str, Any] | None) -> list[str]:
    """The header's lines on a remote endpoint's calls (none for our own systems)."""
    if not calls:
        return []
    return [
        f"- Endpoint calls, this run: {describe_calls(calls['this_run'])}",
        "- Endpoint calls recorded by the cells (finished cells of earlier runs included): "
        + describe_calls(calls["cells"]),
    ]


def write_report(experiments: list[Experiment], results: dict[str, Any], out_dir: Path) -> Path:
    """Write ``out_dir/report.md`` from the run's results; returns its path."""
    settings = results["settings"]
    models = settings["models"]
    lines = [
        f"# {results['name']}",
        "",
        f"- Root seed: `{results['root_seed']}`; started {results['started']}; "
        f"{results['seconds']:.1f} s.",
        f"- Generator: {describe_generator(models['generator'])}",
        f"- Embedder: `{models['embedder']}`; index: `{models['index']}`.",
        *([f"- Noise: {results['noise']}."] if results.get("noise") else []),
        *_calls_lines(results.get("endpoint_calls")),
        "- Versions: "
        + ", ".join(f"{k} {v}" for k, v in results["versions"].items() if k != "platform"),
        "",
    ]
    parts = [
        (exp, [c for c in results["cells"] if c["experiment"] == i])
        for i, exp in enumerate(experiments)
    ]
    by_type: dict[type[Experiment], list[tuple[Experiment, list[dict[str, Any]]]]] = {}
    for exp, cells in parts:
        by_type.setdefault(type(exp), []).append((exp, cells))
    for cls, group in by_type.items():
        overview = cls.overview(group, out_dir)
        if overview is not None:
            lines += [f"## {overview.title}", "", overview.markdown, ""]
    for exp, cells in parts:
        section = exp.report(cells, out_dir)
        lines += [f"## {section.title}", "", section.markdown, ""]
    lines += [
        "## Settings",
        "",
        "```yaml",
        yaml.safe_dump(settings, sort_keys=False).rstrip(),
        "```",
        "",
        "Reproduce with `ragprivacy run CONFIG.yaml --out DIR` on these settings "
        "(`results.json` holds every cell's seed and per-item records).",
        "",
    ]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
