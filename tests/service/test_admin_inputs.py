"""Nothing an admin types can wedge the service or lose data: account policies a window
could not commit, document files that would collide or hold bad text, window ids that
would leave the state directory, and files holding secrets that were ever readable by
another local user."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from tests.service.conftest import run_admin

from ragprivacy.audit import load_window
from ragprivacy.cli import main
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.service import ServiceState, export_auditor, open_window
from ragprivacy.types import Document


def _state(tmp_path: Path, mode: str = "noisy_topk") -> ServiceState:
    state = ServiceState(tmp_path / "state", create=True)
    state.create_tenant("t", mode=mode, k=2)
    state.add_documents("t", [Document(f"d{i}", f"note {i} about gout") for i in range(4)])
    return state


@pytest.mark.parametrize(
    ("epsilon", "rate_limit", "advice"),
    [
        (1e-9, 10, "raise ε or lower r"),
        (1e308, 10, "lower ε"),
        (1.0, 99_999_999_999, "raise ε or lower r"),
    ],
)
def test_an_account_no_window_could_serve_is_refused_and_windows_still_open(
    tmp_path: Path, epsilon: float, rate_limit: int, advice: str
) -> None:
    state = _state(tmp_path)
    with pytest.raises(ConfigError, match=advice) as refused:
        state.create_account("t", "x", epsilon=epsilon, delta=1e-6, rate_limit=rate_limit)
    assert "\n" not in str(refused.value)
    assert state.accounts() == {}  # nothing stored
    state.create_account("t", "a", epsilon=4.0, delta=1e-6, rate_limit=100)
    assert open_window(state).status == "open"


def test_a_voting_account_whose_budget_buys_no_answer_is_refused(tmp_path: Path) -> None:
    state = _state(tmp_path, mode="dp_vote")
    eps_q = float(state.tenants()["t"]["epsilon_q"])
    with pytest.raises(ConfigError, match="buys no answer"):
        state.create_account("t", "x", epsilon=eps_q / 2, delta=1e-6, rate_limit=10)
    state.create_account("t", "a", epsilon=eps_q, delta=1e-6, rate_limit=10)


def test_id_less_files_added_one_after_another_lose_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_admin(state, "tenant", "create", "t")
    for n, texts in enumerate([["first a", "first b"], ["second a", "second b", "first a"]]):
        path = tmp_path / f"f{n}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        out = run_admin(state, "docs", "add", "t", str(path))
    assert "2 added, 1 already there" in out  # the repeated text has the same id
    ids, texts = ServiceState(state).texts("t")
    assert sorted(texts) == ["first a", "first b", "second a", "second b"]
    assert all(i.startswith("doc-") and len(i) == 20 for i in ids)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Document("x", "   "), "empty text"),
        (Document("x", "bad \ud800 text"), "lone surrogate"),
        (Document("d1", "another text under a repeated id"), "given twice"),
    ],
)
def test_one_bad_document_refuses_the_whole_batch(
    tmp_path: Path, bad: Document, message: str
) -> None:
    state = _state(tmp_path)
    batch = [Document("n1", "a good note"), Document("d1", "a good one too"), bad]
    with pytest.raises(DataError, match=message):
        state.add_documents("t", batch, batch=1)  # one write per document, were it let
    assert state.tenants()["t"]["documents"] == 4


def test_a_file_with_a_lone_surrogate_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text('{"id": "a", "text": "ok"}\n{"id": "b", "text": "bad \\ud800"}\n')
    run_admin(tmp_path / "state", "tenant", "create", "t")
    code = main(["admin", "--state", str(tmp_path / "state"), "docs", "add", "t", str(path)])
    err = capsys.readouterr().err
    assert code != 0 and err.count("\n") == 1 and "line 2" in err and "lone surrogate" in err
    assert ServiceState(tmp_path / "state").tenants()["t"]["documents"] == 0


@pytest.mark.parametrize("window_id", ["../../x", "a/b", "x" * 65])
def test_a_window_id_that_is_not_one_name_is_refused(tmp_path: Path, window_id: str) -> None:
    state = _state(tmp_path)
    state.create_account("t", "a", epsilon=4.0, delta=1e-6, rate_limit=10)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(ConfigError, match="window id"):
        open_window(state, window_id)
    assert sorted(p for p in tmp_path.rglob("*")) == before
    assert state.open_windows() == []


def test_secret_files_are_created_private_never_narrowed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a umask that leaves new files world-readable, in a directory someone else
    made open, the state database and the auditor package are 0600 from the first byte:
    nothing is chmodded after it was written (a chmod fails the test)."""

    def no_chmod(*_a: object, **_k: object) -> None:
        raise AssertionError("a secret file was narrowed after it was created")

    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(Path, "chmod", no_chmod)
    old = os.umask(0o022)
    try:
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o755)
        state = ServiceState(shared, create=True)
        state.create_tenant("t", k=2)
        state.add_documents("t", [Document("d0", "note about gout"), Document("d1", "other")])
        state.create_account("t", "a", epsilon=4.0, delta=1e-6, rate_limit=10)
        window = open_window(state)
        out = export_auditor(state, window.window_id, tmp_path / "export")
    finally:
        os.umask(old)
    private = [shared / "state.sqlite", out / "auditor.json"]
    private += [p for p in shared.glob("state.sqlite-*")]  # -wal, -shm
    assert len(private) >= 3
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert load_window(out)[2] is not None  # the package reads back
