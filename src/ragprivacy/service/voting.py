"""The service's voting tenants: ``dp_vote``, ``murag`` and ``murag_ada`` (Private-RAG).

A voting tenant releases only an answer voted token by token under DP (Private-RAG
Alg. 4); the retrieved documents never leave the service, so ``/v1/retrieve`` refuses its
accounts. Its systems are the library's own :class:`~ragprivacy.rag.DPVoteRAG`,
:class:`~ragprivacy.rag.MuRAG` and :class:`~ragprivacy.rag.MuRAGAda` in secure mode, over
the window's snapshot of the tenant's documents and their stored embeddings (exact inner
product top-K: the vote's guarantee covers the retrieval, so it needs no noise of its own).

Accounting:

* every answer costs the account the tenant's ε_q (pure DP); an account may get
  ``min(r, ⌊ε_acc / ε_q⌋)`` answers per window (sequential composition: at most ε_acc),
  counted durably in the state (one SQLite transaction, so server workers share it);
* MURAG/-ADA also charge each screened document's filter (budget M·ε_q for its lifetime,
  Thm 1–2) in ``DIR/filters/<tenant>.sqlite``, shared by every worker and every window;
* a failure is an answer: the answer is counted before it is computed and stays counted
  if the vote fails after retrieval (the systems keep their filter charges too), because
  whether it fails can depend on the documents; it is given back only when nothing was
  read (a refusal before retrieval) or the generator was never reached at the vote's
  first call (the first
  :data:`~ragprivacy.service.state.FREE_FAILURES` times in a window); a crash between the
  count and the reply charges an answer nobody got — the safe direction;
* prompts have a data-independent size: each retrieved document is cut and padded to the
  service's :class:`~ragprivacy.generate.PromptBudget`, and a query whose voter prompt
  could overflow the generator's context is refused before retrieval.

Deviation: these answers are not in the audit ledger — the four-phase audit covers the
collusion paper's Gaussian noise-then-select (``noisy_topk`` tenants). A window's
commitments list only the ``noisy_topk`` accounts; a voting account's guarantee is the
vote's, enforced by this module and the filters, not checked by the outside verifier.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

from ragprivacy.corpus import Corpus
from ragprivacy.embed import Embedder
from ragprivacy.errors import (
    BudgetExhaustedError,
    ChargedFailureError,
    ConfigError,
    GeneratorUnavailableError,
)
from ragprivacy.generate import Generator, PromptBudget
from ragprivacy.index import create_index
from ragprivacy.rag import RAGSystem, SystemSpec, build_system, charged_failure
from ragprivacy.retrieval import KnowledgeBase
from ragprivacy.service.failures import record_failure
from ragprivacy.service.state import ServiceState
from ragprivacy.types import Document, Response

__all__ = ["VotedAnswer", "VotingTenants", "answer_cap"]


def answer_cap(account: dict[str, Any], tenant: dict[str, Any]) -> int:
    """How many answers an account of a voting tenant gets in a window: its rate limit,
    and no more than its ε_acc buys at the tenant's ε_q each."""
    by_budget = math.floor(float(account["epsilon"]) / float(tenant["epsilon_q"]) + 1e-9)
    return max(0, min(int(account["rate_limit"]), by_budget))


@dataclass(frozen=True, slots=True)
class VotedAnswer:
    """One voted answer and what it cost the account."""

    text: str
    response: Response
    privacy: dict[str, Any]
    budget: dict[str, Any]


