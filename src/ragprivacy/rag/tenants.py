"""A multi-tenant RAG model: tenants with their own indices, accounts with budgets.

Collusion paper §2.1: a service P = (D, Emb, LLM, Policy) holds one index D_t per tenant
t; each account a belongs to one tenant t(a), may send at most r queries per audit window,
and is promised (ε_acc, δ_acc)-DP retrieval over that window. A query q of account a is
scored against D_{t(a)} only, and Gaussian noise is added to *every* score before top-K
selection (eq. 2.1)::

    Retr(q, a) = TopK(clip(Score(q, D_{t(a)})) + N(0, σ²I))

with scores clipped to the account policy's public ``score_range`` so that the per-query
sensitivity Δ (replace one document in its slot) is its width; see :class:`AccountPolicy`.

The noise comes from :class:`ragprivacy.dp.GaussianNoisyTopK`: integer-exact discrete
Gaussian noise from ChaCha20 bits by default (optionally derived as
z_q = DGS(H(s_W ‖ rec_q); σ) from a window seed, §5.3), or the float fast path with
``simulation=True`` for experiments.

The M4 misconfiguration of Remark 2.1 — a shared backend that lets an account's query be
scored against *another* tenant's index — is an explicit switch, ``shared_backend``,
off by default; with it off such a query is refused. It exists to reproduce the
external-collusion experiment (§A.3), never as a deployment option.

Importable without HTTP: the service layer wraps this model.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragprivacy._random import RngLike
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.dp import (
    ChaCha20Bits,
    GaussianEvent,
    GaussianNoisyTopK,
    Grid,
    calibrate_account_sigma,
    collusion_sigma,
    score_sensitivity,
    simulation_rng,
)
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.generate import Generator
from ragprivacy.rag.base import Query, RAGSystem, _answer_with_retrievals, refunded_failure
from ragprivacy.retrieval import KnowledgeBase
from ragprivacy.types import Response, Retrieval

__all__ = [
    "AccountPolicy",
    "MultiTenantRAG",
    "TenantAccessError",
    "TenantRAGSystem",
    "TenantSelection",
]


class TenantAccessError(ConfigError):
    """A query asked for an index outside its account's tenant (shared_backend is off)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AccountPolicy:
    """Per-account policy of §2.1: rate limit r per window and budget (ε_acc, δ_acc).

    ``sigma`` is derived from the budget by ``calibration``: ``"paper"`` is eq. (3.1) +
    (3.4) (advanced composition; what the paper's experiments use), the others are those
    of :func:`ragprivacy.dp.calibrate_account_sigma` (``"exact"``, ``"rdp"``,
    ``"analytic"``). An explicit ``sigma`` overrides the calibration.

    **Neighbouring relation and Δ.** The guarantee is for tenant indices that differ in
    the document held by *one slot* (replace-one; the retrieval returns slot positions, so
    add/remove is covered only by padding to a public size — docs/dp.md). Replacing one
    document moves one coordinate of the score vector by at most the width of the interval
    the scores live in, so scores are clipped to the public ``score_range`` before noise
    and Δ = high − low (``sensitivity`` defaults to it):

    * ``score_range=(-1.0, 1.0)`` (default): raw cosine / inner-product scores of unit
      vectors, Δ = 2;
    * ``score_range=(0.0, 1.0)``: negative scores clipped to 0, Δ = 1 — the paper's Δ
      with the clipping that makes it hold;
    * ``score_range=None, sensitivity=1.0``: the paper's statement as printed ([C] §2.2,
      "L2 sensitivity bounded by 1 for unit-norm embeddings"), no clipping, Δ taken on
      trust. It is exact for a neighbouring pair whose changed score moves by at most 1
      (the planted target/orthogonal-decoy pair of §4.4), not for every pair.

    >>> round(AccountPolicy(rate_limit=10_000, epsilon=1.0, delta=1e-6).noise_sigma)
    7169
    >>> paper = AccountPolicy(rate_limit=10_000, epsilon=1.0, score_range=None, sensitivity=1.0)
    >>> round(paper.noise_sigma), paper.sensitivity
    (3584, 1.0)
    """

    rate_limit: int
    epsilon: float
    delta: float = 1e-6
    sigma: float | None = None
    calibration: str = "paper"
    score_range: tuple[float, float] | None = (-1.0, 1.0)
    sensitivity: float | None = None

    def __post_init__(self) -> None:
        check_positive_int("rate_limit", self.rate_limit)
        check_positive("epsilon", self.epsilon)
        if not 0 < float(self.delta) < 1:
            raise ConfigError(f"The 'delta' parameter must be in (0, 1); got {self.delta!r}.")
        check_choice("calibration", self.calibration, ("paper", "exact", "rdp", "analytic"))
        if self.sigma is not None:
            check_positive("sigma", self.sigma)
        resolved = score_sensitivity(self.score_range, self.sensitivity)
        object.__setattr__(self, "score_range", resolved.score_range)
        object.__setattr__(self, "sensitivity", resolved.sensitivity)

    @property
    def noise_sigma(self) -> float:
        """σ on every retrieval score for this account's queries (calibrated with Δ)."""
        return self.sigma_for(float(self.sensitivity))  # type: ignore[arg-type]  # resolved

    def sigma_for(self, delta_score: float) -> float:
        """σ calibrated so that ``rate_limit`` queries of sensitivity ``delta_score`` are
        (ε, δ)-DP (the policy's own ``sigma`` when it fixes one). The secure service passes
        Δ rounded up to its integer grid, the Δ its events charge."""
        if self.sigma is not None:
            return float(self.sigma)
        if self.calibration == "paper":
            return collusion_sigma(self.epsilon, self.delta, self.rate_limit, delta_score)
        return calibrate_account_sigma(
            self.epsilon,
            self.delta,
            self.rate_limit,
            sensitivity=delta_score,
            method=self.calibration,
        )


