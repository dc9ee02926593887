"""``threshold``: relevance screening with per-document privacy filters (Private-RAG).

- **Fixed threshold** (MURAG, Private-RAG Alg. 1 lines 2–6): A_t = documents whose budget
  can pay ε_q; D_qt = {z ∈ A_t : r(z, q_t) > τ}; every z ∈ D_qt pays ε_q; the top k of
  D_qt go to the single-query DP-RAG, padded with empty documents (Alg. 3).
- **Adaptive threshold** (MURAG-ADA, Alg. 2/6 step 1): scores are cut into bins
  [a_i, b_i) from the most relevant down; the noisy prefix sum s̃ += |A_t^(i)| +
  Lap(1/ε_thr) runs until s̃ ≥ k (``ragprivacy.dp.noisy_prefix_threshold``); documents in
  the released bins pay ε_thr; A'_t = those that can still pay ε_RAG; they all pay ε_RAG
  (Alg. 6 lines 11–15) and the top k of A'_t (padded) go to DP-RAG.

:func:`pad_top_k` is Alg. 3 (TOP-K with padding); :func:`score_bins` and
:func:`adaptive_screen` are the pieces of Alg. 2 step 1, usable on their own (the bin-size
ablation of Private-RAG F.3 calls them directly).

Neighbouring relation: add/remove one document. Guarantee (Private-RAG Thm 1–2): each
document pays only for the queries whose screened set it enters, and is dropped once its
budget M·ε_q cannot pay the next charge, so each ends ε-DP with ε = M·ε_q (Feldman & Zrnic
2021, Cor. 3.3). The charges are made *before* the documents are returned (and so before
any generation). They stay charged if the request then fails (a failure is an answer:
``ragprivacy.rag.charged_on_failure``); :meth:`ThresholdRetriever.release` gives them back
only for a generator that was never reached, and for a screening's own discarded attempt.

Races: budgets are read, then charged. If another writer spends a document's budget in
between, the store refuses the charge whole; the screening then gives back what it had
already charged for this query and screens again on the budgets as they now are, so the
exhausted documents fall out of A_t (Alg. 1 line 2) instead of failing the request, and
no document id ever reaches an error message. A retry draws the adaptive threshold's
noise afresh; the discarded attempt released nothing. After ``_MAX_SCREENS`` attempts
under constant contention the request fails with no document charged (the service
still counts the account's answer: whether the races were lost depends on which documents
the screening picked).

Deviation: the MURAG-ADA charge is two atomic store charges (A'_t pays ε_thr + ε_RAG, then
A_t \\ A'_t pays ε_thr), both computed from one read of the budgets; with the in-memory
store (one lock per charge) and a single writer this is the algorithm exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragprivacy._random import RngLike
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.dp import (
    BudgetStore,
    DocumentBudgetExhaustedError,
    PureDpEvent,
    PureDpFilter,
    RenyiFilter,
    noisy_prefix_threshold,
    simulation_rng,
)
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.retrieval.base import Retriever, register_retriever
from ragprivacy.retrieval.knowledge_base import KnowledgeBase
from ragprivacy.types import Retrieval

__all__ = [
    "AdaptiveScreen",
    "PaddedTopK",
    "Screening",
    "ThresholdRetriever",
    "adaptive_screen",
    "pad_top_k",
    "score_bins",
]

_MAX_SCREENS = 16  # attempts of one screening while other writers keep spending budgets


@dataclass(frozen=True, slots=True)
class PaddedTopK:
    """TOP-K(D, K, r) of Private-RAG Alg. 3: ``positions`` (best first) plus ``padding``
    empty documents, so that there are always exactly K slots."""

    positions: IntArray
    padding: int

    @property
    def slots(self) -> int:
        return int(self.positions.size) + self.padding


def pad_top_k(positions: IntArray, scores: FloatArray, k: int) -> PaddedTopK:
    """Private-RAG Alg. 3: the top ``k`` of ``positions`` by ``scores``; when fewer than k
    are given, all of them plus ``k − |D|`` empty documents (ties to the lower position).

    >>> p = pad_top_k(np.array([4, 9]), np.array([0.2, 0.7]), 3)
    >>> p.positions.tolist(), p.padding
    ([9, 4], 1)
    """
    k = check_positive_int("k", k)
    pos = np.asarray(positions, dtype=np.int64)
    sc = np.asarray(scores, dtype=np.float64)
    if pos.shape != sc.shape or pos.ndim != 1:
        raise ConfigError("positions and scores must be 1-D arrays of equal length.")
    if pos.size == 0:
        return PaddedTopK(pos, k)
    order = np.lexsort((pos, -sc))[:k]
    return PaddedTopK(pos[order], max(0, k - pos.size))


def score_bins(bin_size: float, *, top: float = 1.0, bottom: float = -1.0) -> FloatArray:
    """Bin edges a_1 = top > a_2 > ... ≥ bottom, most relevant first: bin i holds scores in
    [edges[i+1], edges[i]) (the first bin also holds scores ≥ top).

    >>> score_bins(0.5, top=1.0, bottom=0.0).tolist()
    [1.0, 0.5, 0.0]
    """
    bin_size = check_positive("bin_size", bin_size)
    if not top > bottom:
        raise ConfigError(f"Bin range needs top > bottom; got top={top}, bottom={bottom}.")
    count = math.ceil((top - bottom) / bin_size - 1e-9)
    return top - bin_size * np.arange(count + 1, dtype=np.float64)


def _bin_of(scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin index of each score (−1 below the last edge)."""
    width = edges[0] - edges[1]
    b = np.floor((edges[0] - scores) / width).astype(np.int64)
    b = np.maximum(b, 0)  # scores above the top edge join the first bin
    b[scores < edges[-1]] = -1
    return np.asarray(np.minimum(b, edges.size - 2))


