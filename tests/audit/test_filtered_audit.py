"""MURAG and MURAG-ADA tenants inside the audit window: the screening and the
per-document filters it charges are committed and replayed (ragprivacy.audit.filters).

Honest windows PASS, the filters carried from one window into the next. Each cheat is
the provider's own serving code — its own filter state, or a subclass of the honest
window — with everything published signed by its own key; the verifier is never
touched, and each cheat FAILs at a named check.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from tests._voting_llm import VOCAB, FakeLLM

from ragprivacy.audit import (
    AuditorPackage,
    AuditPolicy,
    AuditWindow,
    FilterScreen,
    FilterState,
    ProviderKey,
    PublicTranscript,
    Receipt,
    Verifier,
    VoteSettings,
    WitnessStore,
    filter_end_states,
    load_window,
    sample_size,
    save_window,
    screen_documents,
)
from ragprivacy.audit.records import query_hash
from ragprivacy.cli import main
from ragprivacy.corpus import Corpus
from ragprivacy.dp import ChaCha20Bits, VoteTrace
from ragprivacy.embed import create_embedder
from ragprivacy.errors import ConfigError
from ragprivacy.index import create_index
from ragprivacy.rag import DPVoteRAG, MuRAG, MuRAGAda
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Document

EMBEDDER = "hashing:64"
GRID = 2**20  # the policy's default grid: integer scores are cosine · 2^20
DOCS = [f"note {i}: secret alpha about patient {i}" for i in range(4)] + [
    f"note {i}: routine visit of patient {i}" for i in range(4, 12)
]
# cosines under hashing:64: the first question scores the secret notes 0.35-0.39 and the
# routine ones 0.19-0.24; the second the secret notes 0.59-0.62 and the others ≤ 0.02
SECRET, ALPHA, ROUTINE = (
    "what is the secret of patient 1?",
    "secret alpha notes",
    "who had a routine visit?",
)
VOTE = {"slots": 4, "docs_per_voter": 1, "theta": 2, "max_tokens": 4, "epsilon_q": 4.0}
MURAG = VoteSettings(
    mode="murag",
    **VOTE,
    epsilon_token=1.0,
    max_discoveries=4,
    tau=round(0.3 * GRID),
    max_retrievals=1,
)
ADA = VoteSettings(
    mode="murag_ada",
    **VOTE,
    epsilon_token=1.0,
    max_discoveries=3,
    max_retrievals=1,
    epsilon_thr=1.0,
    bin_top=GRID,
    bin_bottom=-GRID,
    bin_size=round(0.05 * GRID),
)
Runner = Callable[[tuple[str, ...], ChaCha20Bits], VoteTrace]
KEY = ProviderKey.generate()  # the provider's long-term key, the same every window


def _policy(start: int = 0) -> AuditPolicy:
    return AuditPolicy(
        epsilon_acc=16.0,  # a voting account gets ⌊16 / 4⌋ = 4 answers
        delta_acc=1e-6,
        rate_limit=6,
        k_max=4,
        delta_policy=5e-6,
        window_id=f"W-filters-{start}",
        window_start=start,
        window_end=2**62,
        top_k=3,
    )


def _runner(settings: VoteSettings, ids: list[str] | None = None) -> Callable[[str], Runner]:
    """The honest vote of the library's own system for the tenant's mode, over the
    documents the window's screening (or its top m·k) passes on."""
    embedder = create_embedder(EMBEDDER)
    docs = [Document(i, t) for i, t in zip(ids or [f"d{i}" for i in range(len(DOCS))], DOCS)]
    index = create_index("exact", dim=embedder.dim)
    index.add(embedder.encode(DOCS), [d.id for d in docs])
    kb = KnowledgeBase(Corpus(docs, name="v"), embedder, index)
    vote: dict[str, Any] = {
        "epsilon_token": settings.epsilon_token,
        "theta": settings.theta,
        "max_tokens": settings.max_tokens,
        "vocabulary": VOCAB,
    }
    top = TopKRetriever(kb, k=settings.slots)
    system: MuRAG | DPVoteRAG
    if settings.mode == "dp_vote":
        system = DPVoteRAG(top, FakeLLM(), epsilon=settings.epsilon_q, **vote)
    else:
        system = (MuRAG if settings.mode == "murag" else MuRAGAda)(
            top,
            FakeLLM(),
            tau=settings.tau / GRID,
            epsilon_q=settings.epsilon_q,
            epsilon_thr=settings.epsilon_thr or 1.0,
            max_retrievals=settings.max_retrievals,
            **vote,
        )
    assert system.describe()["max_discoveries"] == settings.max_discoveries
    text_of = {d.id: d.text for d in docs}

    def runner(query: str) -> Runner:
        def run(ids: tuple[str, ...], bits: ChaCha20Bits) -> VoteTrace:
            result = system.answer_documents(query, [text_of[i] for i in ids], bits=bits)
            assert result.trace is not None
            return result.trace

        return run

    return runner


