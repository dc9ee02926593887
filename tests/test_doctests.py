"""The examples in every module's docstrings run and give what they show (package-wide)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import ragprivacy

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(ragprivacy.__path__, prefix="ragprivacy.")
    if m.name != "ragprivacy.__main__"  # running it would start the command line
)


def test_every_layer_is_covered() -> None:
    layers = {name.split(".")[1] for name in MODULES if name.count(".") >= 2}
    assert {"dp", "retrieval", "rag", "audit", "eval", "types", "index"} <= layers


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} doctest(s) of {name} failed"
