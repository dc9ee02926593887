"""docs/service.md runs verbatim: its shell blocks, in order, in a fresh directory."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_service_page_runs_verbatim(tmp_path: Path) -> None:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    script = "set -euo pipefail\n" + "\n".join(blocks)
    env = {
        **os.environ,
        "PORT": str(free_port()),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    run = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "PASS  epsilon_audit = 8" in run.stdout
    assert (tmp_path / "state" / "identity.key").stat().st_mode & 0o777 == 0o600
    log = (tmp_path / "server.log").read_text()
    for secret in ("rpk_",):  # no key ever reaches the server's log
        assert secret not in log
