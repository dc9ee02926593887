"""Parameter checks with one message style.

Messages read: "The 'delta' parameter must be in (0, 1); got 1.5."
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import Any

from ragprivacy.errors import ConfigError

__all__ = [
    "check_choice",
    "check_in_range",
    "check_positive",
    "check_positive_int",
    "check_probability",
]


def _fail(name: str, rule: str, value: Any) -> ConfigError:
    return ConfigError(f"The '{name}' parameter must be {rule}; got {value!r}.")


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> float:
    """Check a finite real that is > 0 (or >= 0 with ``allow_zero``)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise _fail(name, "a number", value) from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise _fail(name, ">= 0" if allow_zero else "> 0", value)
    return v


def check_positive_int(name: str, value: int, *, allow_zero: bool = False) -> int:
    """Check an integer that is >= 1 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise _fail(name, "an integer", value)
    v = int(value)
    if v < 0 or (v == 0 and not allow_zero):
        raise _fail(name, "an integer >= 0" if allow_zero else "an integer >= 1", value)
    return v


def check_in_range(
    name: str,
    value: float,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Check ``low <= value <= high`` (either end may be open)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise _fail(name, "a number", value) from None
    ok = (
        math.isfinite(v)
        and (v > low if low_open else v >= low)
        and (v < high if high_open else v <= high)
    )
    if not ok:
        lb = "(" if low_open else "["
        rb = ")" if high_open else "]"
        raise _fail(name, f"in {lb}{low:g}, {high:g}{rb}", value)
    return v


def check_probability(name: str, value: float, *, open_interval: bool = False) -> float:
    """Check a probability in [0, 1] (or (0, 1) with ``open_interval``)."""
    return check_in_range(name, value, 0.0, 1.0, low_open=open_interval, high_open=open_interval)


def check_choice(name: str, value: str, choices: Iterable[str]) -> str:
    """Check that ``value`` is one of ``choices`` (a near miss is named, for a typo).

    >>> try:
    ...     check_choice("system", "rgg", ["rag", "dp_vote"])
    ... except ValueError as exc:
    ...     print(str(exc).split("; ")[1])
    got 'rgg' (did you mean 'rag'?).
    """
    options = sorted(choices)
    if value not in options:
        error = _fail(name, "one of " + ", ".join(repr(c) for c in options), value)
        near = difflib.get_close_matches(value, options, n=1) if isinstance(value, str) else []
        if near:
            error = ConfigError(f"{str(error).rstrip('.')} (did you mean {near[0]!r}?).")
        raise error
    return value
