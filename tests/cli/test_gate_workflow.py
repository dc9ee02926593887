"""docs/ci/privacy-gate.sh — what the documented GitHub Actions workflow runs — runs here
as written (small): a service started in the job, attacked over HTTP, then gated."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "ci" / "privacy-gate.sh"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_documented_gate_runs_and_passes_a_noisy_top_k_service(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TARGETS": "20",
        "OUT": str(tmp_path / "gate"),
        "PORT": str(_port()),
        "BASELINE": str(tmp_path / "no-baseline-yet.json"),
    }
    done = subprocess.run(
        ["bash", str(SCRIPT)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "no baseline at" in done.stdout and "PASS" in done.stdout
    report = json.loads((tmp_path / "gate" / "gate.json").read_text())
    assert report["passed"] and report["checks"]
    assert ET.parse(tmp_path / "gate" / "gate.xml").getroot().get("failures") == "0"
