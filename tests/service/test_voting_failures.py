"""A voting tenant's answer that fails after its scores were read stays counted, whatever
the error (a screening that lost every race for its documents' budgets is one); only the
prompt check, which reads nothing, gives it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragprivacy.errors import BudgetExhaustedError, ChargedFailureError, ConfigError
from ragprivacy.generate import create_generator
from ragprivacy.rag import Query, RAGSystem
from ragprivacy.service import ServiceState
from ragprivacy.service.provider import ServiceProvider, open_window
from ragprivacy.types import Response


class Refusing(RAGSystem):
    """Stands in for a system whose screening read the scores and then raised ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        raise self.error


@pytest.mark.parametrize(
    ("error", "counted"),
    [
        (BudgetExhaustedError("races lost; nothing was charged"), 1),
        (RuntimeError("a retrieval backend failed"), 1),
        (ConfigError("this prompt could overflow the context"), 0),
    ],
)
def test_a_voted_answer_failing_after_its_scores_were_read_stays_counted(
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
    voting = provider._voting_tenants()
    voting._systems[("v", generator)] = Refusing(error)  # the tenant's system, failing
    expected = ConfigError if counted == 0 else ChargedFailureError
    with pytest.raises(expected):
        provider.answer_voted("b", "who has asthma?", generator)
    budget = provider.budget("b")
    assert budget["used"] == counted
    assert budget["failures"]["charged"] == counted
    provider.close()
