"""A real service: state made with the admin CLI, `ragprivacy serve` on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ragprivacy.cli import main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_admin(state: Path, *args: str) -> str:
    """Run ``ragprivacy admin --state STATE ARGS`` in process; returns its stdout."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["admin", "--state", str(state), *args])
    assert code == 0, out.getvalue()
    return out.getvalue()


def write_corpus(path: Path, prefix: str, n: int) -> Path:
    topics = ["asthma", "diabetes", "fracture", "migraine", "anemia", "eczema", "gout"]
    with path.open("w") as f:
        for i in range(n):
            text = f"{prefix} record {i}: the patient has {topics[i % 7]} and visit {i}"
            f.write(json.dumps({"id": f"{prefix}-{i}", "text": text}) + "\n")
    return path


class Server:
    def __init__(self, state: Path, *, workers: int = 1) -> None:
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable, "-m", "ragprivacy.cli", "serve", "--state", str(state),
            "--port", str(self.port), "--workers", str(workers),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stdout.read().decode() if self.proc.stdout else "")
            try:
                if httpx.get(f"{self.url}/v1/audit/windows", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the service did not start within 60 s")

    def stop(self, sig: int = signal.SIGTERM) -> str:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            out, _ = self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, _ = self.proc.communicate()
        return out.decode() if out else ""


@pytest.fixture()
def admin():  # type: ignore[no-untyped-def]
    return run_admin


@pytest.fixture()
def corpus_file():  # type: ignore[no-untyped-def]
    return write_corpus


@pytest.fixture()
def server_factory() -> Iterator:
    started: list[Server] = []

    def start(state: Path, **kw: object) -> Server:
        s = Server(state, **kw)  # type: ignore[arg-type]
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
