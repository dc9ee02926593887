"""The options reference: generated from the config dataclasses, complete, and current."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ragprivacy.errors import ConfigError
from ragprivacy.eval import (
    CorpusSpec,
    ExperimentConfig,
    ExperimentSpec,
    ModelSpec,
    create_experiment,
    experiment_types,
    option_sections,
    options_markdown,
    parse_config,
)
from ragprivacy.eval.experiments.base import experiment_class
from ragprivacy.eval.schema import field_docs

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "options.md"


def _keys(name: str) -> set[str]:
    return {o.key for o in next(s for s in option_sections() if s.name == name).options}


def test_every_key_has_a_description() -> None:
    missing = [f"{s.where}: {o.key}" for s in option_sections() for o in s.options if not o.doc]
    assert not missing, f"undocumented config keys (add them to the class's Attributes:): {missing}"


def test_sections_are_the_dataclass_fields() -> None:
    for name, cls in (
        ("config", ExperimentConfig),
        ("corpora", CorpusSpec),
        ("models", ModelSpec),
        ("experiments", ExperimentSpec),
    ):
        assert _keys(name) == {f.name for f in dataclasses.fields(cls)}
    for t in experiment_types():
        options_type = experiment_class(t).options_type
        assert options_type is not None, f"experiment type {t!r} declares no options_type"
        assert _keys(t) == {f.name for f in dataclasses.fields(options_type)}


def test_docs_options_md_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == options_markdown(), (
        "docs/options.md is stale; regenerate it: ragprivacy options --markdown > docs/options.md"
    )


def test_field_docs_reads_google_attributes() -> None:
    class Example:
        """Summary.

        Attributes:
            a: first line
                continued.
            b, c: shared.

        Notes: not an attribute.
        """

    assert field_docs(Example) == {"a": "first line continued.", "b": "shared.", "c": "shared."}


def _config_keys(data: Any) -> list[tuple[str, str]]:
    """(section, key) for every key a config file sets."""
    out = [("config", k) for k in data]
    out += [("corpora", k) for spec in (data.get("corpora") or {}).values() for k in spec]
    out += [("models", k) for k in data.get("models") or {}]
    for exp in data["experiments"]:
        common = {f.name for f in dataclasses.fields(ExperimentSpec)}
        for k in exp:
            out.append(("experiments" if k in common else exp["type"], k))
        for entry in exp.get("system_specs", ()):
            if isinstance(entry, dict):
                known = _keys("systems")
                out += [("systems", k) for k in entry if k in known]
    return out


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "configs").glob("*.yaml"))
    + sorted((ROOT / "src/ragprivacy/eval/presets").glob("*.yaml")),
    ids=lambda p: p.name,
)
def test_every_key_of_the_shipped_configs_is_documented(path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for section, key in _config_keys(data):
        assert key in _keys(section), f"{path.name}: {section}.{key} is not in the schema"
        assert re.search(rf"^\| `{re.escape(key)}` \|", text, re.M), f"{key} not in options.md"


def test_unknown_option_lists_every_key_the_entry_takes() -> None:
    data = {
        "name": "t",
        "corpora": {"k": {"synthetic": "knowledge", "n": 30}},
        "experiments": [{"type": "private_rag", "corpus": "k", "epsilon": [1]}],
    }
    config = parse_config(data)
    with pytest.raises(ConfigError) as info:
        create_experiment(config.experiments[0], config, 0)
    message = str(info.value)
    assert "did you mean 'epsilons'?" in message
    listed = set(message.split("expected one of ")[1].split(" (")[0].split(", "))
    assert listed == _keys("experiments") | _keys("private_rag")
