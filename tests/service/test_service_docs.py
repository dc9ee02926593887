"""docs/service.md runs verbatim: its shell blocks, in order, in a fresh directory."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "service.md"
ATTEMPTS = 3  # a port another process took first is given up for another one


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_page(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The script in ``cwd``, in a process group of its own, all of which is gone after
    it (the server it starts in the background too, should the page fail before its
    ``kill``)."""
    cwd.mkdir()
    env = {
        **os.environ,
        "PORT": str(free_port()),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=480)
    except subprocess.TimeoutExpired:
        out, err = "", "timed out"
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_the_service_page_runs_verbatim(tmp_path: Path) -> None:
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    script = "set -euo pipefail\n" + "\n".join(blocks)
    for attempt in range(ATTEMPTS):
        cwd = tmp_path / f"run{attempt}"
        run = _run_page(script, cwd)
        log = cwd / "server.log"
        taken = log.is_file() and "address already in use" in log.read_text().lower()
        if run.returncode == 0 or not taken:
            break
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "PASS  epsilon_audit = 8" in run.stdout
    assert (cwd / "state" / "identity.key").stat().st_mode & 0o777 == 0o600
    # the operating walk-through: HTTPS, the schedule's window, metrics, the access log
    assert '"window_id":"W2"' in run.stdout and "ragprivacy_ledger_records 1.0" in run.stdout
    assert '"path": "/v1/retrieve", "status": 200' in run.stdout
    assert (cwd / "key.pem").stat().st_mode & 0o777 == 0o600
    # the erased document is not in the next window; its export went to the packages
    assert "window W3 open (clinic: 299, firm: 200" in run.stdout
    assert (cwd / "packages" / "W2" / "auditor.json").stat().st_mode & 0o777 == 0o600
    # the backup holds the state, every ledger and the filters, each 0600
    backup = cwd / "backup-1"
    copied = sorted(p.relative_to(backup).as_posix() for p in backup.rglob("*") if p.is_file())
    assert copied == [
        "filters/hotline.sqlite", "identity.key", "ledgers/W1.sqlite", "ledgers/W2.sqlite",
        "ledgers/W3.sqlite", "state.sqlite",
    ]  # fmt: skip
    assert all((backup / name).stat().st_mode & 0o777 == 0o600 for name in copied)
    log = (cwd / "server.log").read_text()
    for secret in ("rpk_",):  # no key ever reaches the server's log
        assert secret not in log
