"""`ragprivacy admin`: every bad argument is one line and exit code 2; nothing half-done."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ragprivacy.cli import main


def ACCOUNT(tenant: str, eps: str, delta: str) -> list[str]:
    return ["account", "create", tenant, "a", "--eps", eps, "--delta", delta, "--rate-limit", "3"]


@pytest.fixture()
def state(tmp_path):  # type: ignore[no-untyped-def]
    st = tmp_path / "state"
    assert main(["admin", "--state", str(st), "tenant", "create", "clinic", "--k", "3"]) == 0
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": f"note {i} about asthma"}) + "\n" for i in range(5)
        )
    )
    assert main(["admin", "--state", str(st), "docs", "add", "clinic", str(corpus)]) == 0
    return st


@pytest.fixture()
def admin(state, capsys):  # type: ignore[no-untyped-def]
    """``admin(*args)``: ``ragprivacy admin --state STATE ARGS`` succeeds; its stdout."""

    def run(*args: str) -> str:
        capsys.readouterr()
        assert main(["admin", "--state", str(state), *args]) == 0
        return capsys.readouterr().out

    return run


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tenant", "create", "clinic"], "already exists"),
        (["tenant", "create", "bad name!"], "letters, digits"),
        (["tenant", "create", "t2", "--mode", "magic"], "mode"),
        (["tenant", "create", "t2", "--mode", "dp_vote", "--tau", "0.3"], "takes no --tau"),
        (["tenant", "create", "t2", "--mode", "murag", "--logprobs"], "log-probabilities"),
        (["tenant", "create", "t2", "--mode", "murag_ada", "--eps-q", "2.5"], "discovery"),
        (["tenant", "create", "t2", "--logprobs", "--eps-q", "1"], "takes no --eps-q"),
        (["tenant", "create", "t2", "--k", "0"], "'k'"),
        (["docs", "add", "nowhere", "x.jsonl"], "Unknown tenant"),
        (ACCOUNT("nowhere", "1", "1e-6"), "Unknown tenant"),
        (ACCOUNT("clinic", "-1", "1e-6"), "epsilon"),
        (ACCOUNT("clinic", "1", "0.5"), "delta"),
        (["key", "create", "ghost"], "Unknown account"),
        (["key", "revoke", "000000000000"], "No API key"),
        (["window", "open"], "at least one account"),
        (["window", "close"], "No window is open"),
        (["window", "status"], "No window is open"),
    ],
)
def test_bad_admin_input_is_one_line_and_exit_2(state, capsys, args, message) -> None:
    capsys.readouterr()
    assert main(["admin", "--state", str(state), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_docs_add_is_idempotent_and_keys_print_once_last(state, tmp_path, capsys) -> None:
    corpus = tmp_path / "c.jsonl"
    capsys.readouterr()
    assert main(["admin", "--state", str(state), "docs", "add", "clinic", str(corpus)]) == 0
    assert "0 added, 5 already there" in capsys.readouterr().out
    args = ["account", "create", "clinic", "alice", "--eps", "1", "--delta", "1e-6"]
    assert main(["admin", "--state", str(state), *args, "--rate-limit", "3"]) == 0
    capsys.readouterr()
    assert main(["admin", "--state", str(state), "key", "create", "alice"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("rpk_") and all("rpk_" not in line for line in lines[:-1])
    stored = (state / "state.sqlite").read_bytes()
    # only a hash of the secret (the 43 characters after rpk_<id>_, which may hold "_")
    secret = lines[-1].split("_", 2)[2]
    assert len(secret) == 43 and secret.encode() not in stored
    assert main(["admin", "--state", str(state), "window", "open"]) == 0
    capsys.readouterr()
    assert main(["admin", "--state", str(state), "window", "open"]) == 2
    assert "already open" in capsys.readouterr().err


def test_key_list_and_window_status_say_what_an_operator_checks(state, admin) -> None:
    admin("account", "create", "clinic", "alice", "--eps", "1", "--delta", "1e-6",
          "--rate-limit", "3")  # fmt: skip
    admin("account", "create", "clinic", "bob", "--eps", "1", "--delta", "1e-6",
          "--rate-limit", "2")  # fmt: skip
    first = admin("key", "create", "alice").strip().splitlines()[-1]
    admin("key", "create", "alice")
    admin("key", "create", "bob")
    admin("key", "revoke", first.split("_")[1])
    listed = admin("key", "list").strip().splitlines()
    assert len(listed) == 3 and sum("revoked" in line for line in listed) == 1
    assert listed[0].startswith(first.split("_")[1]) and "revoked" in listed[0]
    assert all("rpk_" not in line and first.split("_", 2)[2] not in line for line in listed)
    assert len(admin("key", "list", "bob").strip().splitlines()) == 1
    rotated = admin("key", "rotate", "alice").strip().splitlines()
    assert "1 earlier key(s) revoked" in rotated[0] and rotated[-1].startswith("rpk_")
    alice = [line for line in admin("key", "list", "alice").strip().splitlines()]
    assert [("revoked" not in line) for line in alice].count(True) == 1  # only the new one
    assert any(line.startswith(rotated[-1].split("_")[1]) for line in alice)
    admin("window", "open")
    from ragprivacy.service import ServiceProvider, ServiceState

    provider = ServiceProvider(ServiceState(state))
    provider.retrieve("alice", "asthma")
    provider.retrieve("alice", "asthma again")
    status = json.loads(admin("window", "status", "--json"))
    assert status["window_id"] == "W1" and status["records"] == 2 and status["age_s"] >= 0
    assert status["accounts"] == {
        "alice": {"tenant": "clinic", "used": 2, "limit": 3},
        "bob": {"tenant": "clinic", "used": 0, "limit": 2},
    }
    text = admin("window", "status")
    assert "W1" in text and "2 records" in text and "alice\tclinic\t2 of 3" in text


def test_a_missing_state_is_refused_by_serve(tmp_path, capsys) -> None:
    assert main(["serve", "--state", str(tmp_path / "none"), "--port", "1"]) == 2
    assert "No service state" in capsys.readouterr().err


def test_window_rotate_closes_exports_and_opens_the_next(state, tmp_path, admin) -> None:
    from ragprivacy.audit import Verifier, load_window

    admin("account", "create", "clinic", "alice", "--eps", "1", "--delta", "1e-6",
          "--rate-limit", "3")  # fmt: skip
    packages = tmp_path / "packages"
    first = admin("window", "rotate", "--export-auditor", str(packages))
    assert "window W1 open" in first and "closed" not in first  # nothing was open
    from ragprivacy.service import ServiceProvider, ServiceState

    ServiceProvider(ServiceState(state)).retrieve("alice", "asthma")
    second = admin("window", "rotate", "--export-auditor", str(packages))
    assert "window W1 closed" in second and "window W2 open" in second
    assert (packages / "W1" / "auditor.json").stat().st_mode & 0o077 == 0
    transcript, receipts, package = load_window(packages / "W1")
    verdict = Verifier().verify(transcript, receipts, package)
    assert verdict.passed and len(transcript.records) == 1
    status = json.loads(admin("window", "status", "--json"))
    assert status["window_id"] == "W2" and status["records"] == 0


def test_account_update_holds_from_the_next_window_and_disable_revokes_its_keys(
    state, capsys, admin
) -> None:
    from ragprivacy.errors import AuthError
    from ragprivacy.service import ServiceProvider, ServiceState

    def status() -> dict[str, Any]:
        return json.loads(admin("window", "status", "--json"))  # type: ignore[no-any-return]

    admin("tenant", "create", "vote", "--mode", "dp_vote", "--k", "2", "--eps-q", "2")
    admin("docs", "add", "vote", str(state.parent / "c.jsonl"))
    admin("account", "create", "clinic", "alice", "--eps", "1", "--delta", "1e-6",
          "--rate-limit", "3")  # fmt: skip
    admin("account", "create", "vote", "vera", "--eps", "4", "--delta", "1e-6",
          "--rate-limit", "10")  # fmt: skip
    key = admin("key", "create", "alice").strip().splitlines()[-1]
    admin("window", "open")
    assert "r = 5 from the next window" in admin("account", "update", "alice", "--rate-limit", "5")
    admin("account", "update", "vera", "--eps", "8")
    capsys.readouterr()
    assert main(["admin", "--state", str(state), "account", "update", "alice",
                 "--eps", "1e-9"]) == 2  # fmt: skip
    assert "more than a window can draw" in capsys.readouterr().err
    assert ServiceState(state).accounts()["alice"]["epsilon"] == 1.0  # unchanged
    limits = {a: u["limit"] for a, u in status()["accounts"].items()}
    assert limits == {"alice": 3, "vera": 2}  # the open window keeps what it fixed
    provider = ServiceProvider(ServiceState(state))
    assert provider.budget("alice")["rate_limit"] == 3
    admin("window", "rotate")
    limits = {a: u["limit"] for a, u in status()["accounts"].items()}
    assert limits == {"alice": 5, "vera": 4}  # ⌊8 / 2⌋ answers, within r = 10
    assert ServiceState(state).authenticate(key) == "alice"
    assert "1 key(s) revoked" in admin("account", "disable", "alice")
    with pytest.raises(AuthError):
        ServiceState(state).authenticate(key)
