"""Multi-tenant private retrieval: tenants with their own indices, accounts with budgets.

Collusion paper §2.1: a service P = (D, Emb, LLM, Policy) holds one index D_t per tenant
t; each account a belongs to one tenant t(a), may send at most r queries per audit window,
and is promised (ε_acc, δ_acc)-DP retrieval over that window. A query q of account a is
scored against D_{t(a)} only, and Gaussian noise is added to *every* score before top-K
selection (eq. 2.1)::

    Retr(q, a) = TopK(clip(Score(q, D_{t(a)})) + N(0, σ²I))

:class:`TenantRetriever` is that router as a :class:`~ragprivacy.retrieval.Retriever`, in
memory, for experiments and for RAG systems built in process: the tenant boundary, and for
each account the policy, counter, σ and noise-then-select of :mod:`ragprivacy.dp.account`
(nothing of its own); a RAG system over it is ``StandardRAG(TenantRetriever(...),
generator)``. Noise is integer-exact discrete Gaussian from fresh OS entropy by default, or
the float fast path with ``simulation=True`` for experiments. It keeps no records: an
*audited* window — noise derived from a committed seed, z_q = DGS(H(s_W ‖ rec_q); σ)
(§5.3), a ledger, receipts — is :class:`ragprivacy.audit.AuditWindow`, the one serving
core the service and the verifier's re-execution run.

The M4 misconfiguration of Remark 2.1 — a shared backend that lets an account's query be
scored against *another* tenant's index — is an explicit switch, ``shared_backend``,
off by default; with it off such a query is refused. It exists to reproduce the
external-collusion experiment (§A.3), never as a deployment option.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragprivacy._random import RngLike
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive_int
from ragprivacy.dp import (
    AccountCounter,
    AccountPolicy,
    ChaCha20Bits,
    GaussianEvent,
    GaussianNoisyTopK,
    Reservation,
    noise_first_min_scored,
    simulation_rng,
)
from ragprivacy.errors import ConfigError, TenantAccessError
from ragprivacy.retrieval.base import Retriever
from ragprivacy.retrieval.knowledge_base import KnowledgeBase
from ragprivacy.types import Retrieval

__all__ = ["TenantAccessError", "TenantRetriever", "TenantSelection"]


@dataclass(frozen=True, slots=True)
class _Account:
    id: str
    tenant: str
    policy: AccountPolicy
    mechanism: GaussianNoisyTopK


@dataclass(frozen=True, slots=True)
class TenantSelection:
    """What a batch of Q queries retrieved: ``indices[q]`` (positions in ``tenant``'s
    index, best first) and, for instrumented evaluation only, the noisy scores of the
    selected positions. ``event`` is the privacy event of *one* query; ``reservation``
    the queries it charged."""

    account: str
    tenant: str
    indices: IntArray
    noisy_scores: FloatArray
    event: GaussianEvent
    reservation: Reservation


class TenantRetriever(Retriever):
    """Tenants with their own :class:`KnowledgeBase`, accounts with rate limits and DP.

    Args:
        k: K of the noisy top-K.
        shared_backend: the M4 misconfiguration (Remark 2.1): when True any account may be
            scored against any tenant's index. Off by default.
        simulation: use the dp layer's float fast path (keyword ``rng``) instead of the
            secure discrete Gaussian; for experiments only.
        noise_first: score only the documents each query's noise leaves in the race
            (:meth:`~ragprivacy.dp.GaussianNoisyTopK.select_noise_first`, through the
            index's ``scores_at``): the same output as scoring every document, and which
            documents are scored depends on the noise alone (so, like the noise, it must
            not be observable next to the output); at least
            ``dp.noise_first_min_scored(k)`` per query, so the count is constant unless
            more are candidates. Used for accounts whose
            policy has a score range; ``False`` scores every document.
        rng: the simulation stream.

    >>> from ragprivacy.corpus import Corpus
    >>> from ragprivacy.types import Document
    >>> docs = [Document(f"d{i}", f"note {i} about topic {i % 3}") for i in range(6)]
    >>> kb = KnowledgeBase.build(Corpus(docs), embedder="hashing")
    >>> router = TenantRetriever(k=2, simulation=True, rng=0)
    >>> router.add_tenant("acme", kb)
    >>> router.add_account("alice", "acme", AccountPolicy(rate_limit=10, epsilon=8.0))
    >>> len(router.retrieve("topic 1", account="alice"))
    2
    """

    name = "tenant"

    def __init__(
        self,
        *,
        k: int = 5,
        shared_backend: bool = False,
        simulation: bool = False,
        noise_first: bool = True,
        rng: RngLike = None,
    ) -> None:
        # No super().__init__: a tenant router has one knowledge base per tenant, not one.
        self.k = check_positive_int("k", k)
        self.shared_backend = bool(shared_backend)
        self.simulation = bool(simulation)
        self.noise_first = bool(noise_first)
        self._rng = simulation_rng(rng, simulation=self.simulation)
        self._tenants: dict[str, KnowledgeBase] = {}
        self._accounts: dict[str, _Account] = {}
        self.counter = AccountCounter()

    @property
    def kb(self) -> KnowledgeBase:
        raise ConfigError(
            "A tenant retriever holds one knowledge base per tenant; use "
            "knowledge_base(tenant) or knowledge_base_for(account)."
        )

    @kb.setter
    def kb(self, value: KnowledgeBase) -> None:
        raise ConfigError("A tenant retriever's knowledge bases are added with add_tenant.")

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
        # The policy and the settings are fixed, so one mechanism serves every query of the
        # account; building it draws nothing from the noise stream.
        mechanism = policy.mechanism(self.k, simulation=self.simulation)
        self._accounts[account_id] = _Account(account_id, tenant_id, policy, mechanism)

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

    def knowledge_base_for(self, account: str | None) -> KnowledgeBase:
        return self._tenants[self._account(account).tenant]

    def delta_for(self, account: str | None) -> float:
        return self._account(account).policy.delta

    def sigma(self, account_id: str) -> float:
        """σ on the scores of this account's queries."""
        return self._account(account_id).mechanism.sigma

    def remaining(self, account_id: str) -> int:
        """Queries this account may still send in the current window."""
        acc = self._account(account_id)
        return self.counter.remaining(acc.id, limit=acc.policy.rate_limit)

    def open_window(self) -> None:
        """Start a new rate window: every account's rate budget resets (M2)."""
        self.counter.open_window()

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

    def search(
        self,
        vectors: FloatArray,
        *,
        account: str,
        tenant: str | None = None,
    ) -> TenantSelection:
        """Noisy top-K for a batch of query embeddings (rows) from one account.

        Checks the tenant boundary and the rate limit first, then charges the whole batch
        (nothing is charged if either check fails, or if the selection fails).
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
        reservation = self.counter.reserve(acc.id, q.shape[0], limit=acc.policy.rate_limit)
        try:
            return self._select(acc, target, q, reservation)
        except BaseException:  # nothing was returned: the queries are given back
            self.counter.release(reservation)
            raise

    def _select(
        self, acc: _Account, target: str, q: FloatArray, reservation: Reservation
    ) -> TenantSelection:
        index = self._tenants[target].index
        mech = acc.mechanism
        rng = self._rng if self.simulation else None
        bits = None if self.simulation else ChaCha20Bits.from_entropy()
        if self.noise_first and mech.score_range is not None:
            sel = mech.select_noise_first(
                (q.shape[0], len(index)),
                lambda r, positions: index.scores_at(q[r], positions),
                score_all=lambda: index.scores(q),
                rng=rng,
                bits=bits,
                min_scored=noise_first_min_scored(self.k),
            )
        else:
            sel = mech.select(index.scores(q), rng=rng, bits=bits)
        return TenantSelection(
            account=acc.id,
            tenant=target,
            indices=np.asarray(sel.indices),
            noisy_scores=np.asarray(sel.noisy_scores),
            event=mech.event,
            reservation=reservation,
        )

    def retrieve_batch(
        self, queries: Sequence[str], *, account: str | None = None, tenant: str | None = None
    ) -> list[Retrieval]:
        """Embed query texts with the target tenant's embedder, then :meth:`search`."""
        if not queries:
            return []
        acc = self._account(account)
        kb = self._tenants[self._target(acc, tenant)]
        vectors = kb.embedder.encode(list(queries))
        sel = self.search(vectors, account=acc.id, tenant=tenant)
        ids = kb.index.ids
        return [
            Retrieval(
                ids=tuple(ids[int(p)] for p in row),
                indices=tuple(int(p) for p in row),
                scores=tuple(float(s) for s in srow),
                event=sel.event,
                charge_ids=(sel.reservation.token,),
            )
            for row, srow in zip(sel.indices, sel.noisy_scores)
        ]

    def retrieve(
        self, query: str, *, account: str | None = None, tenant: str | None = None
    ) -> Retrieval:
        """One query's noisy top-K from its account's tenant index."""
        return self.retrieve_batch([query], account=account, tenant=tenant)[0]

    def release(self, retrievals: Sequence[Retrieval], *, account: str | None = None) -> None:
        """Give the account back the queries of ``retrievals`` (their request failed)."""
        if retrievals:
            acc = self._account(account)
            self.counter.release_tokens(acc.id, len(retrievals), retrievals[0].charge_ids)

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "k": self.k,
            "shared_backend": self.shared_backend,
            "simulation": self.simulation,
            "noise_first": self.noise_first,
            "tenants": {t: len(kb) for t, kb in sorted(self._tenants.items())},
            "accounts": {
                a.id: {
                    "tenant": a.tenant,
                    "rate_limit": a.policy.rate_limit,
                    "sigma": a.mechanism.sigma,
                    "score_range": a.policy.score_range,
                    "sensitivity": a.policy.sensitivity,
                }
                for a in sorted(self._accounts.values(), key=lambda x: x.id)
            },
        }

    def describe(self) -> dict[str, Any]:
        """The router's settings (an alias of :meth:`config`)."""
        return self.config()
