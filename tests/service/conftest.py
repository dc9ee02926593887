"""A real service: state made with the admin CLI, `ragprivacy serve` on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragprivacy.cli import main


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: ``serve`` options for a test whose invariant is what many requests of one account at
#: once do to the ledger or the budgets: no limit on an account's requests in progress
#: (the limit itself has its own test)
MANY_AT_ONCE = ("--max-inflight", "100000")


def unanswered(
    jobs: list[tuple[str, str]], answers: list[Any], keys: dict[str, str], window: str = "W1"
) -> list[dict[str, Any]]:
    """What :class:`ragprivacy.service.Client` logs for the requests of ``jobs`` (key,
    query) that brought no receipt back — no answer at all, or a 5xx without one — so
    that a record appended before the failure is not taken for one the account never
    asked for: (window, account, H(q)), the account by its pseudonym in the window as its
    receipts name it (None, any account, before it has one)."""
    from ragprivacy.audit import query_hash

    account_of = {key: account for account, key in keys.items()}
    alias = {}  # an account's name -> its pseudonym, from its receipts
    for answer in answers:
        receipt = _json(answer).get("receipt") if answer is not None else None
        if isinstance(receipt, dict):
            alias[receipt["holder"]] = receipt["account"]
    out = []
    for (key, query), answer in zip(jobs, answers, strict=True):
        lost = answer is None or (
            answer.status_code >= 500 and not isinstance(_json(answer).get("receipt"), dict)
        )
        if lost:
            out.append({
                "window_id": window,
                "account": alias.get(account_of[key]),
                "query_hash": query_hash(query),
            })  # fmt: skip
    return out


def _json(answer: Any) -> dict[str, Any]:
    try:
        body = answer.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def run_admin(state: Path | str, *args: str) -> str:
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


def _listening_sockets(port: int) -> set[str]:
    """The inodes of the TCP sockets listening on ``port`` (``/proc/net/tcp*``)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # LISTEN
                found.add(fields[9])
    return found


def listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on ``port`` — so that what
    answers there is that process, not another one that took the port between
    :func:`free_port` and the bind (another test process picking ports at the same time).
    True where ``/proc`` cannot tell."""
    if not Path("/proc/net/tcp").is_file():
        return True
    inodes = _listening_sockets(port)
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False


class Server:
    """``ragprivacy serve`` on a free port of 127.0.0.1, ready when it answers there and
    holds the listening socket itself. A port another process took first (the service
    then exits: address already in use) is given up for another one."""

    ATTEMPTS = 5
    START_S = 120  # a busy machine may take a while to import and start the service

    def __init__(
        self,
        state: Path | str,
        *,
        workers: int = 1,
        extra: tuple[str, ...] = (),
        scheme: str = "http",
    ) -> None:
        self.state = state
        for attempt in range(self.ATTEMPTS):
            self.port = free_port()
            self.url = f"{scheme}://127.0.0.1:{self.port}"
            cmd = [
                sys.executable, "-m", "ragprivacy.cli", "serve", "--state", str(state),
                "--port", str(self.port), "--workers", str(workers), *extra,
            ]  # fmt: skip
            # a file, not a pipe: a pipe nobody reads fills with the access log and
            # blocks the service
            self.log = tempfile.TemporaryFile()  # noqa: SIM115 (read until the server stops)
            self.proc = subprocess.Popen(
                cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
            )
            output = self._wait_ready()
            if output is None:
                return
            self.log.close()
            if "address already in use" not in output.lower() or attempt == self.ATTEMPTS - 1:
                raise RuntimeError(output)

    def _wait_ready(self) -> str | None:
        """None once the service is ready; its output if it exited first."""
        deadline = time.monotonic() + self.START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return self.output()
            try:
                if httpx.get(
                    f"{self.url}/v1/audit/windows", timeout=1, verify=False
                ).status_code == 200 and listens_on(self.proc.pid, self.port):
                    return None
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop(signal.SIGKILL)
        raise RuntimeError(f"the service did not start within {self.START_S} s")

    def output(self) -> str:
        """What the service wrote so far (stdout and stderr)."""
        if self.log.closed:
            return self._final
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> str:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._final = self.output()
        self.log.close()
        return self._final


@pytest.fixture(scope="session")
def admin():  # type: ignore[no-untyped-def]
    return run_admin


@pytest.fixture(scope="session")
def corpus_file():  # type: ignore[no-untyped-def]
    return write_corpus


def _servers() -> Iterator:
    started: list[Server] = []

    def start(state: Path, **kw: object) -> Server:
        s = Server(state, **kw)  # type: ignore[arg-type]
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture()
def server_factory() -> Iterator:
    """``start(state, workers=N)`` → a running server, stopped after the test."""
    yield from _servers()


@pytest.fixture(scope="module")
def module_server_factory() -> Iterator:
    """Like :func:`server_factory`, for servers a whole test module shares."""
    yield from _servers()


# ---------------------------------------------------------------- two tenants, one module
#: The accounts of each tenant in :func:`tenants_service_factory`'s states.
TENANT_ACCOUNTS = {"clinic": ("alice", "bob"), "firm": ("carol", "dave")}
_TOPICS = ["asthma", "diabetes", "fracture", "migraine", "anemia", "eczema", "gout"]


class TenantsService:
    """A running service over two tenants (``clinic``, K = 3, and ``firm``, K = 2) whose
    documents share their words (one query matches both, were they in one index) and the
    id ``shared-0``; each text carries a canary no query contains. ``keys`` holds one valid
    key per account, ``revoked`` a revoked key per account, ``late`` the key of an account
    made after the window opened (not in it)."""

    def __init__(self, state: Path, server: Server, rate_limit: int) -> None:
        self.state = state
        self.server = server
        self.url = server.url
        self.rate_limit = rate_limit
        self.keys: dict[str, str] = {}
        self.revoked: dict[str, str] = {}
        self.late = ""
        self.tenant_of = {a: t for t, accounts in TENANT_ACCOUNTS.items() for a in accounts}
        self.documents: dict[str, dict[str, str]] = {}  # tenant -> {id: text}
        self.canaries: dict[str, list[str]] = {}  # tenant -> canaries

    def headers(self, account: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[account]}"}

    def admin(self, *args: str) -> str:
        """``ragprivacy admin --state STATE ARGS`` on this service's state (its stdout)."""
        return run_admin(self.state, *args)


