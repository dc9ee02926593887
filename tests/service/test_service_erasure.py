"""Erasure: ``docs remove`` and ``tenant delete``. A removed document's text leaves the
state's files (not only its rows), at once or when the open window that committed it
closes; the next window serves and commits the rest, and verifies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ragprivacy.audit import Verifier, load_window
from ragprivacy.cli import main
from ragprivacy.errors import DataError
from ragprivacy.service import ServiceProvider, ServiceState, export_auditor

MARKER = "ZEBULON-QUARTZ-7731"  # the text that must disappear


def _corpus(path: Path) -> Path:
    rows = [{"id": f"d{i}", "text": f"note {i}: the patient has asthma, visit {i}"}
            for i in range(8)]  # fmt: skip
    rows.insert(3, {"id": "erase-me", "text": f"note: {MARKER} has asthma and gout"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _files_hold(state: Path, marker: str) -> list[str]:
    """The state's files whose bytes hold ``marker``, read by another process: closing a
    descriptor of a database file drops every POSIX lock this process's own SQLite
    connections hold on it (the test's in-process admin keeps some open)."""
    script = (
        "import sys, pathlib; root, m = pathlib.Path(sys.argv[1]), sys.argv[2].encode()\n"
        "print('\\n'.join(f.name for f in root.rglob('*') if f.is_file() and m in f.read_bytes()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(state), marker],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if line]


def _setup(tmp_path: Path, admin) -> tuple[Path, str]:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "3")
    admin(state, "docs", "add", "clinic", str(_corpus(tmp_path / "c.jsonl")))
    admin(state, "account", "create", "clinic", "alice", "--eps", "4", "--delta", "1e-6",
          "--rate-limit", "20")  # fmt: skip
    return state, admin(state, "key", "create", "alice").split()[-1]


def test_a_removed_document_leaves_the_files_and_the_next_window(
    tmp_path: Path, admin, capsys
) -> None:  # type: ignore[no-untyped-def]
    state, _ = _setup(tmp_path, admin)
    assert _files_hold(state, MARKER)  # stored, before
    out = admin(state, "docs", "remove", "clinic", "erase-me")
    assert "1 document(s) erased" in out
    assert _files_hold(state, MARKER) == []  # no row, no freed page, no log frame
    st = ServiceState(state, create=False)
    ids, _ = st.texts("clinic")
    assert "erase-me" not in ids and len(ids) == 8
    positions = [r[0] for r in st._rows("SELECT pos FROM documents WHERE tenant = 'clinic'")]
    assert sorted(positions) == list(range(8))  # renumbered: the window's order
    st.close()
    code = main(["admin", "--state", str(state), "docs", "remove", "clinic", "d1", "nope"])
    assert code == 2 and "no document 'nope'" in capsys.readouterr().err
    assert "d1" in ServiceState(state, create=False).texts("clinic")[0]  # nothing removed
    admin(state, "window", "open")
    provider = ServiceProvider(ServiceState(state, create=False))
    served = provider.retrieve("alice", f"{MARKER} asthma gout", k=3)
    assert all(MARKER not in text for _, text in served.documents)
    provider.close()


def test_an_open_window_serves_what_it_committed_until_it_closes(
    tmp_path: Path, admin, server_factory
) -> None:  # type: ignore[no-untyped-def]
    state, key = _setup(tmp_path, admin)
    admin(state, "window", "open")
    out = admin(state, "docs", "remove", "clinic", "erase-me")
    assert "when the open window closes" in out
    assert _files_hold(state, MARKER)  # the open window still reads it
    server = server_factory(state)
    r = httpx.post(f"{server.url}/v1/retrieve", json={"query": "asthma"},
                   headers={"Authorization": f"Bearer {key}"}, timeout=60)  # fmt: skip
    assert r.status_code == 200
    out = admin(state, "window", "close", "--export-auditor", str(tmp_path / "aud"))
    assert "erased what was pending for: clinic" in out
    server.stop()
    assert _files_hold(state, MARKER) == []
    transcript, receipts, package = load_window(tmp_path / "aud")
    assert Verifier().verify(transcript, receipts, package).passed  # exported before erasure
    st = ServiceState(state, create=False)
    with pytest.raises(DataError, match="can no longer be rebuilt"):
        export_auditor(st, "W1", tmp_path / "again")
    st.close()


def test_a_deleted_tenant_s_keys_stop_at_once_and_the_rest_goes_at_close(
    tmp_path: Path, admin, server_factory
) -> None:  # type: ignore[no-untyped-def]
    state, key = _setup(tmp_path, admin)
    admin(state, "tenant", "create", "other", "--k", "2")
    admin(state, "docs", "add", "other", str(_corpus(tmp_path / "o.jsonl")))
    admin(state, "account", "create", "other", "bob", "--eps", "4", "--delta", "1e-6",
          "--rate-limit", "5")  # fmt: skip
    admin(state, "window", "open")
    assert main(["admin", "--state", str(state), "tenant", "delete", "clinic"]) == 2  # no --yes
    out = admin(state, "tenant", "delete", "clinic", "--yes")
    assert "when the open window closes" in out and "alice" in out
    server = server_factory(state)
    r = httpx.post(f"{server.url}/v1/retrieve", json={"query": "asthma"},
                   headers={"Authorization": f"Bearer {key}"}, timeout=60)  # fmt: skip
    assert r.status_code == 401  # its keys stopped at once
    server.stop()
    admin(state, "window", "close")
    st = ServiceState(state, create=False)
    assert set(st.tenants()) == {"other"} and set(st.accounts()) == {"bob"}
    st.close()
    admin(state, "window", "open")  # the next window is built without it


def test_the_admin_cli_reads_ids_from_a_file(tmp_path: Path, admin) -> None:  # type: ignore[no-untyped-def]
    state, _ = _setup(tmp_path, admin)
    ids = tmp_path / "ids.txt"
    ids.write_text("d1\n\nd2\n")
    out = subprocess.run(
        [sys.executable, "-m", "ragprivacy.cli", "admin", "--state", str(state), "docs",
         "remove", "clinic", "--ids-file", str(ids)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "2 document(s) erased" in out
