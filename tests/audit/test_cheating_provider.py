"""A provider that controls its own keys, seed and ledger tries to PASS while cheating.

Each cheat is built the way such a provider would build it: it runs its own provider code
(a subclass of the honest window, ``ragprivacy.audit.cheats.CheatingWindow``), rewrites
what it publishes and re-signs it with its own key. The verifier is never touched. Every
cheat must FAIL at the check that names the violated assumption, through the library and
through ``ragprivacy audit verify``; the honest window still PASSes with the same ε_audit.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from ragprivacy.audit import (
    AuditPolicy,
    AuditWindow,
    ProviderKey,
    PublicTranscript,
    QueryRecord,
    Verifier,
)
from ragprivacy.audit.cheats import Misbehaviour
from ragprivacy.audit.demo import demo_window
from ragprivacy.audit.merkle import MerkleLog
from ragprivacy.cli import main
from ragprivacy.embed import create_embedder

CHEATS = [
    ("low-sigma", "commitment_integrity", "below the σ"),
    ("over-rate", "account_policy", "more than its rate limit"),
    ("tenant-switch", "account_policy", "its committed tenant t(a)"),
    ("ground-noise", "account_policy", "chose the noise input"),
    ("decoy-vectors", "per_record", "claim A1"),
    ("withheld-witnesses", "per_record", "no witness"),
    ("wrong-seed", "per_record", "claim A2"),
    ("select-before-noise", "per_record", "claim A3"),
    ("cross-tenant", "per_record", "claim A4"),
    ("dropped-record", "account_policy", "is missing before it"),
    ("changed-record", "receipt_consistency", "append-only"),
    ("coalition", "policy_cap", "exceeds k_max"),
]


def _verify(w, **kw):
    return Verifier(**kw).verify(w.transcript, w.receipts, w.package)


def _resign(transcript: PublicTranscript, records: list[bytes], key: ProviderKey):
    """What a provider does after editing its ledger: a fresh, validly signed tree head."""
    log = MerkleLog()
    log.append_many(records)
    head = replace(transcript.tree_head, size=log.size, root=log.root().hex())
    head = replace(head, signature=key.sign(head.message()))
    coalition = replace(transcript.coalition, ledger_root=head.root)
    return PublicTranscript(transcript.commitments, records, head, coalition)


def _recommitted(transcript: PublicTranscript, commitments, key: ProviderKey):  # type: ignore[no-untyped-def]
    """The transcript under commitments the provider re-signed, with a tree head re-signed
    under them (the receipts it issued before still name the old ones)."""
    head = replace(transcript.tree_head, commitments=commitments.digest())
    head = replace(head, signature=key.sign(head.message()))
    return replace(transcript, commitments=commitments, tree_head=head)


@pytest.fixture(scope="module")
def honest():
    return demo_window(seed=2)


def test_the_honest_window_still_passes_with_the_same_epsilon(honest) -> None:
    v = _verify(honest)
    assert v.passed and v.epsilon_audit == pytest.approx(2.0)  # √k_max · ε_acc, eq. 5.2
    text = _verify(demo_window(seed=2, queries="text"))  # text queries re-embedded (A1)
    assert text.passed and text.epsilon_audit == pytest.approx(2.0)
    assert text.audit["vector_queries"] == 0 and v.audit["vector_queries"] == v.records


@pytest.mark.parametrize(("case", "check", "words"), CHEATS)
def test_each_cheat_fails_at_its_check(case: str, check: str, words: str) -> None:
    v = _verify(demo_window(tamper=case, seed=2))
    assert not v.passed and v.epsilon_audit is None
    assert v.failed_check == check, v.failures[:3]
    assert any(words in f.detail for f in v.failures if f.check == check)


def test_sigma_at_or_above_calibration_passes_and_below_fails() -> None:
    base = dict(
        epsilon_acc=1.0,
        delta_acc=1e-6,
        rate_limit=6,
        k_max=4,
        delta_policy=5e-6,
        window_id="w",
        window_start=0,
        window_end=10,
    )
    need = AuditPolicy(**base).noise_sigma
    assert need == pytest.approx(144.9, abs=0.1)  # eq. 3.4 at r = 6, Δ = 2
    from ragprivacy.audit.verifier import _sigma_floor

    assert _sigma_floor(AuditPolicy(**base, sigma=2 * need)) == []  # more noise is fine
    assert _sigma_floor(AuditPolicy(**base, sigma=need * 0.999))  # less is not


def test_noise_does_not_depend_on_the_timestamp_so_grinding_it_gains_nothing() -> None:
    """Two providers with the same seed answer the same query at different timestamps:
    the noise input rec_q = (W, a, t(a), H(q), j, n) has no timestamp, so the top-K is the
    same — trying 200 timestamps per query cannot pick the noise."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((30, 16))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    policy = AuditPolicy(
        epsilon_acc=1.0,
        delta_acc=1e-6,
        rate_limit=1,
        k_max=1,
        delta_policy=3e-6,
        window_id="w",
        window_start=0,
        window_end=10**6,
        top_k=3,
        sigma=0.5,  # above eq. 3.4 is not needed here: no verification, only the noise
    )
    q = vectors[4]
    answers = set()
    for ts in range(1, 201):
        p = AuditWindow(
            policy=policy,
            tenants={"t": ([f"d{i}" for i in range(30)], vectors)},
            accounts={"a": "t"},
            seed=bytes(range(32)),
        )
        p.commit(published_at=0)
        answers.add(p.query("a", vector=q, ts=ts).positions)
    assert len(answers) == 1


