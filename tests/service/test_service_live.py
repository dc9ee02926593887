"""A live window: an outside verifier checks it while it is open (`audit verify --url
--live`), and closing it seals the ledger, so a query still in flight when the window
closes appends nothing, spends nothing and leaves the closed window verifiable."""

from __future__ import annotations

import json

import pytest

from ragprivacy.audit import LogSealedError, MerkleLog, Receipt, Verifier, load_window
from ragprivacy.cli import main
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Prompt, ReferenceReader
from ragprivacy.service import (
    Client,
    ServiceProvider,
    ServiceState,
    WindowClosedError,
    close_window,
    export_auditor,
    fetch_window,
)
from ragprivacy.types import Completion


def _state(root, admin, corpus_file):  # type: ignore[no-untyped-def]
    state = root / "state"
    admin(state, "tenant", "create", "clinic", "--k", "3")
    admin(state, "docs", "add", "clinic", str(corpus_file(root / "c.jsonl", "c", 40)))
    keys = {}
    for account in ("alice", "bob"):
        admin(state, "account", "create", "clinic", account, "--eps", "4", "--delta", "1e-6",
              "--rate-limit", "10")  # fmt: skip
        keys[account] = admin(state, "key", "create", account).split()[-1]
    admin(state, "window", "open")
    return state, keys


def _verify(capsys, *args: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    code = main(["audit", "verify", *args])
    return code, capsys.readouterr().out


def test_an_open_window_is_checked_live_and_a_forged_receipt_fails(
    tmp_path, admin, corpus_file, server_factory, capsys
) -> None:  # type: ignore[no-untyped-def]
    state, keys = _state(tmp_path, admin, corpus_file)
    server = server_factory(state)
    receipts = tmp_path / "receipts"
    with Client(server.url, keys["alice"], receipts_dir=receipts) as alice:
        for q in ("who has asthma?", "who has gout?", "visit 3"):
            alice.retrieve(q)
    code, out = _verify(capsys, "--url", server.url, "--live", "--receipts", str(receipts))
    assert code == 0 and out.startswith("LIVE OK  3 records so far"), out
    code, out = _verify(capsys, "--url", server.url, "--live", "--json")
    record = json.loads(out)
    assert (record["verdict"], record["live"], record["epsilon_audit"]) == ("LIVE_OK", True, None)

    # A client that edits a receipt (claims another query) cannot pass it off.
    forged = json.loads((receipts / "receipts.jsonl").read_text().splitlines()[0])
    forged["query_hash"] = "00" * 32
    (tmp_path / "forged").mkdir()
    (tmp_path / "forged" / "r.jsonl").write_text(json.dumps(forged) + "\n")
    code, out = _verify(capsys, "--url", server.url, "--live", "--receipts",
                        str(tmp_path / "forged"))  # fmt: skip
    assert code == 1 and "FAIL  receipt_consistency" in out, out

    # Without --live the open window is refused, with the way out named; --live with
    # an auditor package, or on a closed window, is refused too.
    code, out = _verify(capsys, "--url", server.url)
    assert code == 2
    assert main(["audit", "verify", "--url", server.url, "--live", "--auditor", "x"]) == 2
    admin(state, "window", "close", "--export-auditor", str(tmp_path / "aud"))
    with pytest.raises(ConfigError, match="closed; verify it without --live"):
        fetch_window(server.url, "W1", live=True)
    # Without the auditor package an honest closed window is INCOMPLETE (exit 3): the
    # public checks hold, re-execution was not possible -- never a FAIL, never a PASS.
    code, out = _verify(capsys, "--url", server.url, "--receipts", str(receipts))
    assert code == 3 and out.startswith("INCOMPLETE  3 records"), out
    code, out = _verify(capsys, "--url", server.url, "--json")
    record = json.loads(out)
    assert (record["verdict"], record["epsilon_audit"], record["failures"]) == (
        "INCOMPLETE",
        None,
        [],
    )
    assert record["skipped"] == ["per_record", "policy_cap: re-execution of ĉ"]
    code, out = _verify(capsys, "--url", server.url, "--receipts", str(receipts),
                        "--auditor", str(tmp_path / "aud"))  # fmt: skip
    assert code == 0 and out.startswith("PASS"), out


class _ClosesTheWindow(ReferenceReader):
    """The reference reader, during whose call the admin closes the window (another
    process in a real deployment: the close seals the ledger file)."""

    def __init__(self, state_dir) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.state_dir = state_dir

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        close_window(ServiceState(self.state_dir, create=False))
        return super().generate(prompt, max_tokens=max_tokens)


def test_a_query_in_flight_when_the_window_closes_appends_and_spends_nothing(
    tmp_path, admin, corpus_file
) -> None:  # type: ignore[no-untyped-def]
    state_dir, _ = _state(tmp_path, admin, corpus_file)
    worker = ServiceProvider(ServiceState(state_dir, create=False))
    first = worker.retrieve("alice", "who has asthma?")
    with pytest.raises(WindowClosedError, match="nothing was spent"):
        worker.answer("bob", "who has gout?", _ClosesTheWindow(state_dir))
    with MerkleLog(state_dir / "ledgers" / "W1.sqlite") as log:
        assert log.size == 1 and log.sealed
        with pytest.raises(LogSealedError):
            log.append(b"a record after the close")
        assert log.size == 1
    state = ServiceState(state_dir, create=False)
    window = state.window("W1")
    assert window.status == "closed" and window.tree_head["size"] == 1
    export_auditor(state, "W1", tmp_path / "aud")
    transcript, _, package = load_window(tmp_path / "aud")
    verdict = Verifier().verify(transcript, [Receipt.from_dict(first.receipt)], package)
    assert verdict.passed, verdict.failures[:3]
