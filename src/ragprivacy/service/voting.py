"""The service's voting tenants: ``dp_vote``, ``murag`` and ``murag_ada`` (Private-RAG).

A voting tenant releases only an answer voted token by token under DP (Private-RAG
Alg. 4); the retrieved documents never leave the service, so ``/v1/retrieve`` refuses its
accounts. Its systems are the library's own :class:`~ragprivacy.rag.DPVoteRAG`,
:class:`~ragprivacy.rag.MuRAG` and :class:`~ragprivacy.rag.MuRAGAda` in secure mode, over
the window's snapshot of the tenant's documents and their stored embeddings (exact inner
product top-K: the vote's guarantee covers the retrieval, so it needs no noise of its own).

Accounting — every answer is a record of the audit window (:mod:`ragprivacy.audit.votes`):

* every answer costs the account the tenant's ε_q (pure DP); an account may get
  ``min(r, ⌊ε_acc / ε_q⌋)`` answers per window (sequential composition: at most ε_acc),
  counted by the window's ledger, which every server worker appends to;
* MURAG/-ADA also charge each screened document's filter (budget M·ε_q for its lifetime,
  Thm 1–2), kept in ``DIR/filters/<tenant>.sqlite`` across windows (below);
* a failure is an answer: a vote that fails after the documents were read appends its
  record with the trace so far (and keeps its filter charges), because whether it fails
  can depend on the documents; nothing is appended when nothing was read (a refusal
  before retrieval) or the generator was never reached at the vote's first call (the
  first :data:`~ragprivacy.service.state.FREE_FAILURES` times in a window);
* prompts have a data-independent size: each retrieved document is cut and padded to the
  service's :class:`~ragprivacy.generate.PromptBudget`, and a query whose voter prompt
  could overflow the generator's context is refused before retrieval.

The window (:meth:`VotingTenants.answer_audited`) holds the accounts in its commitments
with the tenant's vote settings (:func:`vote_settings`), retrieves the committed top m·k
(``dp_vote``) or screens the tenant's documents against the committed filters
(``murag``/``murag_ada``, :mod:`ragprivacy.audit.filters`: the filter state every worker
replays from the ledger, the threshold's noise derived), derives the vote's partition and
noise from (s_W, rec_q), and signs the account a receipt of its answer. When a window
opens, each filtered tenant's documents' spent ε is read from its lifetime store
(:func:`filter_start`) and committed; when it closes, the window's charges are copied
back (:func:`settle_filters`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragprivacy.audit import AuditWindow, VoteSettings
from ragprivacy.corpus import Corpus
from ragprivacy.dp import ChaCha20Bits, VoteRecorder, VoteTrace
from ragprivacy.embed import Embedder
from ragprivacy.errors import (
    ConfigError,
    GeneratorUnavailableError,
)
from ragprivacy.generate import Generator, PromptBudget, tracking_prompts
from ragprivacy.index import create_index
from ragprivacy.rag import (
    DPVoteConfig,
    DPVoteRAG,
    MuRAG,
    RAGSystem,
    SystemSpec,
    build_system,
    charged_failure,
)
from ragprivacy.retrieval import KnowledgeBase
from ragprivacy.service.failures import record_failure
from ragprivacy.service.state import ServiceState
from ragprivacy.types import Document, Response

__all__ = [
    "VotedAnswer",
    "VotingTenants",
    "filter_start",
    "settle_filters",
    "vote_settings",
]

_BIN_SIZE = 0.02  # MURAG-ADA's score bins: the library's default width (ThresholdRetriever)


def vote_settings(tenant: Mapping[str, Any], grid_bits: int) -> VoteSettings:
    """The settings a voting tenant's window commits: the service's vote at the tenant's
    ε_q (:class:`~ragprivacy.rag.DPVoteConfig`'s defaults, one document per voter, so
    m = K voters and θ = ⌊m/2⌋); for ``murag``/``murag_ada`` at ε_RAG, with M and the
    screening (τ, or ε_thr over bins of the library's default width 0.02 on [−1, 1]) in
    the window's grid units of ``grid_bits`` (τ·2^b rounded)."""
    mode, eps_q, k = str(tenant["mode"]), float(tenant["epsilon_q"]), int(tenant["k"])
    vote = DPVoteConfig()
    unit = 1 << int(grid_bits)
    screening: dict[str, Any] = {}
    if mode != "dp_vote":
        screening["max_retrievals"] = int(tenant["max_retrievals"])
    if mode == "murag":
        screening["tau"] = round(float(tenant["tau"]) * unit)
    if mode == "murag_ada":
        screening.update(
            epsilon_thr=float(tenant["epsilon_thr"]),
            bin_top=unit,
            bin_bottom=-unit,
            bin_size=round(_BIN_SIZE * unit),
        )
    eps_rag = eps_q - screening.get("epsilon_thr", 0.0)
    return VoteSettings(
        mode=mode,
        slots=k,
        docs_per_voter=1,
        theta=k // 2,
        max_tokens=vote.max_tokens,
        epsilon_q=eps_q,
        epsilon_token=vote.step_epsilon(eps_rag),
        max_discoveries=vote.discoveries(eps_rag),
        **screening,
    )


def filter_start(state: ServiceState, tenant: str, count: int) -> list[float]:
    """What each of a MURAG/-ADA tenant's first ``count`` documents has spent of its
    lifetime budget, from the tenant's filter store: the state a window commits."""
    opts = state.tenants()[tenant]
    store = state.budget_store(tenant, int(opts["max_retrievals"]) * float(opts["epsilon_q"]))
    ids, _ = state.texts(tenant, count)
    return [float(x) for x in store.spent(ids)[:, 0]]


def settle_filters(state: ServiceState, window: AuditWindow, window_id: str) -> None:
    """Record the charges of every filtered tenant's records in ``window`` (closed) in
    the tenant's lifetime filter store, which the next window commits from: one
    transaction per tenant, without the store's capacity check (the spending happened;
    the window's replay already kept it within budget), one charge id per record and
    amount, so settling again (a close retried after a crash) records nothing twice."""
    for t, settings in window.voting.items():
        if not settings.filtered:
            continue
        tenant = window.names[t]
        ids = window.document_ids(tenant)
        charges: list[tuple[str, list[str], float]] = []
        for position, screen in window.screenings(tenant):
            by_amount: dict[float, list[str]] = {}
            for p, amount in screen.charges:
                by_amount.setdefault(amount, []).append(ids[p])
            charges.extend(
                (f"{window_id}/{position}/{n}", docs, amount)
                for n, (amount, docs) in enumerate(sorted(by_amount.items()))
            )
        state.budget_store(tenant, settings.document_budget).record(charges)


def _check_settings(system: RAGSystem, settings: VoteSettings) -> DPVoteRAG | MuRAG:
    """The built system runs the committed vote (refused otherwise: its records would
    FAIL the audit)."""
    d = system.describe() if isinstance(system, DPVoteRAG | MuRAG) else {}
    built = (
        d.get("voters", 0) * d.get("docs_per_voter", 0),
        d.get("docs_per_voter"),
        d.get("theta"),
        d.get("max_tokens"),
        d.get("epsilon_token"),
        d.get("max_discoveries"),
    )
    committed = (
        settings.slots,
        settings.docs_per_voter,
        settings.theta,
        settings.max_tokens,
        settings.epsilon_token,
        settings.max_discoveries,
    )
    if not isinstance(system, DPVoteRAG | MuRAG) or built != committed:
        raise ConfigError(
            "This tenant's vote does not run the settings its window committed; close the "
            "window and open a new one."
        )
    return system


@dataclass(frozen=True, slots=True)
class VotedAnswer:
    """One voted answer and what it cost the account."""

    text: str
    response: Response
    privacy: dict[str, Any]
    budget: dict[str, Any]


class VotingTenants:
    """The voting tenants of one window: their systems, built on first use per
    generator (thread-safe); their answers are records of the window."""

    def __init__(
        self,
        state: ServiceState,
        window_id: str,
        snapshot: dict[str, int],
        embedder: Embedder,
        *,
        prompt_budget: PromptBudget | None = None,
    ) -> None:
        self.state = state
        self.prompt_budget = prompt_budget if prompt_budget is not None else PromptBudget()
        self.window_id = window_id
        self.snapshot = dict(snapshot)
        self.embedder = embedder
        self._lock = threading.Lock()
        self._kbs: dict[str, KnowledgeBase] = {}
        # keyed by the generator itself (held, so an id is never reused while cached)
        self._systems: dict[tuple[str, Generator], RAGSystem] = {}
        self._options: dict[str, dict[str, Any]] = {}

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

    def _build(self, tenant: str, generator: Generator) -> RAGSystem:
        opts = self._tenant(tenant)
        eps_q = float(opts["epsilon_q"])
        # dp_vote takes its per-answer ε as 'epsilon'; MURAG/-ADA take 'epsilon_q', M and
        # their own threshold (τ, ε_thr). Only their vote runs here: the window screens
        # the documents and charges the filters (ragprivacy.audit.filters)
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
        return build_system(spec, kb=self._kb(tenant), generator=generator)

    def answer_audited(
        self,
        window: AuditWindow,
        account: str,
        query: str,
        generator: Generator,
        texts: Mapping[str, str],
        *,
        nonce: str = "",
    ) -> tuple[VotedAnswer, dict[str, Any]]:
        """A voting tenant's answer as a record of ``window`` (module docstring): the
        answer and its signed receipt. ``texts``: the tenant's texts by id."""
        tenant = window.tenant_of(account)
        settings = window.vote_settings(account)
        assert settings is not None  # routed here for a voting tenant's account
        system = _check_settings(self.system(tenant, generator), settings)
        system.check_query(query)  # before retrieval, from the query alone: free
        failed: list[Exception] = []

        def run(ids: tuple[str, ...], bits: ChaCha20Bits) -> VoteTrace:
            failed.clear()  # runs again when another writer appended first
            recorder = VoteRecorder()
            with tracking_prompts() as used:
                try:
                    result = system.answer_documents(
                        query, [texts[i] for i in ids], bits=bits, recorder=recorder
                    )
                except Exception as exc:
                    error: Exception = exc
                    if isinstance(exc, GeneratorUnavailableError) and used[0]:
                        error = charged_failure(exc)  # an earlier call carried the documents
                    if not record_failure(self.state, self.window_id, account, error):
                        raise  # never reached: nothing is appended, nothing spent
                    failed.append(error)
                    return recorder.trace("", failure=type(error).__name__)
            assert result.trace is not None
            return result.trace

        answer, trace = window.vote(account, query, run, nonce=nonce)
        receipt = answer.receipt.to_dict()
        if failed:  # the record is appended: the account keeps its receipt
            error = charged_failure(failed[-1])
            error.receipt = receipt
            raise error
        budget = self.audited_budget(window, account)
        eps_q = settings.epsilon_q
        used = int(budget["used"])
        privacy = {
            "mechanism": settings.mode,
            "epsilon": eps_q,
            "epsilon_vote": settings.max_discoveries * settings.epsilon_token,
            "delta": 0.0,
            "cumulative_epsilon": used * eps_q,
            "scope": "answer",
        }
        if settings.filtered:
            privacy["document_budget"] = settings.document_budget
        response = Response(text=trace.text, tokens=trace.tokens())
        return VotedAnswer(trace.text, response, privacy, budget), receipt

    def audited_budget(self, window: AuditWindow, account: str) -> dict[str, Any]:
        """What a voting account has used and has left in ``window`` (its records)."""
        settings = window.vote_settings(account)
        assert settings is not None  # a voting tenant's account
        used, cap = window.used(account), window.limit(account)
        return {
            "window_id": self.window_id,
            "tenant": window.tenant_of(account),
            "mode": settings.mode,
            "used": used,
            "answers": cap,
            "remaining": max(cap - used, 0),
            "epsilon_per_answer": settings.epsilon_q,
            "epsilon_spent": used * settings.epsilon_q,
            "failures": self.state.failures(self.window_id, account),
        }