def test_timestamps_going_backwards_fail_the_ledger(honest) -> None:
    t = honest.transcript
    records = [QueryRecord.from_bytes(r) for r in t.records]
    records[10] = replace(records[10], ts=records[9].ts - 1)  # back-dated, ledger re-signed
    key = honest.provider.key
    forged = _resign(t, [r.to_bytes() for r in records], key)
    v = Verifier().verify(forged, [], honest.package)
    assert not v.passed and "ledger_integrity" in v.failed_checks
    assert any("timestamp" in f.detail for f in v.failures)


def test_a_receipt_or_tree_head_relabelled_for_another_window_fails(honest) -> None:
    key = honest.provider.key
    r = honest.receipts[0]
    other = replace(r, window_id="W-other")
    other = replace(other, signature=key.sign(other.message()))
    # a receipt labelled with another window says nothing about this one (a folder may
    # hold several windows' receipts) ...
    assert Verifier().verify(honest.transcript, [other], honest.package).passed
    # ... so the record it stands for is one its account holds no receipt of this window for
    others = [other if x is r else x for x in honest.receipts]
    v = Verifier().verify(honest.transcript, others, honest.package)
    assert v.failed_check == "receipt_consistency"
    assert any(f"record {r.position} " in f.detail and "never asked for" in f.detail
               for f in v.failures)  # fmt: skip
    head = replace(honest.transcript.tree_head, window_id="W-other")
    head = replace(head, signature=key.sign(head.message()))
    v = Verifier().verify(replace(honest.transcript, tree_head=head), [], honest.package)
    assert v.failed_check == "ledger_integrity"


def test_a_text_window_never_passes_without_re_embedding() -> None:
    w = demo_window(seed=3, queries="text")
    key = w.provider.key
    com = w.transcript.commitments
    # The provider hides which embedder it committed to (its name), and re-signs.
    # (Re-signing them after the queries contradicts the receipts, which name the
    # commitments they were issued under: so no receipts here, and a re-signed head.)
    hidden = replace(com, embedder={**com.embedder, "name": ""})
    hidden = replace(hidden, signature=key.sign(hidden.message()))
    t = _recommitted(w.transcript, hidden, key)
    v = Verifier().verify(t, [], w.package)
    assert v.failed_check == "per_record"
    assert any("cannot be re-embedded" in f.detail for f in v.failures)
    # An auditor who has the committed embedder re-embeds and PASSes the same window.
    assert Verifier(embedder=create_embedder("hashing")).verify(t, [], w.package).passed
    # One with a different embedder is told so.
    other = create_embedder("hashing", dim=1024)
    v = Verifier(embedder=other).verify(t, [], w.package)
    assert v.failed_check == "commitment_integrity"
    assert any("not the committed one" in f.detail for f in v.failures)


def test_decoys_are_caught_in_sampled_mode_whenever_a_colluder_record_is_sampled() -> None:
    w = demo_window(tamper="decoy-vectors", seed=2)
    v = _verify(w)  # full mode: every colluder record fails A1
    bad = {f.detail.split(":")[0] for f in v.failures if "claim A1" in f.detail}
    assert len(bad) == 5 * 6  # k_max + 1 colluders, r = 6 queries each


