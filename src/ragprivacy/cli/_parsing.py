"""Parsing of command-line values shared by the commands."""

from __future__ import annotations

from typing import Any

from ragprivacy.errors import ConfigError

__all__ = ["parse_list"]


def parse_list(text: str, kind: type) -> list[Any]:
    """``"1,2,5"`` → ``[1, 2, 5]`` of ``kind``; a value that does not parse is a
    :class:`~ragprivacy.errors.ConfigError` (exit 2 with one line), not a traceback."""
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(
            f"Expected a comma-separated list of {kind.__name__} values; got {text!r}."
        ) from None
