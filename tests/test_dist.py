"""The wheel ``make dist`` builds installs and runs on its own: built by hatchling at the
pinned version (from the build cache the venv's install filled: nothing is downloaded),
installed into a fresh virtual environment whose own copy of ragprivacy is the wheel's
(the dependencies are the venv's), ``ragprivacy serve --help`` and the service import
run from it, and the wheel holds the package's typing marker and no tests."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"


def test_the_wheel_installs_and_serves_help(tmp_path: Path) -> None:
    assert UV.exists(), "the venv's uv is missing: make venv"
    built = subprocess.run(
        [str(UV), "build", "--offline", "--wheel", "--quiet", "--build-constraints",
         str(ROOT / "requirements" / "build.txt"), "-o", str(tmp_path / "dist"), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("ragprivacy-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "ragprivacy/py.typed" in names and "ragprivacy/service/app.py" in names
    assert not any(n.startswith("tests/") for n in names)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # the dependencies: the venv's own site-packages, after the wheel's copy (no .pth of
    # it is processed, so its editable ragprivacy stays out of sight)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [str(UV), "pip", "install", "--offline", "--quiet", "--no-deps", "--python",
         str(venv / "bin" / "python"), str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import ragprivacy, ragprivacy.service.app; print(ragprivacy.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    ).stdout  # fmt: skip
    assert where.strip().startswith(str(site))  # the wheel's copy, not the checkout
    helped = subprocess.run(
        [str(venv / "bin" / "ragprivacy"), "serve", "--help"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert helped.returncode == 0, helped.stderr
    assert "--rotate-every" in helped.stdout and "--state" in helped.stdout
