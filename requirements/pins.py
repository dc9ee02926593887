"""Read the project's declared requirements out of ``pyproject.toml`` for ``make lock``.

``pyproject.toml`` is the one home of the version bounds; the lock files are generated from
it. Two lists cannot be had from the locking tool directly, so this script prints them:

``lower-bounds``
    For every direct requirement ``name>=X.Y`` (core and every extra), the constraint
    ``name<X.(Y+1)``. Resolved with ``--resolution lowest-direct``, this makes each direct
    requirement take its oldest release in the declared minimum's series. Plain
    ``lowest-direct`` is not enough: when a newest transitive dependency conflicts with a
    direct one's minimum, the resolver moves the *direct* one up (``datasets>=2.19`` came
    out as datasets 5.2), and the minimum we claim is then never tested.
``build-requires``
    The build system's requirements (``[build-system] requires``), to pin the backend that
    builds the editable install.
``diff OLD NEW``
    What differs between two generated requirement files (``make test-latest`` prints what
    the newest releases change against the lock).

Requirements named in ``--skip`` (e.g. torch, which only one wheel on disk provides) are
left out.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_LOWER = re.compile(
    r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*>=\s*([0-9]+(?:\.[0-9]+)*)"
)


def _next_series(version: str) -> str:
    parts = [int(p) for p in version.split(".")]
    parts[-1] += 1
    return ".".join(str(p) for p in parts)


def lower_bounds(pyproject: dict[str, Any], skip: set[str]) -> list[str]:
    project = pyproject["project"]
    requirements: list[str] = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        requirements.extend(extra)
    bounds: dict[str, str] = {}
    for requirement in requirements:
        match = _LOWER.match(requirement)
        if match is None:
            continue
        name = match.group(1).lower().replace("_", "-")
        if name == project["name"] or name in skip:
            continue
        bounds[name] = _next_series(match.group(3))
    return [f"{name}<{bound}" for name, bound in sorted(bounds.items())]


def build_requires(pyproject: dict[str, Any]) -> list[str]:
    return list(pyproject.get("build-system", {}).get("requires", []))


def pinned(path: Path) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line of a generated requirement file."""
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _PIN.match(line)
        if match is not None:
            pins[match.group(1)] = match.group(2)
    return pins


def diff(old: dict[str, str], new: dict[str, str]) -> list[str]:
    lines = []
    for name in sorted(old.keys() | new.keys()):
        before, after = old.get(name, "-"), new.get(name, "-")
        if before != after:
            lines.append(f"  {name}: {before} -> {after}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["lower-bounds", "build-requires", "diff"])
    parser.add_argument("files", nargs="*", type=Path, help="diff: the OLD and NEW files")
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--skip", action="append", default=[], help="a name to leave out")
    args = parser.parse_args(argv)
    pyproject = tomllib.loads(args.pyproject.read_text(encoding="utf-8"))
    if args.what == "lower-bounds":
        lines = lower_bounds(pyproject, {s.lower() for s in args.skip})
    elif args.what == "build-requires":
        lines = build_requires(pyproject)
    else:
        if len(args.files) != 2:
            parser.error("diff takes two files: OLD NEW")
        old, new = args.files
        changes = diff(pinned(old), pinned(new))
        lines = [f"{new} differs from {old} in {len(changes)} package(s):", *changes]
        if not changes:
            lines = [f"{new} pins the same versions as {old}"]
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