@dataclass(slots=True)
class _Account:
    id: str
    tenant: str
    policy: AccountPolicy
    sigma: float
    mechanism: GaussianNoisyTopK
    used: int = 0


@dataclass(frozen=True, slots=True)
class TenantSelection:
    """What a batch of Q queries retrieved: ``indices[q]`` (positions in ``tenant``'s
    index, best first) and, for instrumented evaluation only, the noisy scores of the
    selected positions. ``event`` is the privacy event of *one* query."""

    account: str
    tenant: str
    indices: IntArray
    noisy_scores: FloatArray
    event: GaussianEvent
    query_hashes: tuple[str, ...] = field(default=())


class MultiTenantRAG:
    """Tenants with their own :class:`KnowledgeBase`, accounts with rate limits and DP.

    Args:
        top_k: K of the noisy top-K.
        shared_backend: the M4 misconfiguration (Remark 2.1): when True any account may be
            scored against any tenant's index. Off by default.
        simulation: use the dp layer's float fast path (keyword ``rng``) instead of the
            secure discrete Gaussian; for experiments only.
        window_seed: with secure noise, derive each query's noise from
            H(s_W ‖ rec_q), rec_q = (account, tenant, H(q), ts) (§5.3 A2) instead of OS
            entropy. At least 32 bytes.
        rng: the simulation stream.

    >>> from ragprivacy.corpus import Corpus
    >>> from ragprivacy.types import Document
    >>> docs = [Document(f"d{i}", f"note {i} about topic {i % 3}") for i in range(6)]
    >>> kb = KnowledgeBase.build(Corpus(docs), embedder="hashing")
    >>> svc = MultiTenantRAG(top_k=2, simulation=True, rng=0)
    >>> svc.add_tenant("acme", kb)
    >>> svc.add_account("alice", "acme", AccountPolicy(rate_limit=10, epsilon=8.0))
    >>> len(svc.retrieve("topic 1", account="alice"))
    2
    """

    def __init__(
        self,
        *,
        top_k: int = 5,
        shared_backend: bool = False,
        simulation: bool = False,
        window_seed: bytes | None = None,
        rng: RngLike = None,
    ) -> None:
        self.top_k = check_positive_int("top_k", top_k)
        self.shared_backend = bool(shared_backend)
        self.simulation = bool(simulation)
        if window_seed is not None:
            if simulation:
                raise ConfigError("A window_seed derives secure noise; it needs simulation=False.")
            if not isinstance(window_seed, bytes) or len(window_seed) < 32:
                raise ConfigError(
                    "The 'window_seed' parameter must be at least 32 random bytes (λ ≥ 256, "
                    "§5.2); use os.urandom(32)."
                )
        self.window_seed = window_seed
        self._rng = simulation_rng(rng, simulation=self.simulation)
        self._tenants: dict[str, KnowledgeBase] = {}
        self._accounts: dict[str, _Account] = {}
        self._clock = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ setup
    def add_tenant(self, tenant_id: str, kb: KnowledgeBase) -> None:
        """Register a tenant and its own knowledge base."""
        if not isinstance(tenant_id, str) or not tenant_id:
            raise ConfigError(f"A tenant id must be a non-empty string; got {tenant_id!r}.")
        if tenant_id in self._tenants:
            raise ConfigError(f"Tenant {tenant_id!r} already exists; choose another id.")
        if not isinstance(kb, KnowledgeBase):
            raise ConfigError(f"A tenant needs a KnowledgeBase; got {type(kb).__name__}.")
        self._tenants[tenant_id] = kb

    def add_account(self, account_id: str, tenant_id: str, policy: AccountPolicy) -> None:
        """Register an account under a tenant with its policy."""
        if tenant_id not in self._tenants:
            raise ConfigError(
                f"Unknown tenant {tenant_id!r}; add it first (known: {sorted(self._tenants)})."
            )
        if not isinstance(account_id, str) or not account_id or account_id in self._accounts:
            raise ConfigError(f"Account ids must be new non-empty strings; got {account_id!r}.")
        if not isinstance(policy, AccountPolicy):
            raise ConfigError(f"The 'policy' must be an AccountPolicy; got {policy!r}.")
        # Secure noise lives on an integer grid, which rounds Δ up by about one grid unit;
        # σ is calibrated for the Δ the account's events charge, so ε_acc is not overrun.
        grid = Grid()
        delta_score = float(policy.sensitivity)  # type: ignore[arg-type]  # resolved
        sigma = policy.sigma_for(
            delta_score if self.simulation else grid.rounded_sensitivity(delta_score)
        )
        # The policy and the service's settings are fixed, so one mechanism serves every
        # query of the account; building it draws nothing from the noise stream.
        mechanism = GaussianNoisyTopK(  # clips to the policy's score_range (Δ = its width)
            sigma=sigma,
            k=self.top_k,
            sensitivity=policy.sensitivity,
            score_range=policy.score_range,
            simulation=self.simulation,
            grid=grid,
        )
        self._accounts[account_id] = _Account(account_id, tenant_id, policy, sigma, mechanism)

    @property
    def tenants(self) -> list[str]:
        return sorted(self._tenants)

    @property
    def accounts(self) -> list[str]:
        return sorted(self._accounts)

    def tenant_of(self, account_id: str) -> str:
        return self._account(account_id).tenant

    def policy_of(self, account_id: str) -> AccountPolicy:
        return self._account(account_id).policy

    def knowledge_base(self, tenant_id: str) -> KnowledgeBase:
        if tenant_id not in self._tenants:
            raise ConfigError(f"Unknown tenant {tenant_id!r}; known: {sorted(self._tenants)}.")
        return self._tenants[tenant_id]

    def sigma(self, account_id: str) -> float:
        """σ on the scores of this account's queries."""
        return self._account(account_id).sigma

    def remaining(self, account_id: str) -> int:
        """Queries this account may still send in the current window."""
        acc = self._account(account_id)
        return acc.policy.rate_limit - acc.used

    def open_window(self) -> None:
        """Open a new audit window: every account's rate budget resets (M2)."""
        for acc in self._accounts.values():
            acc.used = 0

    def _account(self, account_id: str | None) -> _Account:
        if account_id is None or account_id not in self._accounts:
            raise ConfigError(
                f"Unknown account {account_id!r}; every query needs a registered account."
            )
        return self._accounts[account_id]

    # ------------------------------------------------------------------ retrieval
    def _target(self, acc: _Account, tenant: str | None) -> str:
        target = acc.tenant if tenant is None else tenant
        if target not in self._tenants:
            raise ConfigError(f"Unknown tenant {target!r}; known: {sorted(self._tenants)}.")
        if target != acc.tenant and not self.shared_backend:
            raise TenantAccessError(
                f"Account {acc.id!r} of tenant {acc.tenant!r} cannot query tenant {target!r}'s "
                "index: queries are scored against the account's own tenant only (eq. 2.1). "
                "shared_backend=True simulates the M4 misconfiguration."
            )
        return target

    def _charge(self, acc: _Account, count: int) -> None:
        with self._lock:  # check-then-increment is one step across threads
            if acc.used + count > acc.policy.rate_limit:
                raise BudgetExhaustedError(
                    f"Account {acc.id!r} may send {acc.policy.rate_limit} queries per window "
                    f"and has sent {acc.used}; {count} more would exceed the rate limit. Wait "
                    "for the next window."
                )
            acc.used += count

    def release(self, account: str, count: int) -> None:
        """Give back ``count`` queries of a request that failed before it answered.

        Spend only on success: the rate limit (and so the per-account guarantee) counts
        answers that reached the caller; a request whose generation failed released
        nothing.
        """
        acc = self._account(account)
        count = check_positive_int("count", count)
        with self._lock:
            acc.used = max(acc.used - count, 0)

    def search(
        self,
        vectors: FloatArray,
        *,
        account: str,
        tenant: str | None = None,
        query_hashes: Sequence[str] | None = None,
    ) -> TenantSelection:
        """Noisy top-K for a batch of query embeddings (rows) from one account.

        Checks the tenant boundary and the rate limit first, then charges the whole batch
        (nothing is charged if either check fails).
        """
        acc = self._account(account)
        target = self._target(acc, tenant)
        kb = self._tenants[target]
        q = np.asarray(vectors, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2 or q.shape[1] != kb.index.dim or q.shape[0] == 0:
            raise ConfigError(
                f"Query vectors must have shape [Q >= 1, {kb.index.dim}]; got {q.shape}."
            )
        hashes = tuple(query_hashes) if query_hashes is not None else ()
        if hashes and len(hashes) != q.shape[0]:
            raise ConfigError("Give one query hash per query vector.")
        self._charge(acc, q.shape[0])
        try:
            return self._select(acc, target, q, hashes)
        except BaseException:  # nothing was returned: the queries are given back
            self.release(acc.id, q.shape[0])
            raise

    def _select(
        self, acc: _Account, target: str, q: FloatArray, hashes: tuple[str, ...]
    ) -> TenantSelection:
        kb = self._tenants[target]
        scores = kb.index.scores(q)
        mech = acc.mechanism
        if self.simulation:
            sel = mech.select(scores, rng=self._rng)
            idx, noisy = sel.indices, sel.noisy_scores
        elif self.window_seed is None:
            sel = mech.select(scores, bits=ChaCha20Bits.from_entropy())
            idx, noisy = sel.indices, sel.noisy_scores
        else:  # one derived key per query record rec_q = (a, t(a), H(q), ts)
            rows_i, rows_s = [], []
            for r in range(q.shape[0]):
                self._clock = max(self._clock + 1, time.time_ns())
                hq = hashes[r] if hashes else hashlib.sha256(q[r].tobytes()).hexdigest()
                rec = (acc.id, acc.tenant, hq, self._clock)
                one = mech.select(scores[r], bits=ChaCha20Bits.derived(self.window_seed, rec))
                rows_i.append(one.indices)
                rows_s.append(one.noisy_scores)
            idx, noisy = np.stack(rows_i), np.stack(rows_s)
        return TenantSelection(
            account=acc.id,
            tenant=target,
            indices=np.asarray(idx),
            noisy_scores=np.asarray(noisy),
            event=mech.event,
            query_hashes=hashes,
        )

    def retrieve_batch(
        self, queries: Sequence[str], *, account: str, tenant: str | None = None
    ) -> list[Retrieval]:
        """Embed query texts with the target tenant's embedder, then :meth:`search`."""
        if not queries:
            return []
        acc = self._account(account)
        kb = self._tenants[self._target(acc, tenant)]
        vectors = kb.embedder.encode(list(queries))
        hashes = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in queries]
        sel = self.search(vectors, account=account, tenant=tenant, query_hashes=hashes)
        ids = kb.index.ids
        return [
            Retrieval(
                ids=tuple(ids[int(p)] for p in row),
                indices=tuple(int(p) for p in row),
                scores=tuple(float(s) for s in srow),
                event=sel.event,
            )
            for row, srow in zip(sel.indices, sel.noisy_scores)
        ]

    def retrieve(self, query: str, *, account: str, tenant: str | None = None) -> Retrieval:
        """One query's noisy top-K from its account's tenant index."""
        return self.retrieve_batch([query], account=account, tenant=tenant)[0]

    def describe(self) -> dict[str, Any]:
        return {
            "top_k": self.top_k,
            "shared_backend": self.shared_backend,
            "simulation": self.simulation,
            "derived_noise": self.window_seed is not None,
            "tenants": {t: len(kb) for t, kb in sorted(self._tenants.items())},
            "accounts": {
                a.id: {
                    "tenant": a.tenant,
                    "rate_limit": a.policy.rate_limit,
                    "sigma": a.sigma,
                    "score_range": a.policy.score_range,
                    "sensitivity": a.policy.sensitivity,
                }
                for a in sorted(self._accounts.values(), key=lambda x: x.id)
            },
        }


