"""``admin backup``: a copy of a state directory taken while the service answers, which a
restored service serves and the auditor verifies (PASS) — every record the copied ledger
holds has its witness in the copied state."""

from __future__ import annotations

import contextlib
import io
import json
import threading
from pathlib import Path

import httpx
import pytest

from ragprivacy.cli import main


def test_a_backup_taken_while_serving_is_restored_and_verifies(
    tmp_path: Path,
    admin,
    corpus_file,
    server_factory,  # type: ignore[no-untyped-def]
) -> None:
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "2")
    admin(state, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "clinic", 20)))
    admin(state, "account", "create", "clinic", "alice", "--eps", "4", "--delta", "1e-6",
          "--rate-limit", "400")  # fmt: skip
    key = admin(state, "key", "create", "alice").split()[-1]
    admin(state, "window", "open")
    server = server_factory(state)
    headers = {"Authorization": f"Bearer {key}"}
    stop = threading.Event()
    answered: list[int] = []

    def ask() -> None:  # queries that go on while the backup is taken
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as http:
            while not stop.is_set() and len(answered) < 300:
                r = http.post("/v1/retrieve", json={"query": f"visit {len(answered)}"})
                assert r.status_code == 200, r.text
                answered.append(r.json()["receipt"]["position"])

    asking = threading.Thread(target=ask)
    asking.start()
    try:
        while len(answered) < 5:  # the backup starts with queries in flight
            threading.Event().wait(0.05)
        out = admin(state, "backup", str(tmp_path / "copy"))
    finally:
        stop.set()
        asking.join()
    server.stop()
    assert "backed up 3 file(s)" in out  # the ledger, the state, the identity key
    copy = tmp_path / "copy"
    assert (copy / "identity.key").read_bytes() == (state / "identity.key").read_bytes()
    for path in (copy / "state.sqlite", copy / "ledgers" / "W1.sqlite", copy / "identity.key"):
        assert path.stat().st_mode & 0o777 == 0o600
    assert copy.stat().st_mode & 0o777 == 0o700
    assert not list(tmp_path.glob(".copy.partial-*"))

    restored = server_factory(copy)  # a restore: the copy served as the state
    r = httpx.post(f"{restored.url}/v1/retrieve", json={"query": "after"}, headers=headers)
    assert r.status_code == 200, r.text
    kept = r.json()["receipt"]["position"]
    assert 5 <= kept <= len(answered)  # the copy holds what was answered before it
    admin(copy, "window", "close", "--export-auditor", str(tmp_path / "auditor"))
    verdict = io.StringIO()
    with contextlib.redirect_stdout(verdict):
        code = main(["audit", "verify", "--url", restored.url, "--auditor",
                     str(tmp_path / "auditor"), "--json"])  # fmt: skip
    assert code == 0, verdict.getvalue()
    assert json.loads(verdict.getvalue())["verdict"] == "PASS"
    restored.stop()


def test_a_backup_refuses_an_existing_directory(
    tmp_path: Path,
    admin,
    capsys: pytest.CaptureFixture[str],  # type: ignore[no-untyped-def]
) -> None:
    """(A PostgreSQL state's refusal is in test_service_postgres.py.)"""
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic")
    (tmp_path / "taken").mkdir()
    capsys.readouterr()
    assert main(["admin", "--state", str(state), "backup", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err.strip()
    assert "exists; name a new one" in err and len(err.splitlines()) == 1
    assert list((tmp_path / "taken").iterdir()) == []