@dataclass(frozen=True, slots=True)
class AdaptiveScreen:
    """Step 1 of MURAG-ADA: ``released`` positions (active documents in the released bins,
    each paying ε_thr), the released threshold ``tau`` (the lower edge a_i of the stop
    bin, or the lowest edge when s̃ never reached k) and the ``stop_bin``."""

    released: IntArray
    tau: float
    stop_bin: int | None
    bin_counts: IntArray


def adaptive_screen(
    scores: FloatArray,
    active: np.ndarray,
    k: int,
    epsilon_thr: float,
    edges: FloatArray,
    *,
    simulation: bool = False,
    rng: RngLike = None,
) -> AdaptiveScreen:
    """MURAG-ADA step 1 (Private-RAG Alg. 2/6 lines 2–11) over one query's ``scores``.

    The noise is secure by default: exact discrete Laplace integers added to the integer
    bin counts (:func:`ragprivacy.dp.noisy_prefix_threshold`), from OS entropy.

    Args:
        scores: r(z, q_t) for every document.
        active: which documents can pay ε_thr (E(z) ≥ ε_thr).
        k: stop once the noisy prefix sum reaches k.
        epsilon_thr: ε_thr (Laplace scale 1/ε_thr per bin).
        edges: bin edges from :func:`score_bins`.
        simulation: float Laplace noise from ``rng`` (seedable, not secure) instead of
            the secure sampler (default ``False``).
        rng: simulation mode only; secure mode refuses a seed.

    >>> edges = score_bins(0.1, top=1.0, bottom=0.0)
    >>> scores = np.array([0.95, 0.93, 0.74, 0.72, 0.71, 0.3])
    >>> s = adaptive_screen(scores, np.ones(6, dtype=bool), 4, 50.0, edges)
    >>> s.stop_bin, s.released.tolist()  # integer Lap(1/50) noise: 0 but w.p. ~1e-21
    (2, [0, 1, 2, 3, 4])
    """
    sc = np.asarray(scores, dtype=np.float64)
    act = np.asarray(active, dtype=bool)
    if sc.shape != act.shape or sc.ndim != 1:
        raise ConfigError("scores and active must be 1-D arrays of equal length.")
    e = np.asarray(edges, dtype=np.float64)
    bins = _bin_of(sc, e)
    use = act & (bins >= 0)
    counts = np.bincount(bins[use], minlength=e.size - 1).astype(np.int64)
    pt = noisy_prefix_threshold(counts, k, epsilon_thr, simulation=simulation, rng=rng)
    last = pt.bins_released - 1
    released = np.flatnonzero(use & (bins <= last))
    tau = float(e[last + 1])
    return AdaptiveScreen(released, tau, pt.stop_bin, counts)


