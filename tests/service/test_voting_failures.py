"""A voting tenant's answer that fails after its documents were screened stays counted —
its record is appended with the vote's trace so far and its receipt — whatever the
error; only the prompt check, which reads nothing, gives it back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragprivacy.errors import ChargedFailureError, ConfigError
from ragprivacy.generate import create_generator
from ragprivacy.service import ServiceState
from ragprivacy.service.provider import ServiceProvider, open_window


@pytest.mark.parametrize(
    ("error", "counted"),
    [
        (RuntimeError("the generator's backend failed"), 1),
        (ConfigError("this prompt could overflow the context"), 0),
    ],
)
def test_a_voted_answer_failing_after_its_documents_were_screened_stays_counted(
    tmp_path: Path, admin, error: Exception, counted: int
) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": f"asthma {i}"}) + "\n"
                              for i in range(8)))  # fmt: skip
    admin(state, "tenant", "create", "n", "--k", "2")
    admin(state, "tenant", "create", "v", "--mode", "murag", "--k", "2", "--eps-q", "2")
    for tenant, account in (("n", "a"), ("v", "b")):
        admin(state, "docs", "add", tenant, str(corpus))
        admin(state, "account", "create", tenant, account, "--eps", "8", "--delta", "1e-6",
              "--rate-limit", "10")  # fmt: skip
    st = ServiceState(state, create=False)
    open_window(st)
    provider = ServiceProvider(st)
    generator = create_generator("reference")
    system: Any = provider._voting_tenants().system("v", generator)

    def fail(*_args: Any, **_kw: Any) -> Any:
        raise error

    # the tenant's own system, failing: in its vote (the window screened and charged the
    # documents before), or in the prompt check (before anything is read)
    if counted:
        system.answer_documents = fail
    else:
        system.check_query = fail
    expected = ChargedFailureError if counted else ConfigError
    with pytest.raises(expected) as raised:
        provider.answer_voted("b", "who has asthma?", generator)
    budget = provider.budget("b")
    assert budget["used"] == counted
    assert budget["failures"]["charged"] == counted
    if counted:  # the record is in the ledger and the account holds its receipt
        assert getattr(raised.value, "receipt", None) is not None
    provider.close()
