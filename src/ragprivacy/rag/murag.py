"""``murag``: the multi-query pipelines of Private-RAG — MURAG, MURAG-ADA and the naive
multi-query baseline — built on single-query DP-RAG by token voting
(:mod:`ragprivacy.rag.dp_vote`).

- ``naive_multi`` — :class:`NaiveMultiRAG` (Alg. 5): DP-RAG with ε_q per query, sequential
  composition: T queries cost T·ε_q; a query that would take an account past
  ``total_epsilon`` is refused before retrieval (``BudgetExhaustedError``, nothing spent).
  With a vote ``delta`` > 0 each query is (ε_q, δ)-DP by the exact composition of its
  discoveries (:mod:`ragprivacy.rag.dp_vote`) and T queries are (Σ ε, T·δ)-DP.
- ``murag`` — :class:`MuRAG` (Alg. 1): fixed relevance threshold τ, per-document filters
  with budget M·ε_q (a :class:`~ragprivacy.dp.BudgetStore`), TOP-K with padding, DP-RAG
  with ε_q. Whole-system guarantee: ε = M·ε_q per document (Thm 1).
- ``murag_ada`` — :class:`MuRAGAda` (Alg. 2/6): adaptive threshold by noisy prefix sums
  with ε_thr, DP-RAG with ε_RAG = ε_q − ε_thr (Thm 2).

MURAG's inner DP-RAG stays on pure composition (c·ε_0 ≤ ε_RAG, δ = 0), with either
filter. The pure filter's guarantee (Thm 1) needs every charge to be pure. The Rényi
filter charges each screened document the Rényi curve of a pure ε_q event
(:class:`~ragprivacy.retrieval.ThresholdRetriever`); an inner vote calibrated so that its
c independent ε_0 steps (c times the randomized-response curve of ε_0) stay under that
curve at the filter's orders would be sound, but those orders are the large ones the
pure load needs (256–1024 by default), where the curves are nearly pure: ε_0 would grow
by 0.006–0.13 % (ε_q = 0.5 to 40, c = 2 to 20). Gaining from tight composition needs
the filter to charge the vote's own composed curve instead, which it does not.

The screening and its charges happen before any generation. A charge the store refuses
(another writer spent the budget meanwhile) is screened again without the exhausted
documents, as Alg. 1 line 2 says, rather than failing the request, and no error names a
document (:mod:`ragprivacy.retrieval.threshold`).

A failure is an answer (:func:`ragprivacy.rag.charged_on_failure`): budgets are checked
and reserved before retrieval, and a refusal there spends nothing; once the documents
were read, a generation that fails (or is cancelled) keeps everything the request
charged — the account's ε under ``naive_multi``, the documents' filter charges under
MURAG/-ADA, a private retriever's per-account queries — because whether it fails can
depend on the documents (a context-length error depends on their lengths), and the
caller sees that it failed. Only a generator that was never reached at the answer's
first call (:class:`~ragprivacy.errors.GeneratorUnavailableError`) gives everything back.

Reuse of earlier answers (Private-RAG §6, ``reuse_answers=True``): the previous answers
are DP outputs, so re-using them is post-processing and free; the most similar earlier
question's "question answer" text joins every voter's context.

Each response's :class:`~ragprivacy.types.PrivacyCost` gives the query's ε, the
cumulative ε (the account's total for ``naive_multi``; the largest per-document spend so
far for the filtered pipelines) and, for the filtered pipelines, what each charged
document paid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ragprivacy._random import RngLike
from ragprivacy._validation import check_positive
from ragprivacy.dp import BudgetStore, PureDpEvent, simulation_rng
from ragprivacy.errors import BudgetExhaustedError, ConfigError, GeneratorUnavailableError
from ragprivacy.generate import Generator
from ragprivacy.rag.base import Query, answer_cost, charged_on_failure, register_system
from ragprivacy.rag.dp_vote import DPVoteRAG, _response, _Voting
from ragprivacy.retrieval import Retriever, ThresholdRetriever
from ragprivacy.types import Response

__all__ = ["MuRAG", "MuRAGAda", "NaiveMultiRAG"]


class NaiveMultiRAG(DPVoteRAG):
    """NAIVE-MULTI-RAG (Private-RAG Alg. 5): DP-RAG with ε_q per query; T queries of an
    account cost T·ε_q by sequential composition; ``total_epsilon`` (ε ≥ T·ε_q) caps it.
    """

    name = "naive_multi"

    def __init__(
        self,
        retriever: Retriever,
        generator: Generator,
        *,
        epsilon_q: float = 10.0,
        total_epsilon: float | None = None,
        **kw: Any,
    ) -> None:
        if "epsilon" in kw:
            raise ConfigError(
                "naive_multi takes 'epsilon_q' (each query's budget) and 'total_epsilon' "
                "(the account's cap), not 'epsilon'."
            )
        super().__init__(retriever, generator, epsilon=epsilon_q, **kw)
        self.total_epsilon = (
            None if total_epsilon is None else check_positive("total_epsilon", total_epsilon)
        )
        self._spent: dict[str, float] = {}

    def spent(self, account: str | None = None) -> float:
        return self._spent.get(account or "anonymous", 0.0)

    def _give_back(self, key: str, cost: float) -> None:
        with self._lock:
            self._spent[key] = max(self._spent.get(key, 0.0) - cost, 0.0)

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        key = account or "anonymous"
        q = Query.of(query)
        self._check_prompt(q)
        cost = self.vote.epsilon_of(self.epsilon)  # c·ε_0, or the exact composition at δ
        with self._lock:  # check and reserve before any retrieval or generation
            spent = self._spent.get(key, 0.0)
            if self.total_epsilon is not None and spent + cost > self.total_epsilon * (1 + 1e-9):
                raise BudgetExhaustedError(
                    f"Account {key!r} has spent ε = {spent:g} of its total {self.total_epsilon:g}"
                    f"; another query costs {cost:g} (Alg. 5 needs ε ≥ T·ε_q). Nothing was "
                    f"spent; raise total_epsilon or stop."
                )
            self._spent[key] = spent + cost
        try:
            retrieval = self.retriever.retrieve(q.search_text, account=account)
        except BaseException:  # refused (or failed) before anything was read: free
            self._give_back(key, cost)
            raise
        try:
            with charged_on_failure(self.retriever, [retrieval], account):
                texts = self.retriever.knowledge_base_for(account).texts(retrieval.indices)
                result, _ = self._answer_with(q, texts, self.epsilon)
        except GeneratorUnavailableError:  # never reached: nothing depended on the data
            self._give_back(key, cost)
            raise
        return _response(result, retrieval, self._cost(retrieval, account, spent + cost))

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(name=self.name, epsilon_q=self.epsilon, total_epsilon=self.total_epsilon)
        return out


class MuRAG(_Voting):
    """MURAG (Private-RAG Alg. 1): fixed τ, per-document filters, DP-RAG with ε_q.

    Args:
        retriever: any retriever; its knowledge base and k (= K slots = m·k_voter) are used.
        generator: the LLM.
        tau: the fixed relevance threshold.
        epsilon_q: the per-query budget.
        max_retrievals: M (each document's budget is M·ε_q; the guarantee).
        store: the budget store (default in memory; ``SqliteBudgetStore`` persists).
        accounting: ``"pure"`` (Private-RAG's filter, M·ε_q per document) or ``"renyi"``
            (a Rényi filter with target (``renyi_epsilon``, ``renyi_delta``); see
            :class:`~ragprivacy.retrieval.ThresholdRetriever`).
        screening_simulation: simulate the threshold noise (MURAG-ADA) with ``rng``.
        other keywords: voting settings (``docs_per_voter``, ``epsilon_token``,
            ``max_discoveries``, ``theta``, ``max_tokens``, ``simulation``, ``vocabulary``,
            ``reuse_answers``, ``rng``). The vote is pure (``delta`` must be 0; see the
            module docstring): c·ε_0 ≤ ε_RAG.
    """

    name = "murag"
    mode = "fixed"

    def __init__(
        self,
        retriever: Retriever,
        generator: Generator,
        *,
        tau: float = 0.5,
        epsilon_q: float = 10.0,
        epsilon_thr: float = 1.0,
        max_retrievals: int = 1,
        bin_size: float = 0.02,
        store: BudgetStore | None = None,
        accounting: str = "pure",
        renyi_epsilon: float | None = None,
        renyi_delta: float = 1e-6,
        rng: RngLike = None,
        simulation: bool = False,
        **kw: Any,
    ) -> None:
        if kw.get("delta", 0.0):
            raise ConfigError(
                f"{self.name} composes its vote purely (its filters charge pure ε_q per "
                f"document, Private-RAG Thm 1-2); got delta={kw['delta']!r}. Leave delta at "
                f"0, or use dp_vote/naive_multi for a vote calibrated at a delta."
            )
        gen = simulation_rng(rng, simulation=simulation)
        super().__init__(generator, slots=retriever.k, simulation=simulation, rng=gen, **kw)
        self.screener = ThresholdRetriever(
            retriever.kb,
            k=retriever.k,
            mode=self.mode,
            tau=tau,
            epsilon_q=epsilon_q,
            epsilon_thr=epsilon_thr,
            max_retrievals=max_retrievals,
            bin_size=bin_size,
            store=store,
            accounting=accounting,
            renyi_epsilon=renyi_epsilon,
            renyi_delta=renyi_delta,
            simulation=simulation,
            rng=gen,
        )
        self.vote.discoveries(self.screener.epsilon_rag)
        self._max_spent = 0.0

    def _vote_epsilon(self) -> float:
        return self.screener.epsilon_rag

    @property
    def total_epsilon(self) -> float:
        """The guarantee every document ends with: M·ε_q (Thm 1–2) with the pure filter;
        the Rényi filter's target ε (at δ = ``renyi_delta``) with ``accounting="renyi"``."""
        return self.screener.target_epsilon

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        q = Query.of(query)
        self._check_prompt(q)
        with self._lock:
            screening = self.screener.screen_batch([q.search_text])[0]  # charges first
            with charged_on_failure(self.screener, [screening.retrieval], account):
                texts = self.screener.kb.texts(screening.retrieval.indices)
                result, _ = self._answer_with(q, texts, self.screener.epsilon_rag)
            charged = list(screening.charged)
            if charged:
                spent = float(np.max(self.screener.document_epsilon(charged)))
                self._max_spent = max(self._max_spent, spent)
        # Per-document filters: the guarantee is per document, so the answer's event is
        # what each charged document paid (ε_q); with none charged no document was used.
        cost = answer_cost(
            [PureDpEvent(self.screener.epsilon_q)] if charged else [],
            mechanism=self.name,
            cumulative_epsilon=self._max_spent,
            per_document=screening.charged,
        )
        resp = _response(result, screening.retrieval, cost)
        meta = dict(resp.metadata)
        meta.update(padding=screening.padding, tau=screening.tau, screened=screening.screened)
        return Response(
            text=resp.text,
            tokens=resp.tokens,
            privacy=cost,
            retrieval=resp.retrieval,
            metadata=meta,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "screening": self.screener.config(),
            "total_epsilon": self.total_epsilon,
            **self._settings(),
            **self._vote_settings(self.screener.epsilon_rag),
        }


class MuRAGAda(MuRAG):
    """MURAG-ADA (Private-RAG Alg. 2/6): adaptive threshold with ε_thr, DP-RAG with
    ε_RAG = ε_q − ε_thr (same arguments as :class:`MuRAG`; ``tau`` is unused)."""

    name = "murag_ada"
    mode = "adaptive"


register_system("naive_multi", NaiveMultiRAG)
register_system("murag", MuRAG)
register_system("murag_ada", MuRAGAda)