@dataclass
class Ran:
    window: AuditWindow
    transcript: PublicTranscript
    receipts: list[Receipt]
    package: AuditorPackage
    answers: list[str]
    voted_over: list[tuple[str, ...]]

    def verify(self, **kw: Any):  # type: ignore[no-untyped-def]
        return Verifier(**kw).verify(self.transcript, self.receipts, self.package)


def run_window(
    settings: VoteSettings = MURAG,
    window_type: type[AuditWindow] = AuditWindow,
    *,
    asks: tuple[tuple[str, str], ...] = (("b", SECRET), ("c", ALPHA), ("b", ROUTINE)),
    start: np.ndarray | FilterState | None = None,
    seed: bytes = bytes(range(32)),
    ids: list[str] | None = None,
    published_at: int = 0,
) -> Ran:
    embedder = create_embedder(EMBEDDER)
    w = window_type(
        policy=_policy(published_at),
        tenants={"v": (ids or [f"d{i}" for i in range(len(DOCS))], embedder.encode(DOCS))},
        accounts={"b": "v", "c": "v"},
        embedder=embedder,
        embedder_spec=EMBEDDER,
        seed=seed,
        contents={"v": [query_hash(t) for t in DOCS]},
        voting={"v": settings},
        filters=None if start is None else {"v": start},
        key=KEY,
    )
    w.commit(published_at=published_at)
    runner = _runner(settings, ids)
    receipts, texts, ids = [], [], []
    for n, (account, question) in enumerate(asks):
        answer, trace = w.vote(account, question, runner(question), nonce=f"{n:032x}")
        receipts.append(answer.receipt)
        texts.append(trace.text)
        ids.append(answer.ids)
    return Ran(w, w.transcript(), receipts, w.auditor_package(), texts, ids)


@pytest.fixture(scope="module")
def honest() -> Ran:
    return run_window()


def test_an_honest_murag_window_passes_and_its_filters_drop_spent_documents(
    honest: Ran,
) -> None:
    v = honest.verify()
    assert v.passed, v.failures
    assert v.records == 3 and v.epsilon_audit is not None
    secret = ("d0", "d1", "d2", "d3")
    # the first question passes the four secret notes on and spends them (M = 1) ...
    assert sorted(honest.voted_over[0]) == list(secret)
    # ... so the second, about them alone, votes over padding only: nothing to leak
    assert honest.voted_over[1] == ()
    assert set(honest.voted_over[2]) <= {f"d{i}" for i in range(4, 12)}
    spent = honest.window.document_spent("v")
    assert (spent[:4] == 4.0).all() and spent.max() <= MURAG.document_budget


def test_an_honest_murag_ada_window_passes() -> None:
    ran = run_window(ADA, asks=(("b", SECRET), ("c", ALPHA), ("c", ROUTINE), ("b", SECRET)))
    v = ran.verify()
    assert v.passed, v.failures
    spent = ran.window.document_spent("v")
    assert spent.max() <= ADA.document_budget * (1 + 1e-9)
    assert {1.0, 4.0} >= set(np.unique(spent[spent > 0]).tolist())  # ε_thr or ε_q, once


def test_the_next_window_starts_from_the_filters_the_last_one_left(honest: Ran) -> None:
    left = honest.window.document_spent("v")
    nxt = run_window(asks=(("c", ALPHA),), start=left, seed=bytes(range(1, 33)))
    assert nxt.verify().passed
    assert nxt.voted_over == [()]  # the secret notes stay spent across windows
    com = nxt.transcript.commitments
    t = nxt.window.tenant_id("v")
    assert set(com.filters) == {t} and nxt.package.filters[t] == left.tolist()
    # C_filters hides the state: it is keyed by the window's seed
    assert com.filters[t] != honest.transcript.commitments.filters[honest.window.tenant_id("v")]


