"""Budgets and refusals: the system under attack as the attack harness runs it.

Budgeted systems refuse once spent (:class:`~ragprivacy.errors.BudgetExhaustedError`).
With ``budget: run`` (default) the attacker uses one account for the whole cell
(evaluation and calibration targets), and the system's budgets are sized for the cell's
queries (see :func:`~ragprivacy.eval.experiments._systems.entry_spec`); with
``budget: target`` every target is attacked from a fresh account of a freshly built
system, so each membership test meets the full per-account budget (and per-document
filters start unspent). A query the system refuses is answered with an empty public
response marked refused and counted; every response's privacy goes to a
:class:`~ragprivacy.eval.experiments._privacy_tally.PrivacyTally`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ragprivacy._validation import check_choice
from ragprivacy.dp import NoOpEvent
from ragprivacy.errors import BudgetExhaustedError
from ragprivacy.eval.calls import CallTally
from ragprivacy.eval.experiments._privacy_tally import PrivacyTally
from ragprivacy.rag import Query, RAGSystem
from ragprivacy.types import PrivacyCost, Response

__all__ = ["BudgetedSystem"]


def _refusal() -> Response:
    return Response(
        text="",
        tokens=(),
        logprobs=(),
        privacy=PrivacyCost(event=NoOpEvent(), mechanism="refused"),  # nothing released
        metadata={"refused": True},
    )


class BudgetedSystem(RAGSystem):
    """The system under attack as the harness runs it: built on demand, budgets per scope,
    refusals turned into empty responses, every response's privacy tallied, and what the
    answers released counted (:meth:`release_summary`).

    Args:
        build: ``build(queries)`` returns the (defended) system, its budgets sized for
            ``queries`` queries of one account.
        scope: ``"run"`` — one system for every account, built for ``run_queries``;
            ``"target"`` — a fresh system per account, built for that account's first
            batch of queries.
        run_queries: the queries of the whole cell (``scope="run"``).
        tally: where the privacy spent is recorded.
        one_by_one: send queries one at a time (for systems whose batch call is not
            all-or-nothing: a refusal in the middle of a batch would lose the answers
            already paid for).
        on_calls: receives, after each batch, what it added to :attr:`calls` (the calls
            of a remote endpoint; the runner's progress bar).
        facts: what :meth:`describe` adds about how the system was built that the
            system cannot say itself (``redact_pii``: its documents were redacted).
    """

    name = "budgeted"

    def __init__(
        self,
        build: Callable[[int], RAGSystem],
        *,
        scope: str = "run",
        run_queries: int = 1,
        tally: PrivacyTally | None = None,
        one_by_one: bool = False,
        on_calls: Callable[[CallTally], None] | None = None,
        facts: Mapping[str, Any] | None = None,
    ) -> None:
        self._build = build
        self._facts = dict(facts or {})
        self.calls = CallTally()  # a remote endpoint's calls (empty for our own systems)
        self._on_calls = on_calls
        self.one_by_one = bool(one_by_one)
        self.scope = check_choice("scope", scope, ("run", "target"))
        self.run_queries = max(1, int(run_queries))
        self.tally = tally if tally is not None else PrivacyTally()
        self._system: RAGSystem | None = None
        self._account: str | None = None
        self.refusals = 0
        self.responses = 0
        self.empty = 0  # answers with no text (refusals included)
        self.documents = 0  # documents passed to the generator, over the answers
        self.voted: int | None = None  # tokens a DP vote released (voting systems only)

    def _for(self, account: str, count: int) -> RAGSystem:
        if self.scope == "run":
            if self._system is None:
                self._system = self._build(self.run_queries)
            return self._system
        if self._system is None or account != self._account:
            self._system, self._account = self._build(max(1, count)), account
        return self._system

    @property
    def system(self) -> RAGSystem:
        """The system currently built (the run's, or the last account's)."""
        return self._for(self._account or "attacker", self.run_queries)

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self.answer_batch([query], account=account)[0]

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        key = account or "attacker"
        system = self._for(key, len(queries))
        out: list[Response] = []
        refused: list[bool] = []
        try:
            if self.one_by_one:
                raise BudgetExhaustedError("answer one by one")
            out = list(system.answer_batch(list(queries), account=key))
            refused = [False] * len(out)
        except BudgetExhaustedError as exc:  # refused partway: keep what was answered
            out = [r for r in exc.answered if isinstance(r, Response)]
            refused = [False] * len(out)
            for q in queries[len(out) :]:
                try:
                    out.append(system.answer(q, account=key))
                    refused.append(False)
                except BudgetExhaustedError:
                    out.append(_refusal())
                    refused.append(True)
        for r, no in zip(out, refused):
            self.tally.record(key, r, refused=no)
            self.responses += 1
            self.empty += int(no or not r.text.strip())
            self.documents += 0 if no else len(r.retrieved_ids)
            if "discoveries" in r.metadata:
                self.voted = (self.voted or 0) + int(r.metadata["discoveries"])
        self.refusals += sum(refused)
        delta = self.calls.record(out)
        if delta.calls and self._on_calls is not None:
            self._on_calls(delta)
        return out

    def release_summary(self) -> dict[str, Any]:
        """What the answers released: the share with any text (``answered``; refused and
        empty answers count as not answered) and the documents passed to the generator per
        answer (``documents_per_answer``; 0 where a filter or a refusal kept every
        document out); for a DP voting system, the tokens its vote released from the
        documents per answer (``voted_tokens_per_answer``: discoveries, Private-RAG Alg. 4;
        ``None`` for other systems), since its voters read documents whose text reaches the
        answer only through a discovery. An AUC near 0.5 with nothing answered, no
        document or no discovery says the system released nothing, not that it defends
        well."""
        n = self.responses
        return {
            "responses": n,
            "answered": (n - self.empty) / n if n else float("nan"),
            "documents_per_answer": self.documents / n if n else float("nan"),
            "voted_tokens_per_answer": (
                None if self.voted is None else self.voted / n if n else float("nan")
            ),
        }

    def describe(self) -> dict[str, Any]:
        return {"budget": self.scope, **self.system.describe(), **self._facts}
