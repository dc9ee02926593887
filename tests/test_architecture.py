"""The layer rules of ARCHITECTURE.md: no layer imports upward, and every layer's public
names are exported from its ``__init__`` with ``__all__``."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ragprivacy"
SHARED = {"errors", "_auc", "_random", "_validation", "_registry", "_sqlite", "_typing", "__main__"}

# layer -> layers it may import (besides itself and the shared top-level modules)
BASE = {"types", "corpus"}
ALLOWED: dict[str, set[str]] = {
    "types": set(),
    "corpus": {"types"},
    "embed": BASE,
    "index": BASE | {"embed"},
    "dp": BASE,
    "generate": BASE,
    "retrieval": BASE | {"index", "embed", "dp"},
    "rag": BASE | {"retrieval", "index", "embed", "generate", "dp"},
    "attacks": BASE | {"rag", "retrieval", "index", "embed", "generate", "dp"},
    "audit": BASE | {"dp", "embed", "index"},
    "service": BASE | {"rag", "audit", "retrieval", "index", "embed", "generate", "dp"},
    "eval": BASE | {"attacks", "rag", "retrieval", "index", "embed", "generate", "dp", "audit"},
    "cli": None,  # type: ignore[dict-item]  # may import everything
}


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
    if allowed is None:
        return
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
