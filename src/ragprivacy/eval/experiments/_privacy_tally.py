"""The privacy an attacker's accounts spent, tallied from the full responses.

:class:`PrivacyTally` reads every full response (the attack never sees it), from the one
typed event each answer carries (``Response.privacy.event``): Gaussian leaves (noisy
top-K, DP-RP-G, private kNN-LM) compose exactly in Gaussian DP (μ² add up; ε at the
experiment's δ), pure-DP leaves (DP voting) add up, other leaves compose by Rényi DP, and
per-document filter charges (MURAG) count per document, so the ε of a filtered system is
the largest spend of any document; an answer without a guarantee (``NonPrivateEvent``:
plain top-K, projection, plain kNN-LM) makes the account's ε infinite, and a system that
uses no data (``non-rag``) spends 0. A refused query is counted and spends nothing.

Per account it gives ε and, where the composition is a pure or a Gaussian one, the
largest AUC any membership test could reach (e^ε/(1+e^ε), Φ(μ/√2)). That bound needs the
guarantee to cover the whole answer (``PrivacyCost.scope == "answer"``): where some
answer's ε covers only which documents were retrieved (``scope == "retrieval"``: a
private retriever under RAG or kNN-LM, whose generator then reads the retrieved text), the
account's ``scope`` is ``"retrieval"`` and no AUC bound is given (``auc_bound`` is None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ragprivacy.dp import (
    GaussianEvent,
    PureDpEvent,
    SelfComposedEvent,
    compose,
    epsilon_for,
    gaussian_epsilon,
    max_auc_gdp,
    max_auc_pure_dp,
)
from ragprivacy.errors import ConfigError
from ragprivacy.types import Response

__all__ = ["PrivacyTally"]


@dataclass(slots=True)
class _Account:
    queries: int = 0
    refused: int = 0
    mu_sq: float = 0.0
    pure: float = 0.0
    others: list[Any] = field(default_factory=list)
    per_document: dict[str, float] = field(default_factory=dict)
    unprotected: bool = False
    retrieval_only: bool = False  # some answer's guarantee covered only its retrieval


class PrivacyTally:
    """The privacy each account spent, read from full responses (see the module docstring).

    Args:
        delta: δ at which Gaussian (and other non-pure) compositions are reported.
    """

    def __init__(self, delta: float = 1e-6) -> None:
        if not 0 < delta < 1:
            raise ConfigError(f"The 'delta' parameter must be in (0, 1); got {delta!r}.")
        self.delta = float(delta)
        self.accounts: dict[str, _Account] = {}

    def record(self, account: str, response: Response, *, refused: bool = False) -> None:
        a = self.accounts.setdefault(account, _Account())
        a.queries += 1
        if refused:
            a.refused += 1
            return
        cost = response.privacy
        a.retrieval_only |= cost.scope == "retrieval"
        if not cost.guaranteed:
            a.unprotected = True  # the documents reached the generator unprotected
            return
        if cost.per_document:  # a filtered system: the filters are the whole guarantee
            for doc, eps in cost.per_document.items():
                a.per_document[doc] = a.per_document.get(doc, 0.0) + float(eps)
            return
        for leaf, count in cost.event.flatten():  # the answer's one typed event
            if isinstance(leaf, GaussianEvent):
                a.mu_sq += count * leaf.mu**2
            elif isinstance(leaf, PureDpEvent):
                a.pure += count * leaf.epsilon
            else:
                a.others.append(leaf if count == 1 else SelfComposedEvent(leaf, count))

    def account_summary(self, account: str) -> dict[str, Any]:
        """ε (at the tally's δ), μ, the AUC bound of one account (None where no bound
        follows: a mixed composition, or an ε that covers only the retrieval) and the
        scope of its guarantee."""
        a = self.accounts.get(account, _Account())
        eps_gauss = gaussian_epsilon(math.sqrt(a.mu_sq), self.delta) if a.mu_sq > 0 else 0.0
        eps_other = epsilon_for(compose(a.others), self.delta, "rdp") if a.others else 0.0
        eps_doc = max(a.per_document.values()) if a.per_document else 0.0
        parts = {
            "gaussian": eps_gauss,
            "pure": a.pure + eps_doc,
            "other": eps_other,
        }
        epsilon = sum(parts.values())
        bound: float | None = None
        if a.unprotected:
            epsilon, bound = math.inf, 1.0
        elif a.retrieval_only:
            pass  # ε covers which documents were retrieved, not the text generated from them
        elif parts["other"] == 0 and parts["pure"] == 0:
            bound = max_auc_gdp(math.sqrt(a.mu_sq)) if a.mu_sq > 0 else 0.5
        elif parts["other"] == 0 and parts["gaussian"] == 0:
            bound = max_auc_pure_dp(parts["pure"])
        delta = self.delta if (a.mu_sq > 0 or a.others) else 0.0
        return {
            "epsilon": epsilon,
            "delta": delta,
            "mu": math.sqrt(a.mu_sq) if a.mu_sq > 0 else None,
            "auc_bound": bound,
            "queries": a.queries,
            "refused": a.refused,
            "scope": "retrieval" if a.retrieval_only else "answer",
        }

    def summary(self) -> dict[str, Any]:
        """Over accounts: the largest ε (and its δ and AUC bound), the mean ε, queries and
        refusals in all, and the scope (``"retrieval"`` if any account's ε covers only the
        retrieval)."""
        rows = [self.account_summary(k) for k in self.accounts]
        if not rows:
            return {"accounts": 0, "epsilon": 0.0, "queries": 0, "refused": 0}
        worst = max(rows, key=lambda r: r["epsilon"])
        bounds = [r["auc_bound"] for r in rows]
        return {
            "accounts": len(rows),
            "epsilon": worst["epsilon"],
            "epsilon_mean": float(sum(r["epsilon"] for r in rows) / len(rows)),
            "delta": worst["delta"],
            "mu": worst["mu"],
            "auc_bound": None if any(b is None for b in bounds) else max(bounds),  # type: ignore[type-var]
            "queries": sum(r["queries"] for r in rows),
            "refused": sum(r["refused"] for r in rows),
            "scope": "retrieval" if any(r["scope"] == "retrieval" for r in rows) else "answer",
        }
