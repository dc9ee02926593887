"""Audited windows whose noise is derived lazily (``AuditPolicy.noise = "lazy"``).

Tenants of 8,000 documents are large enough for :func:`ragprivacy.dp.lazy_suits` at the
demo's calibration, so every record's z_q is the lazy derivation: the honest window
PASSes with the same ε_audit, each per-record cheat still FAILs at the claim it breaks,
and a window committed before the lazy derivation (no ``noise`` in C_policy) still
verifies with the full one.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from ragprivacy.audit import AuditPolicy, QueryNoise, Verifier
from ragprivacy.audit.demo import demo_window
from ragprivacy.dp import query_input

DOCS = 8000


def _verify(w):  # type: ignore[no-untyped-def]
    return Verifier().verify(w.transcript, w.receipts, w.package)


@pytest.fixture(scope="module")
def lazy():  # type: ignore[no-untyped-def]
    return demo_window(seed=5, docs=DOCS, dim=16)


def test_an_honest_lazy_window_passes_and_its_noise_is_the_lazy_derivation(lazy) -> None:
    v = _verify(lazy)
    assert v.passed and v.epsilon_audit == pytest.approx(2.0)
    policy = lazy.provider.policy
    assert policy.noise == "lazy" and policy.to_dict()["noise"] == "lazy"
    mech = policy.mechanism()
    noise = QueryNoise(bytes(32), ("W", "a", "t", "q", 1), mech, DOCS, "lazy")
    full = QueryNoise(bytes(32), ("W", "a", "t", "q", 1), mech, DOCS, "full")
    assert noise.lazy and not full.lazy and noise.digest != full.digest


def test_the_derivation_is_bound_by_c_policy(lazy) -> None:
    """A provider that re-commits its lazily served window as the full derivation (and
    re-signs) fails A2 on every record: the witnesses commit another first draw."""
    com = lazy.transcript.commitments
    policy = {k: v for k, v in com.policy.items() if k != "noise"}
    changed = replace(com, policy=policy, c_policy=AuditPolicy.from_dict(policy).commitment().hex())
    key = lazy.provider.key
    changed = replace(changed, signature=key.sign(changed.message()))
    head = replace(lazy.transcript.tree_head, commitments=changed.digest())
    head = replace(head, signature=key.sign(head.message()))
    forged = replace(lazy.transcript, commitments=changed, tree_head=head)
    v = Verifier().verify(forged, [], lazy.package)
    assert not v.passed
    a2 = [f for f in v.failures if "claim A2" in f.detail]
    assert len(a2) == len(lazy.transcript.records), v.failures[:3]


def test_the_lazy_selection_is_the_full_rule_on_its_own_noise() -> None:
    """Filling the lazy draw gives every slot's noise; the full rule over it (every slot
    scored, select_units) picks the positions the lazy selection picked."""
    policy = AuditPolicy(
        epsilon_acc=1.0, delta_acc=1e-6, rate_limit=6, k_max=4, delta_policy=5e-6,
        window_id="w", window_start=0, window_end=10,
    )  # fmt: skip
    mech = policy.mechanism()
    rng = np.random.default_rng(1)
    lo, hi = mech.bounds_units()  # type: ignore[misc]
    for r in range(20):
        scores = rng.integers(lo - 50, hi + 50, DOCS)  # clipped at both ends
        scores[:40] = hi  # ties at the top
        rec = query_input("w", "a", "t", f"q{r}", 1)
        noise = QueryNoise(bytes(32), rec, mech, DOCS, "lazy")
        asked: list[int] = []
        picked = noise.select(lambda p, a=asked, s=scores: a.append(len(p)) or s[p])
        assert noise.lazy and sum(asked) < DOCS // 10
        digest = noise.digest
        assert tuple(mech.select_units(scores, noise.dense()).tolist()) == tuple(picked.tolist())
        assert noise.digest == digest  # the commitment is the first draw's


@pytest.mark.parametrize(
    ("case", "words"),
    [
        ("wrong-seed", "claim A2"),
        ("select-before-noise", "claim A3"),
        ("cross-tenant", "claim A4"),
    ],
)
def test_each_per_record_cheat_fails_at_its_claim_under_lazy_noise(case: str, words: str) -> None:
    v = _verify(demo_window(tamper=case, seed=5, docs=DOCS, dim=16))
    assert not v.passed and v.failed_check == "per_record"
    assert any(words in f.detail for f in v.failures), v.failures[:3]


def test_a_window_committed_before_the_lazy_derivation_still_verifies() -> None:
    """C_policy without a ``noise`` field is the full derivation's: the records verify
    with it; the same records read as lazily derived fail A2."""
    old = demo_window(seed=6, docs=DOCS, dim=16, noise="full")
    assert "noise" not in old.provider.policy.to_dict()
    assert AuditPolicy.from_dict(old.transcript.commitments.policy).noise == "full"
    assert _verify(old).passed
