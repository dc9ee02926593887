"""The examples of docs/integrations.md run as written (offline) and print what the page
says they print."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from llama_index.core import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
RUNNABLE = [b for b in BLOCKS if "from_service(" not in b]


def test_each_framework_has_an_example_of_about_fifteen_lines() -> None:
    assert len(RUNNABLE) == 2
    for block in RUNNABLE:
        assert len(block.strip().splitlines()) <= 16


@pytest.mark.parametrize("block", RUNNABLE, ids=["langchain", "llama_index"])
def test_example_runs(block: str) -> None:
    before = Settings._tokenizer
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOC), "exec"), {})
    finally:
        Settings._tokenizer = before
    lines = out.getvalue().splitlines()
    ids = [line.split()[0] for line in lines if line.startswith("medical-")]
    assert len(ids) == 3  # k = 3 documents, each with our id and a finite ε
    assert all(float(line.split()[-1]) > 0 for line in lines if line.startswith("medical-"))
