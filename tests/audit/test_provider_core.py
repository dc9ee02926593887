"""The one provider core: per-account policies, the ledger as the counter, several writers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ragprivacy.audit import AuditPolicy, AuditWindow, ProviderKey, Verifier, WitnessStore
from ragprivacy.errors import BudgetExhaustedError, ConfigError

POLICY = AuditPolicy(
    epsilon_acc=1.0,
    delta_acc=1e-6,
    rate_limit=6,
    k_max=2,
    delta_policy=3e-6,
    window_id="W1",
    window_start=0,
    window_end=10**9,
    top_k=3,
)


def _tenants(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for t in ("t0", "t1"):
        v = rng.standard_normal((20, 16))
        out[t] = ([f"{t}-d{i}" for i in range(20)], v / np.linalg.norm(v, axis=1, keepdims=True))
    return out


def _provider(**kw) -> AuditWindow:
    base = dict(
        policy=POLICY,
        tenants=_tenants(),
        accounts={"a": "t0", "b": "t0", "c": "t1"},
        key=ProviderKey.from_seed(bytes(32)),
        seed=bytes(range(32)),
    )
    p = AuditWindow(**{**base, **kw})
    if kw.get("commitments") is None:
        p.commit(published_at=0)
    return p


def _q(i: int) -> np.ndarray:
    v = np.random.default_rng(100 + i).standard_normal(16)
    return v / np.linalg.norm(v)


def test_account_policies_lower_the_window_budget_and_are_checked() -> None:
    p = _provider(account_policies={"a": {"epsilon_acc": 0.5, "rate_limit": 3, "top_k": 2}})
    assert p.policy_of("a").rate_limit == 3 and p.policy_of("b").rate_limit == 6
    # half the ε over half the queries: more noise per query than the window's accounts
    assert p.policy_of("a").noise_sigma > 1.3 * p.policy_of("b").noise_sigma
    answers = [p.query("a", vector=_q(i), ts=1 + i) for i in range(3)]
    assert all(len(x.positions) == 2 for x in answers)
    with pytest.raises(BudgetExhaustedError):
        p.query("a", vector=_q(9), ts=50)
    p.query("b", vector=_q(3), ts=60)
    t = p.transcript()
    assert (
        t.commitments.account_policies[p.account_id("a")]["sigma"] == p.policy_of("a").noise_sigma
    )
    v = Verifier().verify(t, [x.receipt for x in answers], p.auditor_package())
    assert v.passed and v.epsilon_audit == pytest.approx(np.sqrt(2))  # from the window's ε
    with pytest.raises(ConfigError, match="may not exceed"):
        POLICY.for_account({"epsilon_acc": 2.0})
    with pytest.raises(ConfigError, match="may set"):
        POLICY.for_account({"k_max": 9})
    # the inverse: only what differs is committed, and it is checked the same way
    assert POLICY.overrides_for(epsilon_acc=POLICY.epsilon_acc, rate_limit=3) == {"rate_limit": 3}
    assert POLICY.overrides_for(rate_limit=POLICY.rate_limit) == {}
    with pytest.raises(ConfigError, match="may not exceed"):
        POLICY.overrides_for(rate_limit=POLICY.rate_limit + 1)
    with pytest.raises(ConfigError, match="may set"):
        POLICY.overrides_for(k_max=POLICY.k_max)


def test_a_per_account_sigma_below_calibration_fails() -> None:
    p = _provider(account_policies={"a": {"rate_limit": 3}})
    p.query("a", vector=_q(0), ts=1)
    t = p.transcript()
    com = t.commitments
    cheat = replace(com, account_policies={"a": {"rate_limit": 3, "sigma": 1e-3}})
    cheat = replace(cheat, signature=p.key.sign(cheat.message()))
    v = Verifier().verify(replace(t, commitments=cheat), [], p.auditor_package())
    assert v.failed_check == "commitment_integrity"
    assert any("account 'a'" in f.detail and "below the σ" in f.detail for f in v.failures)
    over = replace(com, account_policies={"a": {"rate_limit": 60}})
    over = replace(over, signature=p.key.sign(over.message()))
    v = Verifier().verify(replace(t, commitments=over), [], p.auditor_package())
    assert any("may not exceed" in f.detail for f in v.failures)


def test_two_writers_on_one_ledger_keep_one_count_per_account(tmp_path) -> None:
    """Two providers over one ledger file and one witness store (two service workers):
    the ledger is the counter, so together they serve an account exactly r queries, with
    query numbers 1..r in ledger order, and the window verifies."""
    store = WitnessStore()
    first = _provider(ledger_path=tmp_path / "ledger.sqlite", witness_store=store)
    second = _provider(
        ledger_path=tmp_path / "ledger.sqlite",
        witness_store=store,
        commitments=first.transcript().commitments,
    )
    served, refused = [], 0
    for i in range(10):
        worker = first if i % 2 else second
        try:
            served.append(worker.query("a", vector=_q(i), ts=i + 1))
        except BudgetExhaustedError:
            refused += 1
    assert len(served) == 6 and refused == 4
    assert [x.receipt.position for x in served] == list(range(6))
    assert first.used("a") == second.used("a") == 6
    t = second.transcript()
    v = Verifier().verify(t, [x.receipt for x in served], second.auditor_package())
    assert v.passed, v.failures[:3]
