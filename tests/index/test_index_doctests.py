"""The examples in the embed and index docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "ragprivacy.embed.lsa",
    "ragprivacy.embed.hashing",
    "ragprivacy.index.exact",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