class TenantRAGSystem(RAGSystem):
    """A :class:`RAGSystem` over a :class:`MultiTenantRAG`: retrieve for the account
    (noise before top-K on its tenant's index), then generate from those documents.

    The response's ``privacy`` reports the Gaussian event of the retrieval (ε at the
    account policy's δ); generation is outside the retrieval guarantee (collusion paper
    §7).
    """

    name = "multi-tenant"

    def __init__(
        self, service: MultiTenantRAG, generator: Generator, *, instruction: str | None = None
    ) -> None:
        self.service = service
        self.generator = generator
        self.instruction = instruction

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self.answer_batch([query], account=account)[0]

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        if account is None:
            raise ConfigError("A multi-tenant system needs the querying 'account'.")
        qs = [Query.of(q) for q in queries]
        retrievals = self.service.retrieve_batch([q.search_text for q in qs], account=account)
        kb = self.service.knowledge_base(self.service.tenant_of(account))
        try:
            delta = self.service.policy_of(account).delta
            return _answer_with_retrievals(
                self.generator, self.instruction, qs, retrievals, kb, "gaussian-noisy-topk", delta
            )
        except Exception as exc:  # spend only on success: no answer, no query counted
            self.service.release(account, len(retrievals))
            raise refunded_failure(exc) from None
        except BaseException:
            self.service.release(account, len(retrievals))
            raise

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "service": self.service.describe(),
            "generator": self.generator.name,
        }
