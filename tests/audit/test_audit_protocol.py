"""Phases A–D end to end, and one test per tampering case of the worked example."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ragprivacy.audit import (
    AuditPolicy,
    AuditWindow,
    QueryRecord,
    TenantCommitment,
    Verifier,
    derived_noise,
    load_window,
    render_report,
    sample_size,
    save_window,
)
from ragprivacy.audit.cheats import CheatingWindow, Misbehaviour, tamper_ledger_file
from ragprivacy.audit.commitments import index_salt_key, seed_commitment, verify_opening
from ragprivacy.audit.demo import demo_window
from ragprivacy.audit.noise import integer_scores
from ragprivacy.dp import GaussianNoisyTopK, Grid, derived_bits, top_k_indices
from ragprivacy.errors import BudgetExhaustedError, ConfigError


@pytest.fixture(scope="module")
def honest():
    return demo_window(seed=1)


def _verify(w, **kw):
    return Verifier(**kw).verify(w.transcript, w.receipts, w.package)


def test_honest_window_passes_with_eq_5_2(honest) -> None:
    v = _verify(honest)
    assert v.passed and v.failed_check is None
    # k_max = 4, eps_acc = 1, delta_comp = delta_acc: eps_audit = sqrt(4) * 1 = 2
    assert v.epsilon_audit == pytest.approx(2.0)
    assert v.audit["eps_audit_exact"] < v.audit["eps_audit_bound"]
    assert v.records == v.records_checked == len(honest.transcript.records)
    md = render_report(
        v.to_dict(), honest.transcript.commitments.to_dict(), honest.transcript.coalition.to_dict()
    )
    assert "PASS" in md and "zero-knowledge" in md and "| noise | lazy |" in md


def test_sampled_mode_size_and_guarantee(honest) -> None:
    assert sample_size(0.01, 2**-20) == 1387  # the paper's s ≈ 1,400
    v = _verify(honest, mode="sampled", beta=0.2, eta=0.01, rng=0)
    assert v.passed and v.records_checked == sample_size(0.2, 0.01) == 24
    assert v.detection_probability == pytest.approx(1 - 0.8**24)


def test_changed_record_in_place_fails_ledger_integrity(honest, tmp_path) -> None:
    save_window(tmp_path, honest.transcript, honest.receipts, honest.package)
    t, r, p = load_window(tmp_path)
    assert Verifier().verify(t, r, p).passed  # the round trip keeps it valid
    tamper_ledger_file(tmp_path, 7)
    v = Verifier().verify(*load_window(tmp_path))
    assert not v.passed and v.failed_check == "ledger_integrity"


@pytest.mark.parametrize(
    ("case", "check", "claim"),
    [
        ("changed-record", "receipt_consistency", "append-only"),
        ("dropped-record", "account_policy", "is missing before it"),
        ("wrong-seed", "per_record", "claim A2"),
        ("select-before-noise", "per_record", "claim A3"),
        ("cross-tenant", "per_record", "claim A4"),
        ("coalition", "policy_cap", "exceeds k_max"),
    ],
)
def test_each_tampering_case_fails_with_its_reason(case: str, check: str, claim: str) -> None:
    v = _verify(demo_window(tamper=case, seed=1))
    assert not v.passed and v.epsilon_audit is None
    assert v.failed_check == check
    assert any(claim in f.detail for f in v.failures if f.check == check)


def test_forged_coalition_claim_and_foreign_key_fail(honest) -> None:
    from dataclasses import replace

    t = honest.transcript
    forged = replace(t.coalition, size=1)
    v = Verifier().verify(replace(t, coalition=forged), honest.receipts, honest.package)
    assert v.failed_check == "policy_cap"
    from ragprivacy.audit import ProviderKey

    v = Verifier(provider_key=ProviderKey.generate().public_hex).verify(
        t, honest.receipts, honest.package
    )
    assert v.failed_check == "commitment_integrity"


def _mech(sigma: float, k: int) -> GaussianNoisyTopK:
    return GaussianNoisyTopK(sigma=sigma, k=k, grid=Grid(20), score_range=(-1.0, 1.0))


def test_derived_noise_is_bound_to_the_record_and_noised_before_selection() -> None:
    seed = bytes(range(32))
    rec = ("acct", "tenant", "ab" * 32, 17)
    mech = _mech(0.05, 5)
    z1 = derived_noise(seed, rec, mech, 50)
    assert np.array_equal(z1, derived_noise(seed, rec, mech, 50))
    assert not np.array_equal(z1, derived_noise(seed, (*rec[:3], 18), mech, 50))
    scores = np.arange(50, dtype=np.int64) * 10  # inside [-1, 1]: clipping changes nothing
    assert np.array_equal(mech.select_units(scores, z1), top_k_indices(scores + z1, 5))


def test_one_rule_with_scores_outside_the_range_agrees_with_the_dp_mechanism() -> None:
    # Fixed-point scores can leave [-1, 1] (rounding, or a committed vector that is not unit
    # norm). The audit's rule is the account mechanism's integer rule; its float interface
    # selects the same on the same derived bits.
    seed = bytes(range(32))
    one = 1 << 20
    scores = np.array([3 * one // 2, one + one // 5, one, -(4 * one) // 3, one // 4] * 4)
    grid = Grid(20)
    mech = _mech(0.05, 3)
    differs = 0
    for ts in range(40):
        rec = ("acct", "tenant", "ab" * 32, ts)
        z = derived_noise(seed, rec, mech, scores.size)
        mine = mech.select_units(scores, z)
        dp = mech.select(grid.from_units(scores), bits=derived_bits(seed, rec)).indices
        assert np.array_equal(mine, dp)
        differs += not np.array_equal(mine, top_k_indices(scores + z, 3))
    assert differs > 0  # unclipped selection is a different rule


def _outside_range_window(**misbehaviour):
    # doc-0 = q (score 1.0), doc-1 = 1.5 q (score 1.5): clipped, both score 1.0 and the
    # noise decides between them; unclipped, doc-1 always wins.
    rng = np.random.default_rng(5)
    q = rng.standard_normal(16)
    q /= np.linalg.norm(q)
    rest = rng.standard_normal((6, 16))
    rest /= 4 * np.linalg.norm(rest, axis=1, keepdims=True)
    vectors = np.vstack([q, 1.5 * q, rest])
    policy = AuditPolicy(  # a budget so large that eq. (3.4) gives σ ≈ 0.004
        epsilon_acc=1e5,
        delta_acc=1e-6,
        rate_limit=12,
        k_max=2,
        delta_policy=3e-6,
        window_id="w",
        window_start=0,
        window_end=100,
        top_k=1,
    )
    provider = CheatingWindow(
        policy=policy,
        tenants={"t": ([f"d{i}" for i in range(8)], vectors)},
        accounts={"a": "t"},
        seed=bytes(range(1, 33)),
        misbehaviour=Misbehaviour(**misbehaviour),
    )
    provider.commit(published_at=0)
    answers = [provider.query("a", vector=q, ts=1 + i) for i in range(12)]
    return provider, answers


def test_provider_reexecution_and_verifier_agree_on_scores_outside_the_range() -> None:
    provider, answers = _outside_range_window()
    assert {a.positions[0] for a in answers} == {0, 1}  # the tie is broken by the noise
    pkg = provider.auditor_package()
    mech = provider.policy.mechanism()
    for i, a in enumerate(answers):  # the provider ran the account's rule
        rec = QueryRecord.from_bytes(provider.transcript().records[i]).rec(
            "w", pkg.witnesses[i].query_hash()
        )
        s = integer_scores(
            pkg.tenant_fixed[provider.tenant_id("t")], pkg.witnesses[i].query_vector(), 20
        )
        z = derived_noise(pkg.seed, rec, mech, s.size)
        assert tuple(mech.select_units(s, z)) == a.positions
    v = Verifier().verify(
        provider.transcript(), [a.receipt for a in answers], provider.auditor_package()
    )
    assert v.passed, v.failures
    bad, bad_answers = _outside_range_window(skip_clipping=True)
    assert {a.positions[0] for a in bad_answers} == {1}
    v = Verifier().verify(bad.transcript(), [a.receipt for a in bad_answers], bad.auditor_package())
    assert not v.passed and v.failed_check == "per_record"
    assert any("claim A3" in f.detail for f in v.failures)


def test_policy_states_its_sensitivity() -> None:
    kw = {
        "epsilon_acc": 1.0,
        "delta_acc": 1e-6,
        "rate_limit": 10_000,
        "k_max": 2,
        "delta_policy": 3e-6,
        "window_id": "w",
        "window_start": 0,
        "window_end": 1,
    }
    cosine = AuditPolicy(**kw)
    paper = AuditPolicy(**kw, score_range=(0.0, 1.0))
    assert cosine.sensitivity == 2.0 and paper.sensitivity == 1.0
    assert paper.noise_sigma == pytest.approx(3584.4, abs=0.1)  # eq. 3.4 as printed
    assert cosine.noise_sigma == pytest.approx(2 * paper.noise_sigma)
    assert cosine.commitment() != paper.commitment()  # the range is bound by C_policy
    assert AuditPolicy.from_dict(cosine.to_dict()).commitment() == cosine.commitment()
    assert paper.mechanism().bounds_units() == (0, 1 << 20)  # on the committed grid
    with pytest.raises(ConfigError, match="score_range"):
        AuditPolicy(**kw, score_range=(1.0, 0.0))


def test_commitments_and_openings() -> None:
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((9, 8))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = [f"d{i}" for i in range(9)]
    texts = [hashlib.sha256(f"text {i}".encode()).hexdigest() for i in range(9)]
    key = index_salt_key(bytes(range(32)))
    c = TenantCommitment("t", vecs, ids, salt_key=key, contents=texts)
    vb, proof, salt = c.opening(4)
    assert verify_opening(c.root, c.size, 4, vb, proof, salt=salt, doc_id="d4", content=texts[4])
    assert not verify_opening(
        c.root, c.size, 5, vb, proof, salt=salt, doc_id="d4", content=texts[4]
    )
    # the id and the text are committed with the embedding, under the leaf's salt
    assert not verify_opening(
        c.root, c.size, 4, vb, proof, salt=salt, doc_id="d5", content=texts[4]
    )
    assert not verify_opening(
        c.root, c.size, 4, vb, proof, salt=salt, doc_id="d4", content=texts[5]
    )
    assert not verify_opening(
        c.root, c.size, 4, vb, proof, salt=bytes(32), doc_id="d4", content=texts[4]
    )
    other = TenantCommitment("u", vecs[::-1], ids, salt_key=key, contents=texts)
    assert not verify_opening(
        other.root, other.size, 4, vb, proof, salt=salt, doc_id="d4", content=texts[4]
    )
    # the same documents under another window's seed: another root (salted leaves)
    resalted = TenantCommitment("t", vecs, ids, salt_key=index_salt_key(bytes(32)), contents=texts)
    assert resalted.root != c.root
    q = c.fixed[4]
    assert integer_scores(c.fixed, q, 20).argmax() == 4
    with pytest.raises(ConfigError):
        seed_commitment(b"too short")
    with pytest.raises(ConfigError, match="delta_policy must exceed"):
        AuditPolicy(
            epsilon_acc=1,
            delta_acc=1e-6,
            rate_limit=10,
            k_max=10,
            delta_policy=1e-5,
            window_id="w",
            window_start=0,
            window_end=1,
        )


def test_rate_limit_and_window_are_enforced(honest) -> None:
    p = honest.provider
    with pytest.raises(BudgetExhaustedError):
        p.query("tenant-0/acct-0", vector=np.ones(32), ts=5_000)
    with pytest.raises(ConfigError):
        p.query("tenant-1/acct-0", vector=np.ones(32), ts=10**9)


def test_a_failed_query_spends_nothing_and_appends_nothing() -> None:
    provider, answers = _outside_range_window()  # r = 12, all 12 used
    fresh = AuditWindow(
        policy=provider.policy,
        tenants={"t": ([f"d{i}" for i in range(8)], np.eye(8, 16))},
        accounts={"a": "t"},
        seed=bytes(range(1, 33)),
    )
    fresh.commit(published_at=0)
    for _ in range(20):  # a text query without an embedder fails after the rate check
        with pytest.raises(ConfigError, match="embedder"):
            fresh.query("a", "what is d3?", ts=1)
    assert fresh.ledger.size == 0
    q = np.eye(8, 16)[3]
    got = [fresh.query("a", vector=q, ts=2 + i) for i in range(12)]  # all 12 still there
    assert len(got) == 12 and fresh.ledger.size == 12
    with pytest.raises(BudgetExhaustedError):
        fresh.query("a", vector=q, ts=50)
    assert fresh.ledger.size == 12 and len(answers) == 12


def test_integer_scores_are_exact_at_the_extremes() -> None:
    """The float64 product is exact: compare with int64 arithmetic on the largest
    fixed-point values (|v_i| = 4 at 2^-15) and random ones, at several grids."""
    rng = np.random.default_rng(0)
    vectors = rng.integers(-(2**17), 2**17 + 1, (500, 384)).astype("<i4")
    vectors[0] = 2**17
    query = np.full(384, 2**17, dtype="<i4")
    exact = vectors.astype(np.int64) @ query.astype(np.int64)
    for bits in (8, 20, 30):
        shift = 30 - bits
        want = exact if shift == 0 else (exact + (1 << (shift - 1))) >> shift
        np.testing.assert_array_equal(integer_scores(vectors, query, bits), want)
