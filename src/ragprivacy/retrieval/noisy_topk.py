"""``noisy_topk``: Gaussian noise-then-select retrieval with per-account calibration.

Collusion paper §2.1, eq. (2.1): Retr(q, a) = TopK(Score(q, D) + N(0, σ²I)), with σ set
per account from its budget (ε_acc, δ_acc) over an audit window of n queries: eq. (3.1)
gives the per-query budget and eq. (3.4) the σ (``calibration="paper"``); the exact
Gaussian-DP calibration (``calibration="exact"``) gives the smallest σ for which the n
queries compose to exactly (ε_acc, δ_acc) (``ragprivacy.dp.calibrate_account_sigma``).

The account — its policy, counter, σ calibration, score range and noise-then-select — is
:mod:`ragprivacy.dp.account`; this retriever is that account over one knowledge base. Each
account may make at most n queries: the :class:`~ragprivacy.dp.AccountCounter` reserves a
query *before* anything is embedded or scored, refuses with
:class:`~ragprivacy.errors.BudgetExhaustedError` once the n are spent (nothing is reserved
then), and gives it back if the request fails (:meth:`NoisyTopKRetriever.release`).

Neighbouring relation: replace the document held by one slot of the index; Δ = the width of
the public ``score_range`` every score is clipped to (default
:data:`~ragprivacy.dp.DEFAULT_SCORE_RANGE` = (−1, 1), Δ = 2;
:data:`~ragprivacy.dp.PAPER_SCORE_RANGE` = (0, 1) gives the collusion paper's Δ = 1
honestly, and the paper-reproduction experiments use it). ``score_range=None`` with an
explicit ``sensitivity`` skips clipping and takes Δ on trust (reported as
``sensitivity_source="trusted"``). Guarantee: each query is a Gaussian mechanism (event
``GaussianEvent(σ, Δ)``), so one account's n queries are (ε_acc, δ_acc)-DP under the chosen
calibration; the top-K indices are post-processing.

Modes: secure (default) — exact discrete Gaussian on a fixed-point grid
(:class:`~ragprivacy.dp.GaussianNoisyTopK`); ``simulation=True`` — numpy float noise from
``rng``. Both score **noise first** by default (``noise_first=True``, with a score range):
the noise of every document is drawn as the full path draws it, and only the documents
whose noise leaves them a chance of the top K are scored
(:meth:`~ragprivacy.dp.GaussianNoisyTopK.select_noise_first`, through the index's
:meth:`~ragprivacy.index.VectorIndex.scores_at`); the output is the full path's, and
which documents are scored depends on the noise alone. At the default calibration that
is a handful of documents instead of n. The documents scored are a function of the noise:
like the noise, they must not be observable next to the output (a database's query log,
a timing of the fallback's full scan); ``noise_first=False`` has no such channel.
``lazy=True`` (simulation only) — the exact lazy variant of
:mod:`ragprivacy.retrieval.lazy_noisy` over the index's (possibly approximate) top-C
(:func:`~ragprivacy.retrieval.lazy_index_topk`; any index backend, ``pgvector``
included: its HNSW search gives the candidates and the database scores the rest). At
small σ the index's bounds are too loose for the lazy rounds and every selection falls
back to full noise after paying for its candidate search; the retriever's
:class:`~ragprivacy.retrieval.FallbackMemory` notices, per account (3 of 4 of the
account's last 16 fell back), and runs that account's queries on the full path without
the search, probing the lazy path on every 8th one. Whether a lazy selection falls back
depends on its private scores, so the memory is one per account (``None`` included, the
4,096 most recently active accounts kept): one account's outcomes never choose another
account's path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ragprivacy._random import RngLike
from ragprivacy._validation import check_positive_int
from ragprivacy.dp import (
    DEFAULT_SCORE_RANGE,
    AccountCounter,
    AccountPolicy,
    noise_first_min_scored,
    simulation_rng,
)
from ragprivacy.errors import ConfigError
from ragprivacy.retrieval.base import Retriever, register_retriever
from ragprivacy.retrieval.bucket_bounds import BucketBounds
from ragprivacy.retrieval.knowledge_base import KnowledgeBase
from ragprivacy.retrieval.lazy_noisy import FallbackMemory, lazy_index_topk
from ragprivacy.types import Retrieval

__all__ = ["NoisyTopKRetriever"]

ANONYMOUS = "anonymous"


class NoisyTopKRetriever(Retriever):
    """Gaussian noise-then-select over the full score vector (collusion paper eq. 2.1).

    Args:
        kb: the knowledge base.
        k: documents per query.
        epsilon_acc: per-account ε over the window.
        delta_acc: per-account δ.
        queries_per_account: n, the queries one account may make in the window.
        calibration: ``"paper"`` (eq. 3.1 + 3.4), ``"exact"`` (GDP, tight), or
            ``"analytic"``/``"rdp"`` (see :func:`ragprivacy.dp.calibrate_account_sigma`).
        sigma: use this σ instead of calibrating (the budget is then only the counter).
        score_range: public (low, high) the scores are clipped into; Δ = high − low.
            Default :data:`~ragprivacy.dp.DEFAULT_SCORE_RANGE` (−1, 1), Δ = 2; ``(0, 1)``
            is the paper's Δ = 1 with clipping. ``None``: no clipping, and
            ``sensitivity`` must be given (taken on trust).
        sensitivity: L2 sensitivity Δ; with ``score_range`` it must be at least the
            range's width (default: the width); without it, Δ is the caller's claim.
        simulation: float noise from ``rng`` instead of the secure sampler.
        noise_first: score only the documents the noise leaves in the race
            (:meth:`~ragprivacy.dp.GaussianNoisyTopK.select_noise_first`; the same
            output as scoring all n, from the index's ``scores_at``); needs a
            ``score_range`` (ignored without one). ``False`` scores every document.
        lazy: the exact lazy variant over the index's top ``candidates`` (simulation only);
            its fallbacks are remembered per account in :attr:`fallbacks` (a
            :class:`~ragprivacy.retrieval.FallbackMemory`).
        candidates: candidate-set size for ``lazy`` (default
            ``dp.noise_first_min_scored(k)``); with
            ``noise_first``, the fewest documents scored per query (the candidates padded
            with the next largest noises, so the count is constant unless more are
            candidates).
        score_bound: certified upper bound on every score for ``lazy`` (1 for unit
            vectors; a small margin covers float rounding; a tenant may certify a
            tighter bound of its own index); clipped to ``score_range``.
        buckets: per-bucket certified bounds for ``lazy``
            (:class:`~ragprivacy.retrieval.BucketBounds`, built once offline from the
            index's vectors); ``None`` uses the single bound ``score_bound``.
        counter: a shared :class:`~ragprivacy.dp.AccountCounter` (default: a new one
            with limit n).
        rng: simulation stream.

    >>> from ragprivacy.corpus import Corpus
    >>> from ragprivacy.types import Document
    >>> kb = KnowledgeBase.build(Corpus([Document("a", "red apples"), Document("b", "blue sky"),
    ...     Document("c", "green pears")]), embedder="hashing")
    >>> r = NoisyTopKRetriever(kb, k=1, queries_per_account=2, simulation=True, rng=0)
    >>> len(r.retrieve("blue sky", account="u1").ids)
    1
    """

    name = "noisy_topk"

    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        k: int = 5,
        epsilon_acc: float = 1.0,
        delta_acc: float = 1e-6,
        queries_per_account: int = 10_000,
        calibration: str = "paper",
        sigma: float | None = None,
        score_range: tuple[float, float] | None = DEFAULT_SCORE_RANGE,
        sensitivity: float | None = None,
        simulation: bool = False,
        noise_first: bool = True,
        lazy: bool = False,
        candidates: int | None = None,
        score_bound: float = 1.0 + 1e-5,
        buckets: BucketBounds | None = None,
        counter: AccountCounter | None = None,
        rng: RngLike = None,
    ) -> None:
        super().__init__(kb, k=k)
        self.policy = AccountPolicy(
            rate_limit=queries_per_account,
            epsilon=epsilon_acc,
            delta=delta_acc,
            sigma=sigma,
            calibration=calibration,
            score_range=score_range,
            sensitivity=sensitivity,
        )
        self.simulation = bool(simulation)
        self.mechanism = self.policy.mechanism(self.k, simulation=self.simulation)
        self.sigma = self.mechanism.sigma
        self.noise_first = bool(noise_first) and self.score_range is not None
        self.lazy = bool(lazy)
        if self.lazy and not self.simulation:
            raise ConfigError(
                "The lazy noise-then-select draws float noise: set simulation=True with "
                "lazy=True (the secure path noises every score with the exact sampler)."
            )
        self.candidates = check_positive_int(
            "candidates", candidates or noise_first_min_scored(self.k)
        )
        self.score_bound = float(score_bound)
        if buckets is not None and not isinstance(buckets, BucketBounds):
            raise ConfigError(f"The 'buckets' parameter must be a BucketBounds; got {buckets!r}.")
        if buckets is not None and buckets.n != len(kb):
            raise ConfigError(
                f"The bucket bounds cover {buckets.n} documents but the index holds {len(kb)}; "
                f"rebuild them with BucketBounds.build(index vectors)."
            )
        self.buckets = buckets
        self.fallbacks = FallbackMemory()
        self.counter = counter if counter is not None else AccountCounter(self.queries_per_account)
        self._rng = simulation_rng(rng, simulation=self.simulation)

    @property
    def delta(self) -> float:  # type: ignore[override]  # a read-only view of delta_acc
        """δ at which the per-query Gaussian event's ε is reported: the account's δ_acc."""
        return self.delta_acc

    # Read-only views of the account policy, under the names the constructor takes.
    @property
    def epsilon_acc(self) -> float:
        return self.policy.epsilon

    @property
    def delta_acc(self) -> float:
        return self.policy.delta

    @property
    def queries_per_account(self) -> int:
        return self.policy.rate_limit

    @property
    def calibration(self) -> str:
        return self.policy.calibration

    @property
    def score_range(self) -> tuple[float, float] | None:
        return self.policy.score_range

    @property
    def sensitivity(self) -> float:
        return float(self.policy.sensitivity)  # type: ignore[arg-type]  # resolved

    @property
    def sensitivity_source(self) -> str:
        return self.policy.sensitivity_source

    def retrieve(self, query: str, *, account: str | None = None) -> Retrieval:
        return self.retrieve_batch([query], account=account)[0]

    def retrieve_batch(
        self, queries: Sequence[str], *, account: str | None = None
    ) -> list[Retrieval]:
        if not queries:
            return []
        # Check and reserve the account's budget before touching any document; give it back
        # if the retrieval itself fails (nothing was returned).
        reservation = self.counter.reserve(
            account or ANONYMOUS, len(queries), limit=self.queries_per_account
        )
        try:
            return self._select(queries, reservation.token, account)
        except BaseException:
            self.counter.release(reservation)
            raise

    def release(self, retrievals: Sequence[Retrieval], *, account: str | None = None) -> None:
        """Give the account back the queries of ``retrievals`` (their request failed)."""
        if retrievals:
            tokens = retrievals[0].charge_ids
            self.counter.release_tokens(account or ANONYMOUS, len(retrievals), tokens)

    def _select(self, queries: Sequence[str], token: str, account: str | None) -> list[Retrieval]:
        vectors = self.kb.embedder.encode(list(queries))
        if not self.lazy:
            return self._noise_then_select(vectors, token, noise_first=self.noise_first)
        out = []
        for v in vectors:
            # the account's own memory: another account's outcomes never choose this path
            if self.fallbacks.search_first(account=account):
                out.append(self._lazy_one(v, token, account))
            else:  # its recent lazy selections fell back: the full path, without the search
                out.extend(self._noise_then_select(v[None, :], token, noise_first=False))
        return out

    def _noise_then_select(
        self, vectors: np.ndarray, token: str, *, noise_first: bool
    ) -> list[Retrieval]:
        index = self.kb.index
        if noise_first:
            sel = self.mechanism.select_noise_first(
                (len(vectors), len(index)),
                lambda row, positions: index.scores_at(vectors[row], positions),
                score_all=lambda: index.scores(vectors),
                rng=self._rng,
                min_scored=self.candidates,
            )
        else:
            sel = self.mechanism.select(index.scores(vectors), rng=self._rng)
        id_at = self.kb.index.id_at  # K lookups, no copy of the n ids
        return [
            Retrieval(
                ids=tuple(id_at(int(p)) for p in sel.indices[row]),
                indices=tuple(int(p) for p in sel.indices[row]),
                scores=tuple(float(s) for s in sel.noisy_scores[row]),
                event=self.mechanism.event,
                charge_ids=(token,),
            )
            for row in range(len(vectors))
        ]

    def _clip(self, values: np.ndarray) -> np.ndarray:
        if self.score_range is None:
            return values
        return np.asarray(np.clip(values, self.score_range[0], self.score_range[1]))

    def _lazy_one(self, vector: np.ndarray, token: str, account: str | None) -> Retrieval:
        v = np.asarray(vector, dtype=np.float32)
        # Clipping is monotone, so clip(u) bounds the clipped scores wherever u bounds them.
        if self.buckets is None:
            bound: float | np.ndarray = float(self._clip(np.array([self.score_bound]))[0])
        else:
            bound = self._clip(self.buckets.bounds(v))
        sel = lazy_index_topk(
            self.kb.index,
            v,
            self.k,
            self.sigma,
            candidates=self.candidates,
            bound=bound,
            buckets=self.buckets,
            score_range=self.score_range,
            sensitivity=self.sensitivity,
            rng=self._rng,
        )
        self.fallbacks.record(sel.fell_back, account=account)
        id_at = self.kb.index.id_at
        return Retrieval(
            ids=tuple(id_at(int(p)) for p in sel.indices),
            indices=tuple(int(p) for p in sel.indices),
            scores=tuple(float(s) for s in sel.noisy_scores),
            event=self.mechanism.event,
            charge_ids=(token,),
        )

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "k": self.k,
            "epsilon_acc": self.epsilon_acc,
            "delta_acc": self.delta_acc,
            "queries_per_account": self.queries_per_account,
            "calibration": self.calibration,
            "sigma": self.sigma,
            "score_range": list(self.score_range) if self.score_range is not None else None,
            "sensitivity": self.sensitivity,
            "sensitivity_source": self.sensitivity_source,
            "simulation": self.simulation,
            "noise_first": self.noise_first,
            "lazy": self.lazy,
            "buckets": None if self.buckets is None else self.buckets.count,
        }


register_retriever("noisy_topk", NoisyTopKRetriever)
