"""The layer rules of docs/architecture.md: every layer imports exactly what the table there
says it may (no exceptions, no cycle), and exports its public names from its ``__init__``
with ``__all__``."""

from __future__ import annotations

import ast
import graphlib
import importlib
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ragprivacy"
SHARED = {"errors", "_auc", "_random", "_validation", "_registry", "_sqlite", "_typing", "__main__"}

DOC = SRC.parents[1] / "docs" / "architecture.md"


def _allowed_from_doc() -> dict[str, set[str]]:
    """layer -> layers it may import, read from the table in docs/architecture.md."""
    allowed: dict[str, set[str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| `([a-z_]+)` \| ([^|]*) \|", line)
        if m:
            cell = m.group(2).strip()
            allowed[m.group(1)] = set() if cell == "—" else {x.strip() for x in cell.split(",")}
    return allowed


ALLOWED = _allowed_from_doc()


def test_the_documented_arrows_are_a_hierarchy() -> None:
    assert ALLOWED, "docs/architecture.md has lost its layer table"
    for layer, deps in ALLOWED.items():
        assert deps <= set(ALLOWED), f"{layer} may import unknown layers {deps - set(ALLOWED)}"
        assert layer not in deps
    list(graphlib.TopologicalSorter(ALLOWED).static_order())  # raises CycleError on a cycle


def _layers() -> list[str]:
    return sorted(p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def _imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "ragprivacy" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_every_layer_is_known() -> None:
    unknown = set(_layers()) - set(ALLOWED)
    assert not unknown, f"add {unknown} to ALLOWED with its permitted imports"


@pytest.mark.parametrize("layer", _layers())
def test_no_upward_imports(layer: str) -> None:
    allowed = ALLOWED[layer]
    bad = {}
    for path in (SRC / layer).rglob("*.py"):
        wrong = _imported_layers(path) - allowed - SHARED - {layer}
        if wrong:
            bad[str(path.relative_to(SRC))] = sorted(wrong)
    assert not bad, f"layer {layer!r} imports upward: {bad}"


@pytest.mark.parametrize("layer", _layers())
def test_exports(layer: str) -> None:
    module = importlib.import_module(f"ragprivacy.{layer}")
    exported = getattr(module, "__all__", None)
    assert exported, f"ragprivacy.{layer} must define __all__"
    assert len(set(exported)) == len(exported)
    for name in exported:
        assert hasattr(module, name), f"ragprivacy.{layer}.{name} is in __all__ but missing"
    assert list(exported) == sorted(exported), "keep __all__ sorted"


def test_core_import_does_not_pull_heavy_backends() -> None:
    import subprocess
    import sys

    code = (
        "import sys, ragprivacy.embed, ragprivacy.index, ragprivacy.generate, "
        "ragprivacy.rag, ragprivacy.eval, ragprivacy.cli;"
        "print(','.join(m for m in ('torch','transformers','faiss','sentence_transformers')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"heavy modules imported eagerly: {out.stdout}"