def test_withheld_witnesses_fail_the_cap_for_every_verifier_seed() -> None:
    """5 of 85 accounts (6 % of the records) have no witness: the sampled per-record check
    (47 records at β = 0.1, η = 0.01) misses them now and then; the coalition cap needs
    every query vector, so it FAILs on every seed."""
    w = demo_window(tamper="withheld-witnesses", seed=2, accounts_per_tenant=40)
    assert w.transcript.coalition.size <= 4  # the claim the provider certified
    misses = 0
    for seed in range(30):  # seeded: seed 25 is the first whose sample misses them all
        v = _verify(w, mode="sampled", beta=0.1, eta=0.01, rng=seed)
        assert not v.passed and "policy_cap" in v.failed_checks
        assert any("no witness" in f.detail for f in v.failures if f.check == "policy_cap")
        misses += "per_record" not in v.failed_checks
    assert misses > 0  # the sample alone would have let some seeds through


def test_an_uncommitted_account_fails(honest) -> None:
    t = honest.transcript
    records = [QueryRecord.from_bytes(r) for r in t.records]
    records[3] = replace(records[3], account="ghost")
    forged = _resign(t, [r.to_bytes() for r in records], honest.provider.key)
    v = Verifier().verify(forged, [], honest.package)
    assert "account_policy" in v.failed_checks
    assert any("'ghost' is not committed" in f.detail for f in v.failures)


def test_over_rate_is_refused_by_an_honest_provider() -> None:
    w = demo_window(seed=2)
    p = w.provider
    assert type(p) is AuditWindow  # an honest demo runs the honest window, no cheat class
    a = next(iter(p.account_names))
    from ragprivacy.errors import BudgetExhaustedError

    with pytest.raises(BudgetExhaustedError):
        p.query(a, vector=np.ones(32), ts=999_999)
    assert Misbehaviour().ignore_rate_limit is False


