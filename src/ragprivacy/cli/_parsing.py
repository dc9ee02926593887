"""Parsing of command-line values shared by the commands."""

from __future__ import annotations

from typing import Any

from ragprivacy.errors import ConfigError

__all__ = ["parse_list", "split_names"]


def parse_list(text: str, kind: type) -> list[Any]:
    """``"1,2,5"`` → ``[1, 2, 5]`` of ``kind``; a value that does not parse, an empty
    item (``"1,,2"``, a trailing comma) or an empty list is a
    :class:`~ragprivacy.errors.ConfigError` (exit 2 with one line), not a traceback."""
    items = [x.strip() for x in text.split(",")]
    example = "1,2,5" if kind is int else "0.5,1,2"
    if not text.strip() or any(not x for x in items):
        raise ConfigError(
            f"Expected a comma-separated list of {kind.__name__} values with no empty "
            f"items, e.g. {example!r}; got {text!r}."
        )
    try:
        return [kind(x) for x in items]
    except ValueError:
        raise ConfigError(
            f"Expected a comma-separated list of {kind.__name__} values, e.g. {example!r}; "
            f"got {text!r}."
        ) from None


def split_names(values: list[str], option: str) -> list[str]:
    """Names given to a repeatable option, each value possibly a comma-separated list
    (``--attack mba,rag-mia`` is ``--attack mba --attack rag-mia``, as ``--eps`` takes
    lists)."""
    out: list[str] = []
    for value in values:
        items = [x.strip() for x in value.split(",")]
        if any(not x for x in items):
            raise ConfigError(
                f"{option} {value!r} has an empty name; give names separated by single "
                "commas, e.g. 'mba,rag-mia'."
            )
        out += items
    return out