def test_the_exported_window_verifies_through_the_cli(honest: Ran, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    save_window(tmp_path, honest.transcript, honest.receipts, honest.package)
    transcript, receipts, package = load_window(tmp_path)
    assert package is not None and package.witnesses[0].screen == honest.package.witnesses[0].screen
    assert Verifier().verify(transcript, receipts, package).passed
    code = main(["audit", "verify", "--dir", str(tmp_path), "--embedder", EMBEDDER])
    assert code == 0, capsys.readouterr()
    com = json.loads((tmp_path / "commitments.json").read_text())
    assert com["voting"][honest.window.tenant_id("v")]["max_retrievals"] == 1
    assert '"tau"' in json.dumps(com) and '"d0"' not in json.dumps(com)


class _Forgetful(FilterState):
    """The provider's own filter state: it never applies a charge (budgets reset)."""

    def catch_up(
        self,
        fetch: Callable[[int], tuple[Sequence[int], int]],
        load: Callable[[Sequence[int]], Sequence[FilterScreen]],
    ) -> tuple[np.ndarray, int]:
        return self.start.copy(), fetch(0)[1]


class _Unlimited(_Forgetful):
    """Commits the secret notes as having spent −∞ (its own state class, past the
    library's check), so they can pay for ever."""

    def __init__(self, start: np.ndarray) -> None:
        super().__init__(start)
        self.start = np.where(np.arange(start.size) < 4, -np.inf, start)


class _OwnThreshold(AuditWindow):
    """Screens with threshold noise of its own choosing, not the derived one."""

    def _screen(self, scores, spent, settings, bits):  # type: ignore[no-untyped-def]
        chosen = ChaCha20Bits.derived(b"provider's choice".ljust(32, b"!"), "x")
        return super()._screen(scores, spent, settings, chosen)


class _Steered(AuditWindow):
    """Leaves the most relevant document out of the vote (it could still pay)."""

    def _screen(self, scores, spent, settings, bits):  # type: ignore[no-untyped-def]
        got = super()._screen(scores, spent, settings, bits)
        return replace(got, positions=got.positions[1:])


class _Uncommitted(AuditWindow):
    """Publishes no C_filters (the state it starts from is its word)."""

    def _filter_commitments(self) -> dict[str, str]:
        return {}


def _forgetful(settings: VoteSettings) -> Ran:
    return run_window(settings, start=_Forgetful(np.zeros(len(DOCS))))


@pytest.mark.parametrize(
    ("make", "check", "words"),
    [
        (lambda: _forgetful(MURAG), "per_record", "the committed filters"),
        (lambda: _forgetful(ADA), "per_record", "the committed filters"),
        (
            lambda: run_window(
                ADA, _OwnThreshold, asks=(("b", SECRET), ("c", ROUTINE), ("b", ALPHA))
            ),
            "per_record",
            "derived threshold",
        ),
        (lambda: run_window(MURAG, _Steered), "per_record", "top K"),
        (lambda: run_window(MURAG, _Uncommitted), "commitment_integrity", "C_filters"),
    ],
    ids=["budgets-reset", "ada-budgets-reset", "own-threshold-noise", "steered", "no-c-filters"],
)
def test_each_filter_cheat_fails_at_its_check(
    make: Callable[[], Ran], check: str, words: str
) -> None:
    ran = make()
    v = ran.verify()
    assert not v.passed and v.epsilon_audit is None
    assert v.failed_check == check, v.failures[:3]
    assert any(words in f.detail for f in v.failures if f.check == check), v.failures


def test_a_reset_leaks_what_the_filters_protect_and_sampling_still_replays_every_charge() -> None:
    ran = _forgetful(MURAG)
    assert sorted(ran.voted_over[1]) == ["d0", "d1", "d2", "d3"]  # spent notes, voted again
    s = sample_size(0.5, 0.5)
    assert s < len(ran.receipts)  # so the verifier samples
    # the provider also hands the auditor a decoy witness for the overspending record
    # (a query that scores nothing), hoping it is not among the sampled ones
    w = ran.package.witnesses[1]
    ran.package.witnesses[1] = replace(w, query_fixed=bytes(4 * 64).hex())
    unsampled = 0
    for seed in range(12):
        v = ran.verify(mode="sampled", beta=0.5, eta=0.5, rng=seed)
        assert v.records_checked == s and not v.passed, seed
        sampled = any(f.detail.startswith("record 1: claim binding") for f in v.failures)
        unsampled += not sampled
        assert any(f.detail.startswith("record 1: claim A3") for f in v.failures), v.failures
    assert unsampled  # the replay caught it where re-execution did not look


def test_a_committed_state_below_zero_fails() -> None:
    ran = run_window(start=_Unlimited(np.zeros(len(DOCS))), asks=(("b", SECRET), ("c", ALPHA)))
    assert sorted(ran.voted_over[1]) == ["d0", "d1", "d2", "d3"]  # paid by −∞
    v = ran.verify()
    assert v.failed_check == "commitment_integrity"
    assert any("[0, M·ε_q]" in f.detail for f in v.failures), v.failures


def test_a_package_that_does_not_open_c_filters_fails() -> None:
    ran = run_window(asks=(("b", SECRET),))
    t = ran.window.tenant_id("v")
    ran.package.filters[t] = [0.5, *ran.package.filters[t][1:]]
    v = ran.verify()
    assert v.failed_check == "commitment_integrity"
    assert any(f"C_filters[{t}]" in f.detail for f in v.failures)


def test_the_screening_follows_alg_1_and_alg_2() -> None:
    bits = ChaCha20Bits.derived(bytes(32), "rec")
    scores = np.array([5, 9, 9, 2, 7]) * GRID // 10  # cos 0.5, 0.9, 0.9, 0.2, 0.7
    fixed = replace(MURAG, tau=round(0.6 * GRID), slots=2)
    spent = np.array([0.0, 0.0, 4.0, 0.0, 0.0])  # document 2 has spent its M·ε_q
    got = screen_documents(scores, spent, fixed, bits)
    assert got.positions == (1, 4) and got.charges == ((1, 4.0), (4, 4.0))
    assert got.tau == round(0.6 * GRID)
    # MURAG-ADA with a tiny noise scale (ε_thr = 50: a non-zero draw has probability
    # e^-50): the prefix sum reaches K = 2 in the bin of the two 0.9 scores, which is
    # released; document 2 can pay ε_thr but not ε_q in all, so it pays ε_thr only
    ada = replace(ADA, slots=2, epsilon_q=100.0, epsilon_thr=50.0, epsilon_token=1.0)
    spent = np.array([0.0, 0.0, 40.0, 0.0, 0.0])
    got = screen_documents(scores, spent, ada, bits)
    assert got.positions == (1,) and got.charges == ((1, 100.0), (2, 50.0))
    assert got.tau == ada.bin_edges()[3]  # the lower edge of the released bin, 0.85
    with pytest.raises(ConfigError, match="ε_thr"):
        replace(ADA, epsilon_thr=4.0)
    with pytest.raises(ConfigError, match="takes no epsilon_thr"):
        replace(MURAG, epsilon_thr=1.0)
    with pytest.raises(ConfigError, match="per-document filters"):
        AuditWindow(
            policy=_policy(),
            tenants={"v": (["x"], np.eye(1, 64))},
            accounts={"b": "v"},
            filters={"v": np.zeros(1)},
        )


def test_two_writers_of_one_ledger_screen_on_each_other_s_charges(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Two processes serving one window (two windows over one ledger file and one witness
    store): each screens on the other's charges, and an answer whose screening another
    writer's record overtook is screened again — so the ledger order is the charge order
    the verifier replays."""
    embedder = create_embedder(EMBEDDER)
    store, key = WitnessStore(), ProviderKey.generate()

    def writer(commitments: Any = None) -> AuditWindow:
        return AuditWindow(
            policy=_policy(),
            tenants={"v": ([f"d{i}" for i in range(len(DOCS))], embedder.encode(DOCS))},
            accounts={"b": "v", "c": "v"},
            embedder=embedder,
            embedder_spec=EMBEDDER,
            seed=bytes(range(32)),
            contents={"v": [query_hash(t) for t in DOCS]},
            voting={"v": MURAG},
            ledger_path=tmp_path / "ledger.sqlite",
            witness_store=store,
            key=key,
            commitments=commitments,
        )

    first = writer()
    first.commit(published_at=0)
    second = writer(first.commitments)
    vote = _runner(MURAG)
    runs: list[tuple[str, ...]] = []
    receipts: list[Receipt] = []

    def overtaken(ids: tuple[str, ...], bits: ChaCha20Bits) -> VoteTrace:
        runs.append(ids)
        if len(runs) == 1:  # the first writer appends while the second one votes
            receipts.append(first.vote("b", SECRET, vote(SECRET), nonce="00" * 16)[0].receipt)
        return vote(ALPHA)(ids, bits)

    answer, _ = second.vote("c", ALPHA, overtaken, nonce="01" * 16)
    # screened on the committed state first (the secret notes unspent), then again on
    # the first writer's charges: they are spent, and the answer votes over padding
    assert sorted(runs[0]) == ["d0", "d1", "d2", "d3"] and runs[1:] == [()]
    assert answer.ids == () and answer.receipt.position == 1
    receipts.append(answer.receipt)
    receipts.append(first.vote("b", ROUTINE, vote(ROUTINE), nonce="02" * 16)[0].receipt)
    v = Verifier().verify(second.transcript(), receipts, second.auditor_package())
    assert v.passed, v.failures
    assert (second.document_spent("v")[:4] == MURAG.document_budget).all()
    first.close()
    second.close()


def test_a_window_that_resets_the_filters_it_inherited_fails_against_the_previous_one(
    honest: Ran, tmp_path, capsys
) -> None:  # type: ignore[no-untyped-def]
    left = honest.window.document_spent("v")
    previous = filter_end_states(honest.transcript, honest.package)
    assert previous["v"].by_id == dict(zip(honest.window.document_ids("v"), left.tolist()))
    later = {"seed": bytes(range(2, 34)), "published_at": 1}
    carried = run_window(asks=(("c", ALPHA),), start=left, **later)
    reset = run_window(asks=(("c", ALPHA),), **later)  # starts from 0
    # the secret notes, spent in the previous window, answer again
    assert sorted(reset.voted_over[0]) == ["d0", "d1", "d2", "d3"]
    assert reset.verify().passed  # alone, its own package opens its C_filters
    assert (
        Verifier()
        .verify(carried.transcript, carried.receipts, carried.package, previous_filters=previous)
        .passed
    )
    v = Verifier().verify(
        reset.transcript, reset.receipts, reset.package, previous_filters=previous
    )
    assert v.failed_check == "commitment_integrity"
    spent = f"{int((left > 0).sum())} document(s)"  # every one the first window charged
    assert any(spent in f.detail and "reset" in f.detail for f in v.failures), v.failures
    for name, ran in (("w1", honest), ("carried", carried), ("reset", reset)):
        save_window(tmp_path / name, ran.transcript, ran.receipts, ran.package)
    verify = ["audit", "verify", "--embedder", EMBEDDER, "--previous", str(tmp_path / "w1")]
    assert main([*verify, "--dir", str(tmp_path / "carried")]) == 0, capsys.readouterr()
    assert main([*verify, "--dir", str(tmp_path / "reset")]) == 1
    assert "reset" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("settings", "ids", "words"),
    [
        (replace(MURAG, max_retrievals=3), None, "lifetime budget M·ε_q grew"),
        (
            VoteSettings(mode="dp_vote", **VOTE, epsilon_token=1.0, max_discoveries=4),
            None,
            "has none here",
        ),
        # the secret notes erased and added again under new ids: matched by content
        (MURAG, [f"x{i}" if i < 4 else f"d{i}" for i in range(len(DOCS))], "4 document(s)"),
    ],
    ids=["budget-grows", "no-longer-filtered", "re-added-under-new-ids"],
)
def test_the_next_window_cannot_restart_the_budgets_another_way(
    honest: Ran, settings: VoteSettings, ids: list[str] | None, words: str
) -> None:
    previous = filter_end_states(honest.transcript, honest.package)
    left = honest.window.document_spent("v")
    start = np.where(np.arange(len(DOCS)) < 4, 0.0, left) if ids else left
    nxt = run_window(
        settings,
        asks=(("c", ALPHA),),
        start=None if not settings.filtered else start,
        seed=bytes(range(3, 35)),
        ids=ids,
        published_at=1,
    )
    assert nxt.verify().passed  # alone, it is consistent
    v = Verifier().verify(nxt.transcript, nxt.receipts, nxt.package, previous_filters=previous)
    assert v.failed_check == "commitment_integrity"
    assert any(words in f.detail for f in v.failures), v.failures