@dataclass(frozen=True, slots=True)
class Screening:
    """What one screened retrieval did: the padded top-K, the documents charged and how
    much each paid, and the threshold used (τ or the released τ_t)."""

    retrieval: Retrieval
    padding: int
    charged: dict[str, float] = field(default_factory=dict)
    tau: float = math.nan
    screened: int = 0

    @property
    def charge_ids(self) -> tuple[str, ...]:
        """The store charges this screening made (what :meth:`ThresholdRetriever.release`
        gives back)."""
        return self.retrieval.charge_ids


class ThresholdRetriever(Retriever):
    """Relevance screening with per-document filters: MURAG's fixed τ or MURAG-ADA's
    adaptive τ_t (see the module docstring).

    Args:
        kb: the knowledge base.
        k: K, the documents passed on (padded with empty ones, Alg. 3).
        mode: ``"fixed"`` (Alg. 1) or ``"adaptive"`` (Alg. 2/6).
        tau: the fixed threshold (cosine units for unit-norm embeddings).
        epsilon_q: the per-query budget ε_q.
        epsilon_thr: ε_thr of the adaptive threshold (ε_RAG = ε_q − ε_thr).
        max_retrievals: M; each document starts with budget M·ε_q.
        bin_size: bin width of the adaptive threshold.
        bin_range: (top, bottom) of the bins.
        store: where budgets live (default in memory; ``SqliteBudgetStore`` to persist).
            With ``accounting="renyi"`` its capacity must be the filter's budgets.
        accounting: ``"pure"`` — Private-RAG's pure-DP filter, budget M·ε_q per document
            (Alg. 1/2; F&Z 2021 Cor. 3.3); ``"renyi"`` — a Rényi filter
            (:meth:`ragprivacy.dp.RenyiFilter.for_target`) with per-document target
            (``renyi_epsilon``, ``renyi_delta``): each charge is the Rényi curve of a pure
            ε-DP event (randomized-response curve), and a document stays eligible while
            every kept order fits (F&Z 2021 Thm 3.1).
        renyi_epsilon: the (ε, δ) target's ε (default M·ε_q, the pure filter's guarantee).
        renyi_delta: the target's δ.
        simulation: float Laplace noise from ``rng``; else the exact secure sampler.
        rng: simulation stream.
    """

    name = "threshold"

    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        k: int = 5,
        mode: str = "fixed",
        tau: float = 0.5,
        epsilon_q: float = 10.0,
        epsilon_thr: float = 1.0,
        max_retrievals: int = 1,
        bin_size: float = 0.02,
        bin_range: tuple[float, float] = (1.0, -1.0),
        store: BudgetStore | None = None,
        accounting: str = "pure",
        renyi_epsilon: float | None = None,
        renyi_delta: float = 1e-6,
        simulation: bool = False,
        rng: RngLike = None,
    ) -> None:
        super().__init__(kb, k=k)
        self.mode = check_choice("mode", mode, ("fixed", "adaptive"))
        self.accounting = check_choice("accounting", accounting, ("pure", "renyi"))
        self.tau = float(tau)
        self.epsilon_q = check_positive("epsilon_q", epsilon_q)
        self.epsilon_thr = check_positive("epsilon_thr", epsilon_thr)
        if self.mode == "adaptive" and not self.epsilon_thr < self.epsilon_q:
            raise ConfigError(
                f"MURAG-ADA splits ε_q = ε_thr + ε_RAG with ε_RAG > 0: epsilon_thr must be "
                f"below epsilon_q={self.epsilon_q}; got {self.epsilon_thr}."
            )
        self.max_retrievals = check_positive_int("max_retrievals", max_retrievals)
        self.bin_size = check_positive("bin_size", bin_size)
        self.edges = score_bins(self.bin_size, top=bin_range[0], bottom=bin_range[1])
        self.renyi_delta = float(renyi_delta)
        self.filter: PureDpFilter | RenyiFilter
        if self.accounting == "pure":
            self.filter = PureDpFilter.for_murag(self.epsilon_q, self.max_retrievals, store)
            self.target_epsilon = self.max_retrievals * self.epsilon_q
        else:
            self.target_epsilon = check_positive(
                "renyi_epsilon",
                renyi_epsilon
                if renyi_epsilon is not None
                else self.max_retrievals * self.epsilon_q,
            )
            self.filter = RenyiFilter.for_target(
                self.target_epsilon,
                self.renyi_delta,
                store=store,
                expected_event=PureDpEvent(self.epsilon_q),
            )
        self._curves: dict[float, np.ndarray] = {}
        self.simulation = bool(simulation)
        self._rng = simulation_rng(rng, simulation=self.simulation)

    @property
    def epsilon_rag(self) -> float:
        """The budget the single-query DP-RAG gets: ε_q (fixed) or ε_q − ε_thr (adaptive)."""
        return self.epsilon_q if self.mode == "fixed" else self.epsilon_q - self.epsilon_thr

    def _amount(self, epsilon: float) -> Any:
        """What a pure ε-DP charge costs in the filter's store (ε, or its Rényi curve,
        computed once per ε: every query charges the same two or three amounts)."""
        if not isinstance(self.filter, RenyiFilter):
            return epsilon
        curve = self._curves.get(epsilon)
        if curve is None:
            curve = self._curves[epsilon] = self.filter.curve(PureDpEvent(epsilon))
            curve.setflags(write=False)
        return curve

    def _ids(self, positions: np.ndarray) -> list[str]:
        ids = self.kb.index.id_at
        return [ids(p) for p in positions.tolist()]

    def _charge(self, ids: list[str], epsilon: float, made: list[str]) -> None:
        """Charge ``ids`` (all or nothing) and note the charge in ``made``."""
        made.append(self.filter.store.charge(ids, self._amount(epsilon)).charge_id)

    def release(self, retrievals: Sequence[Retrieval], *, account: str | None = None) -> None:
        """Give back the filter charges of ``retrievals`` (or screenings' retrievals) whose
        request failed in a way that cannot depend on the data (a generator that was never
        reached: ``rag.charged_on_failure``); each charge is given back once."""
        for retrieval in retrievals:
            for charge_id in retrieval.charge_ids:
                self.filter.store.release(charge_id)

    def _can_pay(self, positions: np.ndarray, amount: float) -> np.ndarray:
        ids = self._ids(positions)
        if not ids:
            return np.zeros(0, dtype=bool)
        return self.filter.store.can_afford(ids, self._amount(amount))

    def document_epsilon(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The ε each document has spent so far (pure: the sum of its charges; Rényi: the
        (ε, ``renyi_delta``) conversion of its spent curve)."""
        if isinstance(self.filter, RenyiFilter):
            return self.filter.epsilon(doc_ids, self.renyi_delta)
        return np.asarray(self.filter.spent(doc_ids), dtype=np.float64)

    def screen(self, scores: FloatArray) -> Screening:
        """Screen one query's full score vector, charge the filters, return the top K.

        A charge refused because another writer spent some budgets meanwhile is retried
        on the budgets as they now are (see the module docstring); nothing stays charged
        from a refused attempt.
        """
        sc = np.asarray(scores, dtype=np.float64)
        for _ in range(_MAX_SCREENS):
            made: list[str] = []
            try:
                return self._screen_once(sc, made)
            except DocumentBudgetExhaustedError:
                for charge_id in made:
                    self.filter.store.release(charge_id)
            except BaseException:
                for charge_id in made:
                    self.filter.store.release(charge_id)
                raise
        raise BudgetExhaustedError(
            f"Other requests kept spending the screened documents' budgets through "
            f"{_MAX_SCREENS} attempts; nothing was charged. Retry the query."
        )

    def _screen_once(self, sc: np.ndarray, made: list[str]) -> Screening:
        charged: dict[str, float] = {}
        if self.mode == "fixed":
            above = np.flatnonzero(sc > self.tau)  # Alg. 1 line 3 (then line 2's A_t)
            chosen = above[self._can_pay(above, self.epsilon_q)]
            ids = self._ids(chosen)
            if ids:
                self._charge(ids, self.epsilon_q, made)  # Alg. 1 lines 4-5
                charged = dict.fromkeys(ids, self.epsilon_q)
            tau = self.tau
        else:
            lowest = self.edges[-1]
            consider = np.flatnonzero(sc >= lowest)
            active = np.zeros(sc.size, dtype=bool)
            active[consider[self._can_pay(consider, self.epsilon_thr)]] = True
            step1 = adaptive_screen(
                sc,
                active,
                self.k,
                self.epsilon_thr,
                self.edges,
                simulation=self.simulation,
                rng=self._rng,
            )
            released = step1.released
            # A'_t: after paying ε_thr, can still pay ε_RAG (Alg. 6 line 11).
            both = released[self._can_pay(released, self.epsilon_thr + self.epsilon_rag)]
            only_thr = np.setdiff1d(released, both, assume_unique=True)
            ids_both = self._ids(both)
            ids_thr = self._ids(only_thr)
            if ids_both:
                self._charge(ids_both, self.epsilon_thr + self.epsilon_rag, made)
            if ids_thr:
                self._charge(ids_thr, self.epsilon_thr, made)
            charged = dict.fromkeys(ids_thr, self.epsilon_thr)
            charged.update(dict.fromkeys(ids_both, self.epsilon_q))
            chosen, tau = both, step1.tau
        padded = pad_top_k(chosen, sc[chosen], self.k)
        pos = padded.positions
        retrieval = Retrieval(
            ids=tuple(self.kb.index.id_at(int(p)) for p in pos),
            indices=tuple(int(p) for p in pos),
            scores=tuple(float(sc[p]) for p in pos),
            charge_ids=tuple(made),
        )
        return Screening(retrieval, padded.padding, charged, tau, int(len(charged)))

    def screen_batch(self, queries: Sequence[str]) -> list[Screening]:
        """Screen queries in order (each sees the budgets the previous ones left)."""
        if not queries:
            return []
        vectors = self.kb.embedder.encode(list(queries))
        # One query per index call: a block's BLAS kernel rounds differently, so a query's
        # scores (and the documents its threshold admits) would depend on its neighbours.
        done: list[Screening] = []
        try:
            for v in vectors:
                done.append(self.screen(self.kb.index.scores(v[None, :])[0]))
        except BaseException:  # all or nothing: a batch that fails keeps no charge
            self.release([d.retrieval for d in done])
            raise
        return done

    def retrieve(self, query: str, *, account: str | None = None) -> Retrieval:
        return self.screen_batch([query])[0].retrieval

    def retrieve_batch(
        self, queries: Sequence[str], *, account: str | None = None
    ) -> list[Retrieval]:
        return [s.retrieval for s in self.screen_batch(queries)]

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "k": self.k,
            "mode": self.mode,
            "tau": self.tau,
            "epsilon_q": self.epsilon_q,
            "epsilon_thr": self.epsilon_thr,
            "max_retrievals": self.max_retrievals,
            "bin_size": self.bin_size,
            "accounting": self.accounting,
            "simulation": self.simulation,
            "target_epsilon": self.target_epsilon,
        }


register_retriever("threshold", ThresholdRetriever)