@pytest.mark.parametrize(("case", "check", "words"), CHEATS)
def test_ragprivacy_audit_verify_fails_each_cheat(tmp_path, capsys, case, check, words) -> None:
    out = tmp_path / case
    assert main(["audit", "commit", "--out", str(out), "--tamper", case, "--seed", "2"]) == 0
    capsys.readouterr()
    assert main(["audit", "verify", "--dir", str(out), "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["verdict"] == "FAIL" and verdict["failed_check"] == check
    assert any(words in f["detail"] for f in verdict["failures"])


def test_ragprivacy_audit_verify_passes_the_honest_windows(tmp_path, capsys) -> None:
    for extra in ([], ["--queries-mode", "text"]):
        out = tmp_path / ("honest" + "-".join(extra))
        assert main(["audit", "commit", "--out", str(out), "--seed", "2", *extra]) == 0
        capsys.readouterr()
        assert main(["audit", "verify", "--dir", str(out), "--json"]) == 0
        verdict = json.loads(capsys.readouterr().out)
        assert verdict["verdict"] == "PASS" and verdict["epsilon_audit"] == pytest.approx(2.0)


def test_a_window_signed_by_another_key_fails_against_the_known_key(tmp_path, capsys) -> None:
    out = tmp_path / "w"
    assert main(["audit", "commit", "--out", str(out), "--seed", "2"]) == 0
    known = ProviderKey.generate().public_hex  # the key the auditor expects
    capsys.readouterr()
    assert main(["audit", "verify", "--dir", str(out), "--provider-key", known, "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["failed_check"] == "commitment_integrity"
    assert main(["audit", "verify", "--dir", str(out), "--provider-key", "beef"]) == 2
    assert "64 hex characters" in capsys.readouterr().err


def _estimator_window(*, theta: float = 0.8, tau: int | None = None, spacing: int = 1):
    """A provider's window where k_max + 1 = 3 same-tenant colluders send probes at cos
    ≈ 0.9999 to one another (one probe, jittered), ``spacing`` apart, beside honest
    accounts' random queries; the provider commits the estimator settings it likes."""
    rng = np.random.default_rng(7)
    unit = lambda v: v / np.linalg.norm(v, axis=-1, keepdims=True)  # noqa: E731
    docs = unit(rng.standard_normal((40, 32)))
    colluders = [f"c{i}" for i in range(3)]
    honest = [f"h{i}" for i in range(4)]
    policy = AuditPolicy(
        epsilon_acc=1.0,
        delta_acc=1e-6,
        rate_limit=2,
        k_max=2,
        delta_policy=4e-6,
        window_id="w",
        window_start=0,
        window_end=10**6,
        top_k=3,
        theta=theta,
        tau=tau,
    )
    window = AuditWindow(
        policy=policy,
        tenants={"t": ([f"d{i}" for i in range(40)], docs)},
        accounts=dict.fromkeys(colluders + honest, "t"),
        seed=bytes(range(32)),
    )
    window.commit(published_at=0)
    probe = unit(rng.standard_normal(32))
    ts = 1
    for a in colluders:
        window.query(a, vector=unit(probe + 1e-3 * rng.standard_normal(32)), ts=ts)
        ts += spacing
    receipts = [window.query(a, vector=unit(rng.standard_normal(32)), ts=ts + i).receipt
                for i, a in enumerate(honest)]  # fmt: skip
    return Verifier().verify(window.transcript(), receipts, window.auditor_package())


def test_estimator_settings_within_the_calibration_see_the_coalition() -> None:
    v = _estimator_window()
    assert v.failed_check == "policy_cap"
    assert any("exceeds k_max" in f.detail for f in v.failures)


def test_a_theta_above_the_calibration_fails_although_it_hides_the_coalition() -> None:
    """θ = 1 sees no coalition in probes at cos 0.9999 (ĉ = 1): it FAILs as a setting."""
    v = _estimator_window(theta=1.0)
    assert v.audit["coalition_estimate"] == 1
    assert not v.passed and v.failed_check == "policy_cap"
    assert any("above the calibrated θ* = 0.8" in f.detail for f in v.failures)
    assert not any("exceeds k_max" in f.detail for f in v.failures)  # hidden from ĉ


def test_a_tau_shorter_than_the_window_fails_although_it_hides_the_coalition() -> None:
    """Colluders 1,000 apart are never within τ = 1 of one another (ĉ = 1)."""
    v = _estimator_window(tau=1, spacing=1_000)
    assert v.audit["coalition_estimate"] == 1
    assert not v.passed and v.failed_check == "policy_cap"
    assert any("shorter than the window" in f.detail for f in v.failures)
    assert not any("exceeds k_max" in f.detail for f in v.failures)  # hidden from ĉ


def test_commitments_re_signed_after_the_queries_contradict_every_receipt(honest) -> None:
    """Seed choice and back-dating: after seeing the window's queries the provider
    re-signs its commitments (another seed, an earlier published_at, a late account) and
    a fresh tree head under them. Each receipt an account kept names the commitments it
    was issued under, so the swap FAILs at receipt_consistency."""
    key = honest.provider.key
    com = honest.transcript.commitments
    for changed in (
        replace(com, c_seed="00" * 32),  # another s_W
        replace(com, published_at=com.published_at - 10**9),  # back-dated
        replace(com, accounts={**com.accounts, "late": next(iter(com.accounts.values()))}),
    ):
        changed = replace(changed, signature=key.sign(changed.message()))
        t = _recommitted(honest.transcript, changed, key)
        v = Verifier().verify(t, honest.receipts)
        assert "receipt_consistency" in v.failed_checks, v.failures[:2]
        assert any("issued under other commitments" in f.detail for f in v.failures)
    # and a head signed under other commitments than those published FAILs by itself
    stale = replace(honest.transcript, commitments=changed)
    assert "ledger_integrity" in Verifier().verify(stale, []).failed_checks


def test_a_record_an_account_never_asked_for_fails_when_it_submits_its_receipts(
    honest,
) -> None:
    """Query-number grinding and replays: a record in an honest account's name that none
    of its receipts names (here: its receipt for one record withheld by the provider is
    simply not in the account's hands) FAILs once the account submits its receipts."""
    victim = honest.receipts[0].account
    mine = [r for r in honest.receipts if r.account == victim]
    assert len(mine) >= 2
    kept = [r for r in honest.receipts if r is not mine[-1]]  # one record it never got
    v = Verifier().verify(honest.transcript, kept, honest.package)
    assert v.failed_check == "receipt_consistency"
    assert any(
        f"in the name of {victim!r}" in f.detail and "never asked for" in f.detail
        for f in v.failures
    )
    assert Verifier().verify(honest.transcript, honest.receipts, honest.package).passed


def test_an_open_window_committed_outside_the_calibration_fails_live() -> None:
    """θ and τ are public from phase A: a live check FAILs them before the window closes."""
    w = demo_window(seed=2)
    p = w.provider
    policy = replace(p.policy, theta=1.0)
    com = replace(w.transcript.commitments, policy=policy.to_dict(),
                  c_policy=policy.commitment().hex())  # fmt: skip
    com = replace(com, signature=p.key.sign(com.message()))
    live = replace(_recommitted(w.transcript, com, p.key), coalition=None)
    v = Verifier().verify(live, [])
    assert v.live and v.failed_check == "policy_cap"
    assert any("above the calibrated θ*" in f.detail for f in v.failures)
