"""The examples in ragprivacy.dp's docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ragprivacy.dp

MODULES = sorted(
    m.name for m in pkgutil.iter_modules(ragprivacy.dp.__path__, prefix="ragprivacy.dp.")
)


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
