"""Individual (per-document) privacy filters, as MURAG and MURAG-ADA use them.

Feldman & Zrnic 2021 (individual privacy filters): each document z carries its own budget
and is charged only for the mechanisms whose output it can influence; once its budget
cannot pay the next charge it is dropped from the active set, and the whole adaptive
interaction is ε-DP (pure filter, Private-RAG Thm 1–2 via F&Z Cor. 3.3) or (α, B)-RDP (Rényi
filter, F&Z Thm 3.1 / Private-RAG Def. 4) for every document.

Neighbouring relation: add/remove one document. The charge for a document is its
*individual* privacy loss: MURAG charges ε_q to each document that passes the relevance
threshold (Alg. 1 lines 3–5); MURAG-ADA charges ε_thr to documents in released bins and
ε_RAG to the active documents of step 2 (Alg. 2/6).

Budgets live in a :class:`~ragprivacy.dp.budget_store.BudgetStore` (memory or SQLite), so a
charge is atomic and never overspends.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.dp.accounting import DEFAULT_RDP_ORDERS, rdp_curve, rdp_to_epsilon
from ragprivacy.dp.budget_store import BudgetStore, ChargeReceipt, MemoryBudgetStore
from ragprivacy.dp.calibration import check_delta
from ragprivacy.dp.events import (
    ApproxDpEvent,
    DiscreteLaplaceEvent,
    LaplaceEvent,
    PrivacyEvent,
    PureDpEvent,
)
from ragprivacy.errors import ConfigError

__all__ = [
    "PureDpFilter",
    "RenyiFilter",
    "renyi_capacities",
]


def _pure_epsilon(event: PrivacyEvent) -> float:
    eps = 0.0
    for leaf, count in event.flatten():
        if isinstance(leaf, PureDpEvent | LaplaceEvent | DiscreteLaplaceEvent) or (
            isinstance(leaf, ApproxDpEvent) and leaf.delta == 0
        ):
            eps += count * leaf.epsilon
        else:
            raise ConfigError(
                f"A pure-DP filter takes pure-DP events (pure, Laplace, discrete Laplace); got "
                f"{type(leaf).__name__}. Use a RenyiFilter for Gaussian events."
            )
    return eps


class PureDpFilter:
    """Per-document ε budgets (Private-RAG Alg. 1 and 2/6; Feldman & Zrnic 2021).

    Every document starts with ``budget`` (MURAG: M·ε_q, at most the target ε). A
    document is *active* for a charge c if its remaining budget is ≥ c (Alg. 1 line 2).

    >>> f = PureDpFilter(budget=2.0)
    >>> _ = f.charge(["d1", "d2"], 1.0)
    >>> _ = f.charge(["d1"], 1.0)
    >>> f.active(["d1", "d2"], 1.0)
    ['d2']
    """

    def __init__(self, budget: float, store: BudgetStore | None = None) -> None:
        self.budget = check_positive("budget", budget)
        self.store = store if store is not None else MemoryBudgetStore(self.budget)
        if self.store.dims != 1 or not math.isclose(float(self.store.capacity[0]), self.budget):
            raise ConfigError(
                f"The store's capacity {self.store.capacity.tolist()} does not match the "
                f"filter's budget {self.budget}; create the store with capacity=budget."
            )

    @classmethod
    def for_murag(
        cls, epsilon_q: float, max_retrievals: int, store: BudgetStore | None = None
    ) -> PureDpFilter:
        """MURAG's filter: initial budget M·ε_q per document (Private-RAG Alg. 1, Set)."""
        eps_q = check_positive("epsilon_q", epsilon_q)
        m = check_positive_int("max_retrievals", max_retrievals)
        return cls(m * eps_q, store)

    def active(self, doc_ids: Iterable[str], next_charge: float) -> list[str]:
        """Documents whose remaining budget can pay ``next_charge`` (A_t of Alg. 1)."""
        return self.store.active(
            doc_ids, check_positive("next_charge", next_charge, allow_zero=True)
        )

    def charge(
        self, doc_ids: Iterable[str], epsilon: float, *, charge_id: str | None = None
    ) -> ChargeReceipt:
        """Charge ε to every listed document, all or nothing (raises if any cannot pay)."""
        return self.store.charge(
            doc_ids, check_positive("epsilon", epsilon, allow_zero=True), charge_id=charge_id
        )

    def charge_event(
        self, doc_ids: Iterable[str], event: PrivacyEvent, *, charge_id: str | None = None
    ) -> ChargeReceipt:
        """Charge a pure-DP event's ε (basic composition of its leaves)."""
        return self.charge(doc_ids, _pure_epsilon(event), charge_id=charge_id)

    def spent(self, doc_ids: Iterable[str]) -> np.ndarray:
        """ε spent per document (the guarantee each has received so far)."""
        return self.store.spent(doc_ids)[:, 0]

    def remaining(self, doc_ids: Iterable[str]) -> np.ndarray:
        """Budget left per document."""
        return self.store.remaining(doc_ids)[:, 0]


