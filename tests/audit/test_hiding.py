"""What an outsider reads of a window hides what it commits to (the audit's third round,
item 1): a dictionary of plausible questions, a brute force over every id list of a
tenant and a regenerated corpus, tested against everything a window publishes, match
nothing; the account opens its own records with its receipts, and the auditor opens
every record and every index leaf with the seed and the witnesses.

The attack is the outsider's: it has the public transcript (commitments, every record,
the signed tree head, the coalition claim) and the templates and names the queries were
made from — the true queries are in its dictionary."""

from __future__ import annotations

import hashlib
import itertools
import json
import re

import pytest

from ragprivacy.audit import (
    AuditPolicy,
    AuditWindow,
    MerkleLog,
    QueryRecord,
    TenantCommitment,
    Verifier,
    fixed_point,
    query_hash,
)
from ragprivacy.audit.commitments import index_salt_key
from ragprivacy.audit.records import topk_hash
from ragprivacy.audit.window import TIMESTAMP_UNIT_NS
from ragprivacy.embed import create_embedder
from ragprivacy.errors import DataError

NAMES = ["Tyler Gay", "Ana Ruiz", "Wei Chen", "Omar Haddad", "Lena Fischer", "Ivo Novak"]
CONDITIONS = ["asthma", "gout", "diabetes", "migraine"]
TEMPLATES = [
    "What is {name}'s diagnosis?",
    "Does {name} have {condition}?",
    "Which medication does {name} take for {condition}?",
    "When did {name} last visit?",
]
DOCS = [f"{n} was treated for {c}." for n in NAMES for c in CONDITIONS[:2]]
IDS = [f"patient-{n.split()[0].lower()}-{i}" for i, n in enumerate(n for n in NAMES for _ in "ab")]
K = 2


def _guesses() -> list[str]:
    return [t.format(name=n, condition=c) for t in TEMPLATES for n in NAMES for c in CONDITIONS]


def _window() -> AuditWindow:
    emb = create_embedder("hashing")
    window = AuditWindow(
        policy=AuditPolicy(
            epsilon_acc=4.0,
            delta_acc=1e-6,
            rate_limit=10,
            k_max=2,
            delta_policy=4e-6,
            window_id="W1",
            window_start=0,
            window_end=2**62,
            top_k=K,
        ),
        tenants={"clinic": (IDS, emb.encode(DOCS))},
        accounts={"alice": "clinic", "bob": "clinic"},
        contents={"clinic": [hashlib.sha256(d.encode()).hexdigest() for d in DOCS]},
        embedder=emb,
        seed=bytes(range(32)),
    )
    window.commit(published_at=0)
    return window


@pytest.fixture(scope="module")
def served() -> tuple[AuditWindow, list, list[str]]:  # type: ignore[type-arg]
    window = _window()
    asked = [g for g in _guesses() if "Tyler" in g or "Wei" in g][:16]
    answers = [window.query("alice" if i % 2 else "bob", q) for i, q in enumerate(asked)]
    return window, answers, asked


def _published(window: AuditWindow) -> str:
    """Everything an outsider can read of the window, as text."""
    transcript = window.transcript()
    claim = window.coalition_claim()
    return json.dumps(
        {
            "commitments": transcript.commitments.to_dict(),
            "records": [r.decode() for r in transcript.records],
            "tree_head": transcript.tree_head.to_dict(),
            "coalition": claim.to_dict(),
        }
    )


def test_a_dictionary_of_the_queries_matches_nothing_published(served) -> None:  # type: ignore[no-untyped-def]
    window, _, asked = served
    public = _published(window)
    digests = set(re.findall(r"[0-9a-f]{64}", public))
    guesses = _guesses()
    assert set(asked) <= set(guesses)  # the true queries are in the dictionary
    tried = {query_hash(g) for g in guesses} | {
        hashlib.sha256(g.lower().encode()).hexdigest() for g in guesses
    }
    assert not tried & digests
    assert not any(q in public for q in asked)


