"""The layer rules of docs/architecture.md: every layer imports exactly what the table there
says it may (no exceptions, no cycle), only through the other layer's public ``__init__``
(never one of its submodules), and exports its public names from its ``__init__`` with
``__all__``."""

from __future__ import annotations

import ast
import graphlib
import importlib
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "ragprivacy"
SHARED = {
    "errors",
    "_stats",
    "_threads",
    "_random",
    "_resources",
    "_validation",
    "_registry",
    "_sqlite",
    "_postgres",
    "_storage",
    "_files",
    "_typing",
    "__main__",
}

DOC = SRC.parents[1] / "docs" / "architecture.md"

#: Support modules kept out of their layer's public names on purpose, and who may import
#: them by path: the cheating provider and the synthetic window of the worked example are
#: for testing and demonstrating the verifier (``ragprivacy audit demo --tamper``), never
#: for serving (docs/architecture.md, "The serving core").
DEMO_SUPPORT = {"ragprivacy.audit.cheats": {"cli"}, "ragprivacy.audit.demo": {"cli"}}


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


def _module_name(path: Path) -> str:
    """``src/ragprivacy/eval/experiments/qa.py`` -> ``ragprivacy.eval.experiments.qa``."""
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(
    source: str, module: str, *, package: bool = False
) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names taken from it) for every import in ``source``, the
    source of ``module`` (``package``: its ``__init__``); relative imports are resolved."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if package else 0)]
                target = ".".join([*base, target] if target else base)
            out.append((node.lineno, target, [a.name for a in node.names]))
    return out


def _file_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    source = path.read_text(encoding="utf-8")
    return _imports(source, _module_name(path), package=path.name == "__init__.py")


def _imported_layers(path: Path) -> set[str]:
    found = set()
    for _, name, _ in _file_imports(path):
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


def test_integrations_package_imports_no_framework() -> None:
    """``ragprivacy.integrations`` holds the framework-free sources; each adapter module
    imports its own framework, so the package loads without either extra."""
    import subprocess
    import sys

    code = (
        "import sys, ragprivacy.integrations;"
        "print(','.join(m for m in ('langchain_core','llama_index') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"framework imported by the package: {out.stdout}"


def _is_submodule(layer: str, name: str) -> bool:
    base = SRC / layer / name
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _submodule_imports(imports: list[tuple[int, str, list[str]]], own: str) -> list[str]:
    """The imports, of a module in layer ``own``, that reach into another layer's
    submodules instead of its public ``__init__`` (the shared top-level modules are no
    layer and may be imported by all)."""
    bad = []
    for line, name, names in imports:
        parts = name.split(".")
        if parts[0] != "ragprivacy" or len(parts) < 2 or parts[1] in SHARED | {own}:
            continue
        layer = parts[1]
        if own in DEMO_SUPPORT.get(name, ()):
            continue
        if len(parts) > 2:
            bad.append(f"line {line}: {name}")
            continue
        public = set(getattr(importlib.import_module(f"ragprivacy.{layer}"), "__all__", ()))
        for n in names:
            if n not in public and _is_submodule(layer, n):
                bad.append(f"line {line}: from {name} import {n}")
    return bad


def test_the_submodule_check_sees_every_form() -> None:
    src = """
import ragprivacy.dp
from ragprivacy.dp import ScalarMechanism
from ragprivacy.eval.experiments import helper
from ragprivacy.errors import ConfigError
def lazy():
    import ragprivacy.attacks.collusion
    from ragprivacy.generate.tokens import TOKEN_PATTERN
    from ragprivacy.rag import dp_vote
    from ..attacks.collusion import bayes_llr
    from .experiments import qa
"""
    bad = _submodule_imports(_imports(src, "ragprivacy.eval.runner"), "eval")
    assert [b.split(": ", 1)[1] for b in bad] == [
        "ragprivacy.attacks.collusion",
        "ragprivacy.generate.tokens",
        "from ragprivacy.rag import dp_vote",
        "ragprivacy.attacks.collusion",
    ]


@pytest.mark.parametrize("layer", _layers())
def test_other_layers_are_imported_through_their_public_init(layer: str) -> None:
    bad = {}
    for path in (SRC / layer).rglob("*.py"):
        wrong = _submodule_imports(_file_imports(path), layer)
        if wrong:
            bad[str(path.relative_to(SRC))] = wrong
    assert not bad, (
        f"layer {layer!r} imports submodules of other layers (import their public names "
        f"from ragprivacy.<layer> instead): {bad}"
    )


def test_the_cheating_provider_is_reached_only_by_the_demo() -> None:
    """No serving code imports the cheating provider: the honest AuditWindow has no
    switch for any deviation, and only the demo (and the tests) build a cheat."""
    users = set()
    for path in SRC.rglob("*.py"):
        for _, name, names in _file_imports(path):
            if name == "ragprivacy.audit.cheats" or (
                name == "ragprivacy.audit" and "cheats" in names
            ):
                users.add(str(path.relative_to(SRC)))
    assert users <= {"audit/demo.py", "cli/audit_cmd.py"}, users
    assert "Misbehaviour" not in (SRC / "audit" / "window.py").read_text(encoding="utf-8")


def _release_calls(tree: ast.AST) -> list[int]:
    """Lines calling ``<something>.release(retrievals, ...)`` on a retriever (a first
    argument that is a list or a name of retrievals), the one way to refund a retrieval."""
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "release"
            and node.args
            and isinstance(node.args[0], ast.List | ast.Name | ast.ListComp)
            and any(k.arg == "account" for k in node.keywords)
        ):
            out.append(node.lineno)
    return out


def test_a_retrieval_is_refunded_in_one_place_only() -> None:
    """The failure rule (docs/architecture.md, "A failure is an answer"): systems never
    give a retrieval back themselves; ``rag.charged_on_failure`` does, and only for a
    generator that was never reached."""
    found = {}
    for path in SRC.rglob("*.py"):
        lines = _release_calls(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[str(path.relative_to(SRC))] = lines
    assert list(found) == ["rag/base.py"] and len(found["rag/base.py"]) == 1, found


def test_the_refund_finder_sees_a_refund() -> None:
    planted = "def f(r, got, a):\n    r.release([got], account=a)\n    lock.release()\n"
    assert _release_calls(ast.parse(planted)) == [2]
