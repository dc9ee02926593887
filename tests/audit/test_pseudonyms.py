"""Public names of a window (the audit's third round, item 1): what anyone reads names
accounts and tenants only by per-window pseudonyms keyed by the seed, tells no tenant's
size, and stamps records no finer than the committed unit. An outsider with the names
cannot test them; the account opens its own pseudonym with its receipt; the auditor
checks every pseudonym against the seed. A provider that keeps pseudonyms across windows
(so that they link), or stamps finer than it committed, FAILs at a named check."""

from __future__ import annotations

import hashlib
import json
import time

import numpy as np
import pytest

from ragprivacy.audit import PSEUDONYM, AuditPolicy, AuditWindow, Verifier, pseudonym
from ragprivacy.audit.commitments import name_salt, names_key
from ragprivacy.embed import create_embedder

TEXTS = [f"record {i}: patient {i} was seen for condition {i % 5}" for i in range(20)]
ACCOUNTS = {"alice@clinic.example": "oncology", "bob@clinic.example": "oncology"}
HOUR = 3600


def _policy(window_id: str = "W1", **kw: int) -> AuditPolicy:
    return AuditPolicy(
        epsilon_acc=4.0,
        delta_acc=1e-6,
        rate_limit=6,
        k_max=2,
        delta_policy=4e-6,
        window_id=window_id,
        window_start=0,
        window_end=2**62,
        top_k=2,
        **kw,
    )


def _window(
    window_type: type[AuditWindow] = AuditWindow,
    *,
    seed: bytes = bytes(range(32)),
    window_id: str = "W1",
    **policy: int,
) -> AuditWindow:
    emb = create_embedder("hashing")
    window = window_type(
        policy=_policy(window_id, **policy),
        tenants={"oncology": ([f"d{i}" for i in range(len(TEXTS))], emb.encode(TEXTS))},
        accounts=ACCOUNTS,
        contents={"oncology": [hashlib.sha256(t.encode()).hexdigest() for t in TEXTS]},
        embedder=emb,
        seed=seed,
    )
    window.commit(published_at=0)
    return window


def _run(window: AuditWindow, ts: int | None = None) -> list:  # type: ignore[type-arg]
    return [
        window.query(a, f"who was seen for condition {i}?", ts=ts).receipt
        for i in range(3)
        for a in ACCOUNTS
    ]


def _public(window: AuditWindow) -> str:
    t = window.transcript()
    return json.dumps(
        {
            "commitments": t.commitments.to_dict(),
            "records": [r.decode() for r in t.records],
            "tree_head": t.tree_head.to_dict(),
            "coalition": t.coalition.to_dict() if t.coalition else None,
        }
    )


def test_nothing_public_names_an_account_or_a_tenant_or_tells_a_size() -> None:
    window = _window()
    receipts = _run(window)
    public = _public(window)
    for name in [*ACCOUNTS, "oncology", "alice", "clinic.example"]:
        assert name not in public
    com = window.transcript().commitments
    assert all(PSEUDONYM.fullmatch(a) for a in [*com.accounts, *com.accounts.values()])
    assert set(com.c_idx) == set(com.accounts.values())
    assert all(isinstance(root, str) for root in com.c_idx.values())  # a root, no size
    assert com.schema == {"tenants": sorted(com.c_idx), "dim": [window.embedder.dim]}  # type: ignore[union-attr]
    # the outsider's dictionary: every name it knows, under every key it can name
    keys = [bytes(32), hashlib.sha256(b"").digest(), names_key(bytes(32))]
    guesses = {
        pseudonym(kind, name_salt(k, kind, n), n)
        for k in keys
        for kind in ("account", "tenant")
        for n in [*ACCOUNTS, "oncology"]
    } | {pseudonym(kind, k, n) for k in keys for kind in ("account", "tenant") for n in ACCOUNTS}
    assert not guesses & (set(com.accounts) | set(com.c_idx))
    # the account opens its own pseudonym; the auditor all of them, and the window passes
    assert all(r.opens_holder() and r.account in com.accounts for r in receipts)
    assert {r.holder for r in receipts} == set(ACCOUNTS)
    v = Verifier().verify(window.transcript(), receipts, window.auditor_package())
    assert v.passed, v.failures


def test_pseudonyms_change_with_every_window_so_records_do_not_link() -> None:
    first = _window(seed=bytes(range(32)), window_id="W1")
    second = _window(seed=bytes(range(1, 33)), window_id="W2")
    a1, a2 = (w.transcript().commitments for w in (first, second))
    assert not (set(a1.accounts) | set(a1.c_idx)) & (set(a2.accounts) | set(a2.c_idx))
    r1, r2 = _run(first)[0], _run(second)[0]
    assert r1.holder == r2.holder and r1.account != r2.account  # one account, two names


class _KeptPseudonyms(AuditWindow):
    """Keys its pseudonyms with a key of its own, the same every window: its records of
    two windows link by name (its receipts are consistent, so the client cannot tell)."""

    def _pseudonym_key(self) -> bytes:
        return b"the provider's own names key...."


class _FineStamps(AuditWindow):
    """Stamps records to the nanosecond, not to the committed unit."""

    def _next_ts(self) -> int:
        ts = max(time.time_ns(), self.counter.last_ts, self._last_stamp)
        self._last_stamp = ts
        return ts


def test_pseudonyms_kept_across_windows_fail_with_the_auditor_package() -> None:
    windows = [_window(_KeptPseudonyms, seed=bytes([s]) * 32, window_id=f"W{s}") for s in (1, 2)]
    assert windows[0].commitments.accounts == windows[1].commitments.accounts  # they link
    window = windows[0]
    receipts = _run(window)
    assert all(r.opens_holder() for r in receipts)  # consistent: the account sees nothing
    public = Verifier().verify(window.transcript(), receipts)
    assert public.outcome == "INCOMPLETE"  # the public checks cannot see it either
    v = Verifier().verify(window.transcript(), receipts, window.auditor_package())
    assert not v.passed and v.failed_check == "commitment_integrity"
    assert any("is not the pseudonym of a name" in f.detail for f in v.failures)
    assert any("not its holder's in this window" in f.detail for f in v.failures)


def test_records_are_stamped_to_the_committed_unit_and_a_finer_stamp_fails() -> None:
    window = _window(stamp_unit=HOUR)
    receipts = _run(window, ts=5 * HOUR + 1234)
    records = [json.loads(r) for r in window.transcript().records]
    assert {r["ts"] for r in records} == {5 * HOUR}
    assert Verifier().verify(window.transcript(), receipts, window.auditor_package()).passed
    clock = _window(stamp_unit=HOUR * 10**9)  # provider-stamped: the hour it answered in
    _run(clock)
    stamps = {json.loads(r)["ts"] for r in clock.transcript().records}
    assert all(ts % (HOUR * 10**9) == 0 for ts in stamps)
    fine = _window(_FineStamps, stamp_unit=HOUR)
    receipts = _run(fine)
    v = Verifier().verify(fine.transcript(), receipts, fine.auditor_package())
    assert not v.passed and v.failed_check == "ledger_integrity"
    assert any("finer than the committed stamp unit" in f.detail for f in v.failures)


def test_a_stamp_unit_must_be_a_positive_whole_number() -> None:
    from ragprivacy.errors import ConfigError

    for bad in (0, -5):
        with pytest.raises(ConfigError, match="stamp_unit"):
            _policy(stamp_unit=bad)
    assert np.all([_policy(stamp_unit=7).stamp(t) == t // 7 * 7 for t in (0, 6, 7, 50)])