def test_every_id_list_of_the_tenant_matches_nothing_published(served) -> None:  # type: ignore[no-untyped-def]
    window, answers, _ = served
    public = _published(window)
    digests = set(re.findall(r"[0-9a-f]{64}", public))
    texts = [hashlib.sha256(d.encode()).hexdigest() for d in DOCS]
    candidates = {
        topk_hash(window.tenant_id("clinic"), pos, [IDS[p] for p in pos], [texts[p] for p in pos])
        for pos in itertools.permutations(range(len(IDS)), K)
    }
    served_lists = {a.receipt.topk_hash for a in answers}
    assert served_lists <= candidates  # the brute force covers what was served
    assert not candidates & digests
    assert not any(i in public for a in answers for i in a.ids)


def test_the_account_and_the_auditor_open_what_the_outsider_cannot(served) -> None:  # type: ignore[no-untyped-def]
    window, answers, asked = served
    records = [QueryRecord.from_bytes(r) for r in window.transcript().records]
    for a, q in zip(answers, asked):
        r = a.receipt
        assert r.query_hash == query_hash(q)
        assert records[r.position].opens_to(r.salt, r.query_hash, r.topk_hash)
        assert not records[r.position].opens_to("00" * 32, r.query_hash, r.topk_hash)
    package = window.auditor_package()
    assert all(
        records[i].opens_to(
            w.salt, w.query_hash(), topk_hash(records[i].tenant, w.positions, w.ids, w.contents)
        )
        for i, w in package.witnesses.items()
    )
    assert len({r.query_commit for r in records}) == len(records)  # fresh salts
    # stamped to the second: when within it each account asked is not published
    assert all(r.ts % TIMESTAMP_UNIT_NS == 0 and r.ts > 0 for r in records)
    verdict = Verifier().verify(window.transcript(), [a.receipt for a in answers], package)
    assert verdict.outcome == "PASS", verdict.failures[:3]


def test_a_regenerated_corpus_does_not_match_the_index_root(served) -> None:  # type: ignore[no-untyped-def]
    """The outsider regenerates the tenant's exact documents with the public embedder: the
    root it builds (the paper's leaves H(Emb(d)), or the salted leaves under any key it
    can name) is not the published C_D; the auditor, holding s_W, rebuilds it."""
    window, _, _ = served
    clinic = window.tenant_id("clinic")
    published = window.transcript().commitments.c_idx[clinic]
    rows = fixed_point(create_embedder("hashing").encode(DOCS))
    plain = MerkleLog()
    plain.append_many(hashlib.sha256(r.tobytes()).digest() for r in rows)
    texts = [hashlib.sha256(d.encode()).hexdigest() for d in DOCS]
    guesses = {plain.root().hex()} | {
        TenantCommitment("clinic", rows / (1 << 15), IDS, salt_key=key, contents=texts).root.hex()
        for key in (bytes(32), hashlib.sha256(b"").digest(), index_salt_key(bytes(32)))
    }
    assert published not in guesses
    auditor = TenantCommitment(
        clinic,
        rows / (1 << 15),
        IDS,
        salt_key=index_salt_key(window.auditor_package().seed),
        contents=texts,
    )
    assert auditor.root.hex() == published


def test_a_window_resumed_over_changed_texts_refuses_to_serve() -> None:
    """A second process resuming the window over a text changed since the commitments
    were published refuses to start: it would serve what the index never committed."""
    window = _window()
    emb = create_embedder("hashing")
    texts = [hashlib.sha256(d.encode()).hexdigest() for d in DOCS]
    common = dict(
        policy=window.policy,
        accounts=window.account_names,
        embedder=emb,
        seed=window.seed,
        key=window.key,
        commitments=window.commitments,
    )
    same = AuditWindow(tenants={"clinic": (IDS, emb.encode(DOCS))},
                       contents={"clinic": texts}, **common)  # type: ignore[arg-type]  # fmt: skip
    same.close()
    changed = [*texts[:-1], hashlib.sha256(b"another text").hexdigest()]
    with pytest.raises(DataError, match="changed since the window opened"):
        AuditWindow(tenants={"clinic": (IDS, emb.encode(DOCS))},
                    contents={"clinic": changed}, **common)  # type: ignore[arg-type]  # fmt: skip