def write_tenant_corpus(path: Path, tenant: str, n: int) -> tuple[dict[str, str], list[str]]:
    """``n`` documents of ``tenant`` at ``path``: ({id: text}, canaries)."""
    import hashlib

    docs, canaries = {}, []
    for i in range(n):
        tag = hashlib.sha256(f"{tenant}/{i}".encode()).hexdigest()[:6]
        canary = f"{tenant.upper()}CANARY{i:03d}Q{tag}"
        doc_id = "shared-0" if i == 0 else f"{tenant}-{i}"
        docs[doc_id] = f"record {i}: the patient has {_TOPICS[i % 7]} and visit {i} ({canary})"
        canaries.append(canary)
    with path.open("w") as f:
        for doc_id, text in docs.items():
            f.write(json.dumps({"id": doc_id, "text": text}) + "\n")
    return docs, canaries


@pytest.fixture(scope="module")
def tenants_service_factory(tmp_path_factory) -> Iterator:  # type: ignore[no-untyped-def]
    """``start(rate_limit=...)`` → a :class:`TenantsService`, shared by one test module and
    stopped after it."""
    started: list[Server] = []

    def start(
        *, rate_limit: int = 1000, workers: int = 1, extra: tuple[str, ...] = ()
    ) -> TenantsService:
        root = tmp_path_factory.mktemp("tenants")
        state = root / "state"
        run_admin(state, "tenant", "create", "clinic", "--k", "3")
        run_admin(state, "tenant", "create", "firm", "--k", "2")
        corpora = {}
        for tenant, n in [("clinic", 60), ("firm", 30)]:
            corpora[tenant] = write_tenant_corpus(root / f"{tenant}.jsonl", tenant, n)
            run_admin(state, "docs", "add", tenant, str(root / f"{tenant}.jsonl"))
        keys, revoked = {}, {}
        for tenant, accounts in TENANT_ACCOUNTS.items():
            for account in accounts:
                run_admin(state, "account", "create", tenant, account, "--eps", "4",
                          "--delta", "1e-6", "--rate-limit", str(rate_limit))  # fmt: skip
                revoked[account] = run_admin(state, "key", "create", account).split()[-1]
                run_admin(state, "key", "revoke", revoked[account].split("_")[1])
                keys[account] = run_admin(state, "key", "create", account).split()[-1]
        run_admin(state, "window", "open")
        run_admin(state, "account", "create", "firm", "late", "--eps", "4", "--delta", "1e-6",
                  "--rate-limit", str(rate_limit))  # fmt: skip
        late = run_admin(state, "key", "create", "late").split()[-1]
        server = Server(state, workers=workers, extra=extra)
        started.append(server)
        out = TenantsService(state, server, rate_limit)
        out.keys, out.revoked, out.late = keys, revoked, late
        for tenant, (docs, canaries) in corpora.items():
            out.documents[tenant], out.canaries[tenant] = docs, canaries
        return out

    yield start
    for s in started:
        s.stop()