def renyi_capacities(
    epsilon: float, delta: float, orders: Sequence[float] = DEFAULT_RDP_ORDERS
) -> tuple[list[float], list[float]]:
    """Per-order RDP budgets B_α = ε − log(1/δ)/(α − 1) that each imply (ε, δ)-DP.

    Orders whose budget would be ≤ 0 are dropped. Returns (orders, budgets). Conversion
    by Mironov 2017, Prop. 3 (collusion paper App. B, R3).
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_delta("delta", delta)
    kept, caps = [], []
    for a in orders:
        b = epsilon - math.log(1 / delta) / (a - 1)
        if a > 1 and b > 0:
            kept.append(float(a))
            caps.append(b)
    if not kept:
        raise ConfigError(
            f"No Rényi order gives a positive budget for epsilon={epsilon}, delta={delta}; "
            f"use larger orders or a larger epsilon."
        )
    return kept, caps


def _capacity_per_load(
    orders: Sequence[float], caps: Sequence[float], load: PrivacyEvent | None
) -> np.ndarray:
    """How many charges of ``load`` each order could admit, B_α/ρ_load(α).

    Without a load, a Gaussian-shaped curve ρ(α) ∝ α (also the small-ε shape of
    randomized response, i.e. of MURAG's pure charges) is used: B_α/α.
    """
    a = np.asarray(orders, dtype=float)
    rho = a if load is None else rdp_curve(load, orders)
    with np.errstate(divide="ignore"):
        return np.where(rho > 0, np.asarray(caps) / rho, np.inf)


class RenyiFilter:
    """Per-document Rényi budgets at a grid of orders (Feldman & Zrnic 2021, Thm 3.1).

    A document can pay a charge only if, at *every* order α, spent_α + ρ_α ≤ B_α; then
    for every α the interaction is (α, B_α)-individual-RDP for that document (stopping
    early at one order because another is full is itself a valid adaptive choice). Each
    extra order can therefore only stop the filter earlier, never let it run longer: use
    one order, or a few near the best one for the expected load (see :meth:`for_target`,
    which picks them).

    Args:
        orders: Rényi orders α > 1.
        budgets: B_α per order (see :func:`renyi_capacities` for an (ε, δ) target).
        store: a store with ``capacity=budgets`` (default: in memory).
    """

    def __init__(
        self,
        orders: Sequence[float],
        budgets: Sequence[float],
        store: BudgetStore | None = None,
    ) -> None:
        self.orders = [float(a) for a in orders]
        if not self.orders or any(not a > 1 for a in self.orders):
            raise ConfigError(f"Rényi orders must be > 1; got {list(orders)!r}.")
        if len(budgets) != len(self.orders):
            raise ConfigError(
                f"Give one budget per Rényi order; got {len(budgets)} budget(s) for "
                f"{len(self.orders)} order(s)."
            )
        self.budgets = [check_positive("budget", b) for b in budgets]
        self.store = store if store is not None else MemoryBudgetStore(self.budgets)
        if not np.allclose(self.store.capacity, self.budgets):
            raise ConfigError(
                f"The store's capacity {self.store.capacity.tolist()} does not match the "
                f"filter's budgets {self.budgets}."
            )

    @classmethod
    def for_target(
        cls,
        epsilon: float,
        delta: float,
        orders: Sequence[float] | None = None,
        store: BudgetStore | None = None,
        *,
        expected_event: PrivacyEvent | None = None,
        keep_fraction: float = 0.5,
    ) -> RenyiFilter:
        """A filter whose every document ends (ε, δ)-DP, with orders chosen to be useful.

        Budgets are B_α = ε − log(1/δ)/(α − 1) (:func:`renyi_capacities`). Since every
        order must fit, an order with a small B_α blocks all charges (at ε = 2, δ = 1e-6,
        α = 8 has B = 0.026, below one σ = 8 Gaussian charge). So orders are kept only if
        they admit at least ``keep_fraction`` of the charges the best order admits, for
        ``expected_event`` (one typical charge), or for a Gaussian-shaped load when it is
        not given. Dropping orders never weakens the guarantee: each kept order alone
        implies (ε, δ)-DP.

        Args:
            epsilon: target ε per document.
            delta: target δ per document.
            orders: candidate orders (default: ``dp_accounting``'s grid of orders).
            store: a store created with the resulting budgets (``capacity``); see
                :func:`renyi_capacities` and the attribute ``budgets``.
            expected_event: one typical charge, to pick the orders for.
            keep_fraction: in (0, 1]; 1 keeps only the best order(s).
        """
        if not 0 < keep_fraction <= 1:
            raise ConfigError(
                f"The 'keep_fraction' parameter must be in (0, 1]; got {keep_fraction!r}."
            )
        kept, caps = renyi_capacities(
            epsilon, delta, DEFAULT_RDP_ORDERS if orders is None else orders
        )
        fit = _capacity_per_load(kept, caps, expected_event)
        good = fit >= keep_fraction * fit.max()
        chosen = [a for a, g in zip(kept, good) if g]
        budgets = [b for b, g in zip(caps, good) if g]
        if orders is None and len(chosen) > 3:  # a few orders around the best one
            best = int(np.argmax([f for f, g in zip(fit, good) if g]))
            lo = max(0, min(best - 1, len(chosen) - 3))
            chosen, budgets = chosen[lo : lo + 3], budgets[lo : lo + 3]
        return cls(chosen, budgets, store)

    def curve(self, event: PrivacyEvent) -> np.ndarray:
        """The event's Rényi curve at this filter's orders."""
        return rdp_curve(event, self.orders)

    def active(self, doc_ids: Iterable[str], next_event: PrivacyEvent) -> list[str]:
        """Documents that can pay ``next_event`` at every order."""
        return self.store.active(doc_ids, self.curve(next_event))

    def charge(
        self, doc_ids: Iterable[str], event: PrivacyEvent, *, charge_id: str | None = None
    ) -> ChargeReceipt:
        """Charge the event's Rényi curve to every listed document, all or nothing."""
        return self.store.charge(doc_ids, self.curve(event), charge_id=charge_id)

    def epsilon(self, doc_ids: Iterable[str], delta: float) -> np.ndarray:
        """(ε, δ) guarantee each document has received so far (RDP conversion per document)."""
        spent = self.store.spent(doc_ids)
        return np.array([rdp_to_epsilon(self.orders, row, delta) for row in spent])
