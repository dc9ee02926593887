"""Measured ε against a running service: the canary game over HTTP.

The game is :mod:`ragprivacy.eval.measured_epsilon`'s, played through the service as an
outside attacker would play it:

* :func:`setup_canary_audit` (an admin step, before a window opens) copies a tenant into
  two: ``<tenant>-canary-in`` holds its documents and a canary (a random name and
  access code, :func:`~ragprivacy.corpus.make_canary`), ``<tenant>-canary-out`` the same
  documents and a filler under the canary's id — replace-one neighbours, embedded by the
  state's one embedder. Each gets ``accounts`` fresh accounts with the policy given and a
  key each. The plan (the canary, the tenants and the keys) is written with mode 0600:
  it holds keys. The two tenants copy the tenant's documents and their accounts are in
  every window's commitments (their δ in its δ_policy): delete both tenants
  (``tenant delete NAME --yes``) once the plan has been played.
* Once a window committed them, :func:`run_canary_audit` has every account spend its
  whole rate limit on ``POST /v1/retrieve`` of the canary's question, and scores it by how
  many of its retrievals returned the canary's id; the claim is the account's
  (ε_acc, δ_acc) as ``GET /v1/budget`` states it; :func:`ragprivacy.dp.threshold_epsilon`
  gives the bound.

Each trial is an account, so the bound is as strong as the accounts an auditor can
create: a few dozen show a leak as blatant as plain top-K, not a σ that is slightly
wrong (the in-process audit draws 10⁵ accounts for that).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from ragprivacy._validation import check_positive_int
from ragprivacy.corpus import make_canary
from ragprivacy.dp import MeasuredEpsilon, threshold_epsilon
from ragprivacy.errors import ConfigError
from ragprivacy.service.state import ServiceState
from ragprivacy.types import Document

__all__ = ["run_canary_audit", "setup_canary_audit"]

_SIDES = ("in", "out")


def setup_canary_audit(
    state: ServiceState,
    tenant: str,
    out: Path,
    *,
    accounts: int = 30,
    epsilon: float = 1.0,
    delta: float = 1e-6,
    rate_limit: int = 2,
    seed: int = 0,
) -> dict[str, Any]:
    """Create the two neighbouring tenants of ``tenant`` with ``accounts`` accounts each
    (module docstring), and write the plan to the new file ``out`` (mode 0600)."""
    accounts = check_positive_int("accounts", accounts)
    if accounts < 2:
        raise ConfigError(
            "The audit needs at least 2 accounts a side (half choose the threshold, half "
            "measure it); give --accounts 10 or more for a bound worth reading."
        )
    known = state.tenants()
    if tenant not in known:
        raise ConfigError(f"Unknown tenant {tenant!r}; name one 'tenant list' shows.")
    info = known[tenant]
    if info["mode"] != "noisy_topk":
        raise ConfigError(
            f"Tenant {tenant!r} answers by voting ({info['mode']}); the canary audit over "
            "HTTP measures a noisy_topk tenant's retrievals."
        )
    ids, texts = state.texts(tenant)
    canary = make_canary(seed)
    if canary.id in ids:
        raise ConfigError(f"Tenant {tenant!r} already holds a document {canary.id!r}.")
    plan: dict[str, Any] = {
        "canary": {"id": canary.id, "query": canary.query},
        "source": tenant,
        "sides": {},
    }
    # the plan file first (it holds the keys, shown nowhere else): a path that cannot be
    # written refuses the setup before anything is created
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"The plan file {out} exists; name a new one.") from None
    except OSError as exc:
        raise ConfigError(f"Cannot write the plan file {out}: {exc.strerror}.") from None
    created: list[str] = []
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for side, text in zip(_SIDES, (canary.text, canary.filler)):
                name = f"{tenant}-canary-{side}"
                state.create_tenant(name, mode="noisy_topk", k=int(info["k"]))
                created.append(name)
                docs = [Document(i, t) for i, t in zip(ids, texts)]
                state.add_documents(name, [*docs, Document(canary.id, text)])
                keys = []
                for a in range(accounts):
                    account = f"{name}-{a}"
                    state.create_account(
                        name, account, epsilon=epsilon, delta=delta, rate_limit=rate_limit
                    )
                    keys.append(state.create_key(account).token)
                plan["sides"][side] = {"tenant": name, "keys": keys}
            json.dump(plan, f, indent=1)
    except BaseException:
        out.unlink(missing_ok=True)
        for name in created:  # nothing of a half-made audit stays
            state.delete_tenant(name)
        raise
    return plan


def run_canary_audit(
    url: str,
    plan: dict[str, Any],
    *,
    alpha: float = 0.05,
    client: httpx.Client | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> MeasuredEpsilon:
    """Play the plan against the service at ``url`` (module docstring): every account's
    retrievals of the canary, scored by how many returned it; the bound beside the
    claim the service states. ``progress(done, total)`` follows the accounts."""
    try:
        canary_id, query = plan["canary"]["id"], plan["canary"]["query"]
        sides = [plan["sides"][s]["keys"] for s in _SIDES]
    except (KeyError, TypeError):
        raise ConfigError(
            "The plan is not one 'ragprivacy admin canary' wrote (it needs the canary and "
            "both sides' keys)."
        ) from None
    http = client or httpx.Client(base_url=url.rstrip("/"), timeout=60)
    total = sum(len(keys) for keys in sides)
    done, queries = 0, 0
    claim = (0.0, 0.0)
    scores: list[list[float]] = []
    try:
        for keys in sides:
            got = []
            for key in keys:
                auth = {"Authorization": f"Bearer {key}"}
                budget = _json(http.get("/v1/budget", headers=auth), "GET /v1/budget")
                claim = max(claim, (float(budget["epsilon_acc"]), float(budget["delta_acc"])))
                if int(budget["remaining"]) == 0:  # scored on nothing: not a trial
                    raise ConfigError(
                        "An account of the plan has no queries left in the open window: "
                        "a plan is played once per window (or set up a new one)."
                    )
                hits = 0
                for _ in range(int(budget["remaining"])):
                    r = _json(
                        http.post("/v1/retrieve", json={"query": query}, headers=auth),
                        "POST /v1/retrieve",
                    )
                    hits += any(d["id"] == canary_id for d in r["documents"])
                queries = max(queries, int(budget["remaining"]))
                got.append(float(hits))
                done += 1
                if progress is not None:
                    progress(done, total)
            scores.append(got)
    finally:
        if client is None:
            http.close()
    return MeasuredEpsilon(
        system=f"service tenant {plan.get('source', '?')} (noisy_topk)",
        release="retrieved ids",
        claimed_epsilon=claim[0],
        claimed_delta=claim[1],
        bound=threshold_epsilon(scores[0], scores[1], delta=claim[1], alpha=alpha),
        trials=min(len(s) for s in scores),
        queries=queries,
        alpha=alpha,
    )


def _json(resp: httpx.Response, what: str) -> dict[str, Any]:
    if resp.status_code != 200:
        raise ConfigError(
            f"{what} answered HTTP {resp.status_code}: {resp.text[:200]}. Open a window after "
            "'admin canary' (its accounts query from the next window), and run the plan once."
        )
    data = resp.json()
    if not isinstance(data, dict):
        raise ConfigError(f"{what} answered with JSON that is not an object.")
    return data
