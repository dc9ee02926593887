"""The reference of every experiment-config key, generated from the config dataclasses.

One source of truth: the keys, types and defaults are the fields of the frozen
dataclasses the loader builds (:class:`~ragprivacy.eval.ExperimentConfig`,
:class:`~ragprivacy.eval.CorpusSpec`, :class:`~ragprivacy.eval.ModelSpec`,
:class:`~ragprivacy.eval.RaySpec`,
:class:`~ragprivacy.eval.ExperimentSpec`, each experiment type's ``options_type`` and the
``SystemEntry`` of ``systems`` entries), and each key's meaning is the ``Attributes:``
entry of its class's docstring. ``ragprivacy options --markdown`` prints
:func:`options_markdown`, which docs/options.md holds; a test fails when a key has no
description or the file is stale.

>>> qa = next(s for s in option_sections() if s.name == "qa")
>>> [(o.key, o.type, o.default) for o in qa.options]
[('questions', 'integer', '500'), ('hops', 'list of integer', '[1]')]
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragprivacy.eval.config import (
    CorpusSpec,
    ExperimentConfig,
    ExperimentSpec,
    ModelSpec,
    RaySpec,
)
from ragprivacy.eval.experiments import experiment_types
from ragprivacy.eval.experiments._systems import SystemEntry
from ragprivacy.eval.experiments.base import experiment_class

__all__ = ["OptionDoc", "OptionSection", "field_docs", "option_sections", "options_markdown"]

_ENTRY = re.compile(r"^(\w+(?:, \w+)*):\s*(.*)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class OptionDoc:
    """One config key: its type and default in words, and what it means."""

    key: str
    type: str
    default: str
    doc: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OptionSection:
    """The keys of one place in a config (``corpora.NAME``, an experiment type, ...)."""

    name: str
    where: str
    summary: str
    options: tuple[OptionDoc, ...]


def field_docs(cls: type) -> dict[str, str]:
    """Each field's description from the ``Attributes:`` section of ``cls``'s docstring
    (Google style; ``a, b: text`` describes two fields)."""
    lines = (cls.__doc__ or "").expandtabs().splitlines()
    out: dict[str, str] = {}
    start = next((i for i, ln in enumerate(lines) if ln.strip() == "Attributes:"), None)
    if start is None:
        return out
    indent = len(lines[start]) - len(lines[start].lstrip())
    entry_indent: int | None = None
    names: list[str] = []
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if depth <= indent:
            break
        if entry_indent is None:
            entry_indent = depth
        match = _ENTRY.match(line.strip()) if depth == entry_indent else None
        if match:
            names = match.group(1).split(", ")
            for n in names:
                out[n] = match.group(2)
        else:  # a continuation line of the entry above
            for n in names:
                out[n] = f"{out[n]} {line.strip()}".strip()
    return out


_ROLE = re.compile(r":\w+:`~?([\w.]+)`")


def _md(text: str) -> str:
    """Docstring markup (reST roles, double backticks) as Markdown."""
    text = _ROLE.sub(lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text)
    return text.replace("``", "`")


def _summary(cls: type) -> str:
    """The first paragraph of ``cls``'s docstring, on one line."""
    text = (cls.__doc__ or "").strip().split("\n\n")[0]
    return _md(" ".join(text.split()))


def _type_words(hint: Any) -> str:
    """A field's type as a config author reads it (no ``|``, which tables would split)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        words = [_type_words(a) for a in args if a is not type(None)]
        return " or ".join(words) + (" or null" if type(None) in args else "")
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return "list" if item is Any else f"list of {_type_words(item)}"
    if origin in (Mapping, dict) or hint in (Mapping, dict):
        return "mapping"
    names = {int: "integer", float: "number", str: "string", bool: "true or false"}
    if dataclasses.is_dataclass(hint):
        return "mapping"
    return names.get(hint, "any")


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _default_words(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value: Any = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        if dataclasses.is_dataclass(value):
            return "see below"
    else:
        return "required"
    return json.dumps(_plain(value), ensure_ascii=False)


def _options(cls: type, skip: tuple[str, ...] = ()) -> tuple[OptionDoc, ...]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    return tuple(
        OptionDoc(
            key=f.name,
            type=_type_words(hints[f.name]),
            default=_default_words(f),
            doc=_md(docs.get(f.name, "")),
        )
        for f in dataclasses.fields(cls)
        if f.name not in skip
    )


def option_sections() -> list[OptionSection]:
    """Every place a config can set keys, with the keys it accepts, in config order:
    the top level, ``corpora.NAME``, ``models``, ``experiments[]`` (the keys of every
    type), each registered experiment type's own keys, and ``systems`` entries."""
    sections = [
        OptionSection(
            name="config",
            where="top level",
            summary=_summary(ExperimentConfig),
            options=_options(ExperimentConfig),
        ),
        OptionSection(
            name="corpora",
            where="corpora.NAME",
            summary=_summary(CorpusSpec),
            options=_options(CorpusSpec),
        ),
        OptionSection(
            name="models", where="models", summary=_summary(ModelSpec), options=_options(ModelSpec)
        ),
        OptionSection(
            name="ray", where="ray", summary=_summary(RaySpec), options=_options(RaySpec)
        ),
        OptionSection(
            name="experiments",
            where="experiments[]",
            summary=_summary(ExperimentSpec),
            options=_options(ExperimentSpec),
        ),
    ]
    for name in experiment_types():
        cls = experiment_class(name)
        options_type = cls.options_type
        if options_type is None:
            continue
        sections.append(
            OptionSection(
                name=name,
                where=f"experiments[] with type: {name}",
                summary=_summary(cls),
                options=_options(options_type),
            )
        )
    sections.append(
        OptionSection(
            name="systems",
            where="systems / system_specs entries of membership and extraction",
            summary=(
                "A system under attack: a registered name, or a mapping with these keys; "
                "every other key of the mapping is an option of the system."
            ),
            options=_options(SystemEntry, skip=("options",)),
        )
    )
    return sections


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default_cell(default: str) -> str:
    if default in ("required", "see below"):
        return default
    return "`" + default.replace("|", "\\|") + "`"


def options_markdown() -> str:
    """docs/options.md: one table per section of :func:`option_sections`."""
    out = [
        "<!-- Generated by `ragprivacy options --markdown > docs/options.md` from the config",
        "     dataclasses and their docstrings; edit those, not this file. -->",
        "",
        "# Experiment config options",
        "",
        "Every key a `ragprivacy run` config accepts. Unknown keys, missing required keys",
        "and wrong types are refused with the key's path. An experiment entry takes the",
        "keys of `experiments[]` and those of its type.",
    ]
    for section in option_sections():
        out += [
            "",
            f"## `{section.where}`",
            "",
            section.summary,
            "",
            "| key | type | default | meaning |",
            "|---|---|---|---|",
        ]
        out += [
            f"| `{o.key}` | {o.type} | {_default_cell(o.default)} | {_cell(o.doc)} |"
            for o in section.options
        ]
    return "\n".join(out) + "\n"