class VotingTenants:
    """The voting tenants of one window: their systems, built on first use per
    generator, and the accounts' durable answer counts (thread-safe)."""

    def __init__(
        self,
        state: ServiceState,
        window_id: str,
        snapshot: dict[str, int],
        accounts: dict[str, str],
        embedder: Embedder,
        *,
        prompt_budget: PromptBudget | None = None,
        policies: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.state = state
        # the accounts' policies as the window fixed them (windows opened before they were
        # kept read them from the state)
        self.policies = dict(policies or {})
        self.prompt_budget = prompt_budget if prompt_budget is not None else PromptBudget()
        self.window_id = window_id
        self.snapshot = dict(snapshot)
        self.accounts = dict(accounts)
        self.embedder = embedder
        self._lock = threading.Lock()
        self._kbs: dict[str, KnowledgeBase] = {}
        # keyed by the generator itself (held, so an id is never reused while cached)
        self._systems: dict[tuple[str, Generator], RAGSystem] = {}
        self._options: dict[str, dict[str, Any]] = {}
        self._caps: dict[str, int] = {}

    def _kb(self, tenant: str) -> KnowledgeBase:
        if tenant not in self._kbs:
            ids, texts, vectors = self.state.documents(tenant, self.snapshot[tenant])
            index = create_index("exact", dim=vectors.shape[1])
            index.add(vectors, ids)
            corpus = Corpus([Document(i, t) for i, t in zip(ids, texts)], name=tenant)
            self._kbs[tenant] = KnowledgeBase(corpus, self.embedder, index)
        return self._kbs[tenant]

    def system(self, tenant: str, generator: Generator) -> RAGSystem:
        """The tenant's voting system over ``generator`` (secure mode)."""
        with self._lock:
            key = (tenant, generator)
            if key not in self._systems:
                self._systems[key] = self._build(tenant, generator)
            return self._systems[key]

    def _tenant(self, tenant: str) -> dict[str, Any]:
        """The tenant's mode and options (fixed at creation: read once, not per request;
        ``state.tenants()`` also counts every tenant's documents)."""
        if tenant not in self._options:
            self._options[tenant] = self.state.tenants()[tenant]
        return self._options[tenant]

    def _cap(self, account: str) -> int:
        """The account's answers in this window (its policy as the window fixed it)."""
        if account not in self._caps:
            policy = self.policies.get(account) or self.state.accounts()[account]
            self._caps[account] = answer_cap(policy, self._tenant(self.accounts[account]))
        return self._caps[account]

    def _build(self, tenant: str, generator: Generator) -> RAGSystem:
        opts = self._tenant(tenant)
        eps_q = float(opts["epsilon_q"])
        # dp_vote takes its per-answer ε as 'epsilon'; MURAG/-ADA take 'epsilon_q', M and
        # their own threshold (τ, ε_thr), and keep their filters in the tenant's store
        privacy: dict[str, Any] = (
            {"epsilon": eps_q}
            if opts["mode"] == "dp_vote"
            else {
                "epsilon_q": eps_q,
                "max_retrievals": int(opts["max_retrievals"]),
                **{key: float(opts[key]) for key in ("tau", "epsilon_thr") if key in opts},
            }
        )
        spec = SystemSpec(
            system=opts["mode"],
            retriever="topk",  # exact top-K: the vote's guarantee covers the retrieval
            k=int(opts["k"]),
            prompt_budget=self.prompt_budget.for_generator(generator),
            **privacy,
        )
        store = (
            None
            if spec.max_retrievals is None
            else self.state.budget_store(tenant, spec.max_retrievals * eps_q)
        )
        return build_system(spec, kb=self._kb(tenant), generator=generator, store=store)

    def budget(self, account: str) -> dict[str, Any]:
        """What ``account`` has used and has left in the window."""
        tenant = self.accounts[account]
        opts = self._tenant(tenant)
        cap = self._cap(account)
        used = self.state.answers_used(self.window_id, account)
        eps_q = float(opts["epsilon_q"])
        return {
            "window_id": self.window_id,
            "tenant": tenant,
            "mode": opts["mode"],
            "used": used,
            "answers": cap,
            "remaining": max(cap - used, 0),
            "epsilon_per_answer": eps_q,
            "epsilon_spent": used * eps_q,
            "failures": self.state.failures(self.window_id, account),
        }

    def answer(self, account: str, query: str, generator: Generator) -> VotedAnswer:
        """One voted answer for ``account``: counted first; a failure after retrieval stays
        counted (module docstring)."""
        tenant = self.accounts[account]
        opts = self._tenant(tenant)
        cap = self._cap(account)
        if cap == 0:
            raise BudgetExhaustedError(
                f"Account {account!r} cannot afford one answer: its ε_acc is below the "
                f"tenant's ε per answer ({opts['epsilon_q']})."
            )
        system = self.system(tenant, generator)
        self.state.reserve_answer(self.window_id, account, cap)
        try:
            response = system.answer(query, account=account)
        except ChargedFailureError as exc:  # after retrieval: the answer stays counted
            record_failure(self.state, self.window_id, account, exc)
            raise
        except GeneratorUnavailableError as exc:  # never reached: free, a few times
            if record_failure(self.state, self.window_id, account, exc):
                raise charged_failure(exc) from None
            self.state.release_answer(self.window_id, account)
            raise
        except ConfigError:  # the prompt check, before retrieval: from the query alone
            self.state.release_answer(self.window_id, account)
            raise
        except Exception as exc:  # after the scores were read (a screening that lost every
            # race for its documents' budgets, a retrieval backend): it may depend on them
            record_failure(self.state, self.window_id, account, exc)
            raise charged_failure(exc) from None
        cost = response.privacy
        budget = self.budget(account)
        privacy = {
            "mechanism": opts["mode"],
            "epsilon": float(opts["epsilon_q"]),
            "epsilon_vote": cost.epsilon,
            "delta": 0.0,
            "cumulative_epsilon": budget["epsilon_spent"],
            "scope": "answer",
        }
        if opts["mode"] != "dp_vote":
            privacy["document_budget"] = float(opts["max_retrievals"]) * float(opts["epsilon_q"])
        return VotedAnswer(response.text, response, privacy, budget)
