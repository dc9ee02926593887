"""A dp_vote tenant inside the audit window: its answers are records whose vote the
verifier replays from the derived noise (ragprivacy.audit.votes).

The honest window PASSes with the ε_audit of a window without the voting tenant. Each
cheat is the provider's own serving code — a subclass of the honest window, or its own
vote runner — with everything published re-signed by its own key; the verifier is never
touched, and each cheat FAILs at a named check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from tests._voting_llm import VOCAB, FakeLLM

from ragprivacy.audit import (
    AuditorPackage,
    AuditPolicy,
    AuditWindow,
    PublicTranscript,
    Receipt,
    Verifier,
    VoteSettings,
    check_vote,
    load_window,
    save_window,
)
from ragprivacy.audit.records import query_hash
from ragprivacy.cli import main
from ragprivacy.corpus import Corpus
from ragprivacy.dp import ChaCha20Bits, VoteStep, VoteTrace
from ragprivacy.embed import create_embedder
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.index import create_index
from ragprivacy.rag import DPVoteRAG
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Document

EMBEDDER = "hashing:64"
VOTED = [f"note {i}: secret alpha about patient {i}" for i in range(4)] + [
    f"note {i}: routine visit of patient {i}" for i in range(4, 12)
]
SETTINGS = VoteSettings(
    mode="dp_vote",
    slots=4,
    docs_per_voter=1,
    theta=2,
    max_tokens=4,
    epsilon_q=8.0,
    epsilon_token=2.0,
    max_discoveries=4,
)
Runner = Callable[[tuple[str, ...], ChaCha20Bits], VoteTrace]


def _policy(rate_limit: int = 6) -> AuditPolicy:
    return AuditPolicy(
        epsilon_acc=16.0,  # a voting account gets ⌊16 / 8⌋ = 2 answers
        delta_acc=1e-6,
        rate_limit=rate_limit,
        k_max=4,
        delta_policy=5e-6,
        window_id="W-vote",
        window_start=0,
        window_end=2**62,
        top_k=3,
    )


def _system() -> DPVoteRAG:
    embedder = create_embedder(EMBEDDER)
    docs = [Document(f"v{i}", t) for i, t in enumerate(VOTED)]
    index = create_index("exact", dim=embedder.dim)
    index.add(embedder.encode(VOTED), [d.id for d in docs])
    kb = KnowledgeBase(Corpus(docs, name="v"), embedder, index)
    return DPVoteRAG(
        TopKRetriever(kb, k=SETTINGS.slots),
        FakeLLM(),
        epsilon=SETTINGS.epsilon_q,
        epsilon_token=SETTINGS.epsilon_token,
        theta=SETTINGS.theta,
        max_tokens=SETTINGS.max_tokens,
        vocabulary=VOCAB,
    )


def honest_runner(query: str) -> Runner:
    system, text_of = _system(), {f"v{i}": t for i, t in enumerate(VOTED)}

    def run(ids: tuple[str, ...], bits: ChaCha20Bits) -> VoteTrace:
        result = system.answer_documents(query, [text_of[i] for i in ids], bits=bits)
        assert result.trace is not None
        return result.trace

    return run


@dataclass
class Ran:
    window: AuditWindow
    transcript: PublicTranscript
    receipts: list[Receipt]
    package: AuditorPackage
    answers: list[str]

    def verify(self, **kw: Any):  # type: ignore[no-untyped-def]
        return Verifier(**kw).verify(self.transcript, self.receipts, self.package)


def run_window(
    window_type: type[AuditWindow] = AuditWindow,
    runner: Callable[[str], Runner] = honest_runner,
    *,
    voting: bool = True,
    answers: int = 2,
) -> Ran:
    embedder = create_embedder(EMBEDDER)
    rng = np.random.default_rng(0)
    plain = rng.standard_normal((20, embedder.dim))
    plain /= np.linalg.norm(plain, axis=1, keepdims=True)
    tenants: dict[str, Any] = {"n": ([f"n{i}" for i in range(20)], plain)}
    accounts = {"a": "n"}
    if voting:
        tenants["v"] = ([f"v{i}" for i in range(len(VOTED))], embedder.encode(VOTED))
        accounts.update(b="v", c="v")
    w = window_type(
        policy=_policy(),
        tenants=tenants,
        accounts=accounts,
        embedder=embedder,
        embedder_spec=EMBEDDER,
        seed=bytes(range(32)),
        contents={"v": [query_hash(t) for t in VOTED]} if voting else None,
        voting={"v": SETTINGS} if voting else None,
    )
    w.commit(published_at=0)
    receipts, texts = [], []
    for j in range(4):
        receipts.append(w.query("a", vector=plain[j] + 0.1, nonce=f"{j:032x}").receipt)
    if voting:
        asked = ["what is the secret of patient 1?", "who had a routine visit?"]
        asks = [("b", asked[0]), ("c", asked[1]), ("b", asked[1]), ("b", "and patient 2?")]
        for account, question in asks[:answers]:
            answer, trace = w.vote(account, question, runner(question), nonce="ab" * 16)
            receipts.append(answer.receipt)
            texts.append(trace.text)
    return Ran(w, w.transcript(), receipts, w.auditor_package(), texts)


@pytest.fixture(scope="module")
def honest() -> Ran:
    return run_window(answers=3)


def test_an_honest_window_with_a_voting_tenant_passes_with_the_same_epsilon(honest: Ran) -> None:
    v = honest.verify()
    assert v.passed, v.failures
    assert v.records == 7 and v.records_checked == 7
    plain = run_window(voting=False).verify()
    assert plain.passed and v.epsilon_audit == pytest.approx(plain.epsilon_audit)
    voted = honest.receipts[4]
    assert voted.documents == () and voted.answer == honest.answers[0]
    assert (
        voted.opened_topk(honest.window.tenant_id("v")) == voted.topk_hash
    )  # H(answer), checked by the account


def test_the_exported_window_verifies_through_the_cli(honest: Ran, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    save_window(tmp_path, honest.transcript, honest.receipts, honest.package)
    transcript, receipts, package = load_window(tmp_path)
    assert package is not None and package.witnesses[4].vote == honest.package.witnesses[4].vote
    assert Verifier().verify(transcript, receipts, package).passed
    code = main(["audit", "verify", "--dir", str(tmp_path), "--embedder", EMBEDDER])
    assert code == 0, capsys.readouterr()
    com = json.loads((tmp_path / "commitments.json").read_text())
    assert com["voting"][honest.window.tenant_id("v")]["epsilon_q"] == 8.0


def test_a_voting_account_gets_what_its_epsilon_buys_and_no_retrieval(honest: Ran) -> None:
    w = honest.window
    assert w.limit("b") == 2 and w.limit("a") == 6
    with pytest.raises(BudgetExhaustedError, match="2 answers"):
        w.vote("b", "one more?", honest_runner("one more?"))
    with pytest.raises(ConfigError, match="voting tenant"):
        w.query("c", text="the documents themselves")
    with pytest.raises(ConfigError, match="does not belong to a voting tenant"):
        w.vote("a", "a vote?", honest_runner("a vote?"))


class _OwnNoise(AuditWindow):
    """Votes with bits of its own choosing, not those derived from s_W and rec_q."""

    def _vote(self, account, text, q, hq, expected, run, nonce, settings):  # type: ignore[no-untyped-def]
        chosen = ChaCha20Bits.derived(b"provider's choice".ljust(32, b"!"), "x")

        def own(ids: tuple[str, ...], bits: ChaCha20Bits) -> VoteTrace:
            return run(ids, chosen)

        return super()._vote(account, text, q, hq, expected, own, nonce, settings)


class _SecretsFirst(AuditWindow):
    """Gives the voters the documents it wants (the secret ones), not the top scores."""

    def _vote_select(self, index, q, settings):  # type: ignore[no-untyped-def]
        return tuple(range(settings.slots))


class _MoreAnswers(AuditWindow):
    """Lets a voting account have more answers than its ε_acc buys."""

    def _limit(self, account: str) -> int:
        return 6


def _forged_release(query: str) -> Runner:
    """Runs the honest vote, then releases 'alpha' at the first token whatever the noise
    said (a discovery it claims)."""
    inner = honest_runner(query)

    def run(ids: tuple[str, ...], bits: ChaCha20Bits) -> VoteTrace:
        trace = inner(ids, bits)
        first = trace.steps[0]
        forged = replace(first, discovery=not first.discovery, released=0, token="alpha")
        return replace(trace, steps=(forged, *trace.steps[1:]), text="alpha")

    return run


@pytest.mark.parametrize(
    ("window_type", "runner", "check", "words"),
    [
        (_OwnNoise, honest_runner, "per_record", "claim A2"),
        (AuditWindow, _forged_release, "per_record", "claim A2"),
        (_SecretsFirst, honest_runner, "per_record", "claim A3"),
        (_MoreAnswers, honest_runner, "account_policy", "voted answers"),
    ],
    ids=["own-noise", "forged-release", "chosen-documents", "over-epsilon"],
)
def test_each_voting_cheat_fails_at_its_check(
    window_type: type[AuditWindow], runner: Callable[[str], Runner], check: str, words: str
) -> None:
    ran = run_window(window_type, runner, answers=4 if window_type is _MoreAnswers else 3)
    v = ran.verify()
    assert not v.passed and v.epsilon_audit is None
    assert v.failed_check == check, v.failures[:3]
    assert any(words in f.detail for f in v.failures if f.check == check), v.failures


def test_the_replay_checks_every_step_of_the_release() -> None:
    """check_vote on a tenant of two documents (two of the four voters hold padding only
    and must vote as the non-RAG prompt)."""
    settings = replace(SETTINGS, max_tokens=3)
    bits = ChaCha20Bits.derived(bytes(32), "rec")
    system = _system()
    system.vote = replace(system.vote, max_tokens=3)
    texts = [VOTED[0], VOTED[5]]
    trace = system.answer_documents("the secret?", texts, bits=bits).trace
    assert trace is not None
    contents = [query_hash(t) for t in texts]
    assert check_vote(trace, settings, ChaCha20Bits.derived(bytes(32), "rec"), contents) is None

    def replay(t: VoteTrace) -> str | None:
        return check_vote(t, settings, ChaCha20Bits.derived(bytes(32), "rec"), contents)

    votes = list(trace.steps[0].votes)
    padding = next(i for i, v in enumerate(votes[1:], 1) if v == votes[0])
    votes[padding] = (votes[0] + 1) % trace.vocabulary_size
    odd = replace(trace.steps[0], votes=tuple(votes))
    assert "voted unlike" in (replay(replace(trace, steps=(odd, *trace.steps[1:]))) or "")
    assert "T_max" in (replay(replace(trace, steps=trace.steps * 4)) or "")
    cut = replace(trace, steps=trace.steps[:0])
    assert "stopped before" in (replay(cut) or "")
    assert replay(replace(cut, failure="GeneratorError")) is None  # failed part way
    eos = VoteStep((trace.eos,) * 5, False, trace.eos, "</s>")
    assert "after ⟨EOS⟩" in (replay(replace(trace, steps=(eos, trace.steps[0]))) or "")
    outside = VoteStep((0, 0, 0, 0, trace.vocabulary_size), False, 0, "x")
    assert "one vocabulary position" in (replay(replace(trace, steps=(outside,))) or "")


def test_vote_settings_are_checked_when_committed() -> None:
    with pytest.raises(ConfigError, match="exceeds the ε = 8"):
        replace(SETTINGS, max_discoveries=5)
    with pytest.raises(ConfigError, match="Only dp_vote, murag, murag_ada"):
        replace(SETTINGS, mode="naive_multi")
    with pytest.raises(ConfigError, match="max_retrievals"):
        replace(SETTINGS, mode="murag")
    with pytest.raises(ConfigError, match="takes no tau"):
        replace(SETTINGS, tau=5)
    assert SETTINGS.answer_cap(16.0, 6) == 2 and SETTINGS.answer_cap(100.0, 3) == 3


def _front(window: AuditWindow, sent_text: Callable[[str], str] | None = None):  # type: ignore[no-untyped-def]
    """The provider's HTTP front for account b's voted answers; ``sent_text`` replaces
    the answer it sends (its receipt still names the voted one)."""
    import httpx

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/audit/windows":
            return httpx.Response(200, json=[{"window_id": "W-vote", "status": "open"}])
        if request.url.path == "/v1/audit/windows/W-vote/commitments":
            return httpx.Response(200, json=window.commitments.to_dict())
        sent = json.loads(request.content)
        answer, trace = window.vote(
            "b", sent["query"], honest_runner(sent["query"]), nonce=sent["nonce"]
        )
        text = trace.text if sent_text is None else sent_text(trace.text)
        body = {"answer": text, "documents": [], "receipt": answer.receipt.to_dict()}
        return httpx.Response(200, json=body)

    return httpx.MockTransport(handle)


def test_the_client_keeps_a_voted_answer_s_receipt_and_refuses_another_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from ragprivacy.errors import VerificationError
    from ragprivacy.service import Client, load_receipts

    ran = run_window(answers=0)
    with Client("http://p", "rpk_x", receipts_dir=tmp_path, transport=_front(ran.window)) as b:
        got = b.answer("what is the secret of patient 1?")
    kept = load_receipts(tmp_path)
    assert [r["answer"] for r in kept] == [got["answer"]] and kept[0]["documents"] == []
    swapped = _front(ran.window, lambda text: text + " alpha")
    with (
        Client("http://p", "rpk_x", receipts_dir=tmp_path, transport=swapped) as b,
        pytest.raises(VerificationError, match="another answer"),
    ):
        b.answer("who had a routine visit?")
    receipts = [Receipt.from_dict(r) for r in load_receipts(tmp_path)]
    assert len(receipts) == 1
    w = ran.window
    v = Verifier().verify(w.transcript(), receipts, w.auditor_package())
    # the swapped answer's record is one b holds no receipt for: its answer went unproven
    assert v.failed_check == "receipt_consistency"
    assert any("never asked for" in f.detail for f in v.failures)
