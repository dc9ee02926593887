"""The shipped client checks every receipt before keeping it (issue: the provider chooses
nothing). Each cheat is the provider's own serving code in front of a real audit window —
it holds its keys and answers as it likes — reached by the real client over HTTP
(``httpx.MockTransport``); the client is never patched."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from ragprivacy.audit import AuditPolicy, AuditWindow, Receipt, Verifier, query_hash
from ragprivacy.embed import create_embedder
from ragprivacy.errors import BackendError, ChargedFailureError, VerificationError
from ragprivacy.service import Client, load_receipts, load_unanswered

TEXTS = [f"record {i}: patient {i} was seen for condition {i % 7}" for i in range(24)]


def _window() -> AuditWindow:
    emb = create_embedder("hashing")
    window = AuditWindow(
        policy=AuditPolicy(
            epsilon_acc=4.0,
            delta_acc=1e-6,
            rate_limit=8,
            k_max=2,
            delta_policy=4e-6,
            window_id="W1",
            window_start=0,
            window_end=2**62,
            top_k=3,
        ),
        tenants={"clinic": ([f"d{i}" for i in range(len(TEXTS))], emb.encode(TEXTS))},
        accounts={"alice": "clinic", "bob": "clinic"},
        contents={"clinic": [hashlib.sha256(t.encode()).hexdigest() for t in TEXTS]},
        embedder=emb,
        seed=bytes(range(32)),
    )
    window.commit(published_at=0)
    return window


def _committed(receipt: dict[str, Any]) -> list[dict[str, str]]:
    """The documents an honest service serves with ``receipt``: the committed texts."""
    return [{"id": i, "text": TEXTS[int(i[1:])]} for _, i, _ in receipt["documents"]]


#: (window, query, the client's nonce) → the receipt the provider sends
Answer = Callable[[AuditWindow, str, str], dict[str, Any]]


def _honest(window: AuditWindow, query: str, nonce: str = "") -> dict[str, Any]:
    return window.query("alice", query, nonce=nonce).receipt.to_dict()


def _provider(
    window: AuditWindow,
    answer: Answer,
    *,
    status: int = 200,
    serve: Callable[[dict[str, Any]], list[dict[str, str]]] = _committed,
) -> httpx.MockTransport:
    """A provider's HTTP front: /v1/retrieve answers through ``answer`` and serves the
    documents ``serve`` gives for its receipt; the window's commitments are published as
    the service publishes them."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/audit/windows":
            return httpx.Response(200, json=[{"window_id": "W1", "status": "open"}])
        if request.url.path == "/v1/audit/windows/W1/commitments":
            return httpx.Response(200, json=window.commitments.to_dict())
        sent = json.loads(request.content)
        receipt = answer(window, sent["query"], sent["nonce"])
        body = {"documents": serve(receipt), "receipt": receipt}
        if status == 502:
            body = {"detail": "Generation failed after retrieval.", "receipt": body["receipt"]}
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handle)


def _client(transport: httpx.MockTransport, receipts: Path, **kw: Any) -> Client:
    return Client("http://provider", "rpk_x", receipts_dir=receipts, transport=transport, **kw)


def _kept(receipts: Path) -> list[dict[str, Any]]:
    return load_receipts(receipts) if (receipts / "receipts.jsonl").exists() else []


def test_an_honest_provider_s_receipts_are_kept(tmp_path: Path) -> None:
    window = _window()
    with _client(_provider(window, _honest), tmp_path) as alice:
        for q in ("who has asthma?", "who has gout?"):
            alice.retrieve(q)
    assert [r["seq"] for r in _kept(tmp_path)] == [1, 2]
    receipts = [Receipt.from_dict(r) for r in _kept(tmp_path)]
    assert Verifier().verify(window.transcript(), receipts, window.auditor_package()).passed


def test_h_of_q_grinding_is_refused_and_then_fails_the_window(tmp_path: Path) -> None:
    """The provider answers (and records) the query with trailing spaces — the same
    embedding, a new H(q), so new noise — until the noise suits it. The client refuses the
    receipt (kept apart as evidence), and the record, which the account holds no receipt
    for, FAILs the window."""

    def ground(window: AuditWindow, query: str, nonce: str) -> dict[str, Any]:
        return window.query("alice", query + "   ", nonce=nonce).receipt.to_dict()

    window = _window()
    with _client(_provider(window, _honest), tmp_path) as alice:
        alice.retrieve("who has asthma?")
    with (
        _client(_provider(window, ground), tmp_path) as alice,
        pytest.raises(VerificationError, match="not the hash of the query"),
    ):
        alice.retrieve("who has diabetes?")
    assert len(_kept(tmp_path)) == 1  # the ground receipt is not among the kept ones
    assert (tmp_path / "rejected" / "receipts.jsonl").exists()
    receipts = [Receipt.from_dict(r) for r in _kept(tmp_path)]
    v = Verifier().verify(window.transcript(), receipts, window.auditor_package())
    assert v.failed_check == "receipt_consistency"
    assert any("never asked for" in f.detail for f in v.failures)


def test_a_text_that_was_never_committed_is_refused_and_fails_the_window(tmp_path: Path) -> None:
    """The provider serves another text under a committed id (its receipt honest): the
    client refuses it. Re-signing the receipt so that it names the served text's hash
    does not help: the receipted documents no longer open the public record."""
    window = _window()

    def swapped(receipt: dict[str, Any]) -> list[dict[str, str]]:
        docs = _committed(receipt)
        docs[0]["text"] = "Frank has diabetes."  # never committed under this id
        return docs

    with (
        _client(_provider(window, _honest, serve=swapped), tmp_path / "a") as alice,
        pytest.raises(VerificationError, match="not the text the window's index committed"),
    ):
        alice.retrieve("who has asthma?")

    def re_signed(window: AuditWindow, query: str, nonce: str) -> dict[str, Any]:
        r = window.query("alice", query, nonce=nonce).receipt
        _, doc_id, _ = r.documents[0]
        fake = hashlib.sha256(b"Frank has diabetes.").hexdigest()
        docs = ((r.documents[0][0], doc_id, fake), *r.documents[1:])
        forged = replace(
            r, documents=docs, topk_hash=replace(r, documents=docs).opened_topk("clinic")
        )
        return replace(forged, signature=window.key.sign(forged.message())).to_dict()

    def as_receipted(receipt: dict[str, Any]) -> list[dict[str, str]]:
        docs = _committed(receipt)
        docs[0]["text"] = "Frank has diabetes."
        return docs

    with _client(_provider(window, re_signed, serve=as_receipted), tmp_path / "b") as alice:
        alice.retrieve("who has gout?")  # consistent with its own receipt
    receipts = [Receipt.from_dict(r) for r in _kept(tmp_path / "b")]
    v = Verifier().verify(window.transcript(), receipts, window.auditor_package())
    assert v.failed_check == "receipt_consistency", v.failures[:3]


def test_re_signed_commitments_and_foreign_keys_and_replays_are_refused(tmp_path: Path) -> None:
    window = _window()
    # the provider re-signs its commitments with another seed after answering
    with _client(_provider(window, _honest), tmp_path / "a") as alice:
        alice.retrieve("who has asthma?")
    com = window.commitments
    window._commitments = replace(com, c_seed="00" * 32)  # its own serving state
    window._commitments = replace(
        window._commitments, signature=window.key.sign(window._commitments.message())
    )
    with _client(_provider(window, _honest), tmp_path / "b") as fresh:
        fresh.retrieve("who has gout?")  # consistent with what it publishes now
    stale = _kept(tmp_path / "a")[0]
    with (
        _client(_provider(window, lambda w, q, n: stale), tmp_path / "b") as alice,
        pytest.raises(VerificationError, match="other commitments"),
    ):
        alice.retrieve("who has asthma?")
    # a key known in advance that is not the one the provider signs with
    other = "11" * 32
    with (
        _client(_provider(_window(), _honest), tmp_path / "c", provider_key=other) as alice,
        pytest.raises(VerificationError, match="not signed by the provider's key"),
    ):
        alice.retrieve("who has asthma?")
    # a replay of an earlier receipt (its j does not grow)
    window = _window()
    first: list[dict[str, Any]] = []

    def once(w: AuditWindow, query: str, nonce: str) -> dict[str, Any]:
        first[:] = first or [_honest(w, query, nonce)]
        return first[0]

    with _client(_provider(window, once), tmp_path / "d") as alice:
        alice.retrieve("who has asthma?")
        with pytest.raises(VerificationError, match="query number j = 1"):
            alice.retrieve("who has asthma?")


def test_a_charged_failure_s_receipt_is_kept_like_an_answer_s(tmp_path: Path) -> None:
    window = _window()
    with (
        _client(_provider(window, _honest, status=502), tmp_path) as alice,
        pytest.raises(ChargedFailureError) as err,
    ):
        alice.retrieve("who has asthma?")
    assert err.value.receipt is not None and len(_kept(tmp_path)) == 1
    receipts = [Receipt.from_dict(r) for r in _kept(tmp_path)]
    assert Verifier().verify(window.transcript(), receipts, window.auditor_package()).passed


def test_the_unsalted_embedding_is_what_the_noise_ignores() -> None:
    """Trailing spaces give the hashing embedder the same vector (the grinding cheat's
    premise: a new H(q) at no cost to the answer's relevance)."""
    emb = create_embedder("hashing")
    a, b = emb.encode(["who has asthma?", "who has asthma?   "])
    assert np.allclose(a, b)


def test_a_record_whose_answer_was_lost_is_excused_by_the_client_s_log(tmp_path: Path) -> None:
    """An honest provider killed between appending a record and answering: the account
    never gets the receipt. The client logs the request it got no answer to, and that
    excuses exactly one record with its H(q) — not a second one."""
    window = _window()

    def crash(window: AuditWindow, query: str, nonce: str) -> dict[str, Any]:
        window.query("alice", query, nonce=nonce)  # appended and durable ...
        raise httpx.ConnectError("connection reset")  # ... but the answer is lost

    answers = [_honest, crash]
    front = _provider(window, lambda w, q, n: answers.pop(0)(w, q, n))
    with _client(front, tmp_path) as alice:
        alice.retrieve("who has asthma?")
        with pytest.raises(httpx.ConnectError):
            alice.retrieve("who has gout?")
    unanswered = load_unanswered(tmp_path)
    assert unanswered == [(window.account_id("alice"), query_hash("who has gout?"))]
    receipts = [Receipt.from_dict(r) for r in _kept(tmp_path)]
    transcript, package = window.transcript(), window.auditor_package()
    assert Verifier().verify(transcript, receipts, package, unanswered=unanswered).passed
    assert not Verifier().verify(transcript, receipts, package).passed
    window.query("alice", "who has gout?")  # a second record with that H(q): not excused
    v = Verifier().verify(window.transcript(), receipts, window.auditor_package(),
                          unanswered=unanswered)  # fmt: skip
    assert v.failed_check == "receipt_consistency"


def test_answers_out_of_order_are_kept_and_a_replayed_j_is_not(tmp_path: Path) -> None:
    """Two requests in flight: the first is recorded first (j = 1) but answered after the
    second (j = 2); both are kept. The first receipt sent again is a replay."""
    window = _window()
    first_recorded, second_answered = threading.Event(), threading.Event()
    sent: list[dict[str, Any]] = []

    def in_flight(w: AuditWindow, query: str, nonce: str) -> dict[str, Any]:
        if query == "q one":
            sent.append(_honest(w, query, nonce))  # j = 1 ...
            first_recorded.set()
            assert second_answered.wait(60)  # ... answered once j = 2 was
            return sent[0]
        assert first_recorded.wait(60)
        return _honest(w, query, nonce)  # j = 2

    with _client(_provider(window, in_flight), tmp_path) as alice:

        def second() -> None:
            assert first_recorded.wait(60)
            alice.retrieve("q two")
            second_answered.set()

        t = threading.Thread(target=second)
        t.start()
        alice.retrieve("q one")
        t.join()
    assert [r["seq"] for r in _kept(tmp_path)] == [2, 1]  # in the order they arrived
    with (
        _client(_provider(window, lambda w, q, n: sent[0]), tmp_path) as alice,
        pytest.raises(VerificationError, match="already have"),
    ):
        alice.retrieve("q one")  # j = 1 again: a replay


@pytest.mark.parametrize("status", [500, 502])
def test_a_server_error_without_a_receipt_is_logged_as_unanswered(
    tmp_path: Path, status: int
) -> None:
    """A storage error may follow an append that took effect: the request is logged, for
    this window, so that its record (if any) is excused once, in this window only."""
    window = _window()
    calls = [_honest]

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/audit/windows":
            return httpx.Response(200, json=[{"window_id": "W1", "status": "open"}])
        if request.url.path.endswith("/commitments"):
            return httpx.Response(200, json=window.commitments.to_dict())
        body = json.loads(request.content)
        query, nonce = body["query"], body["nonce"]
        if calls:
            return httpx.Response(200, json={"receipt": calls.pop()(window, query, nonce)})
        window.query("alice", query, nonce=nonce)  # appended, then the storage error
        return httpx.Response(status, json={"detail": "lost the database"})

    with _client(httpx.MockTransport(handle), tmp_path) as alice:
        alice.retrieve("first")
        with pytest.raises(BackendError, match=str(status)):
            alice.retrieve("second")
    assert load_unanswered(tmp_path, "W1") == [(window.account_id("alice"), query_hash("second"))]
    assert load_unanswered(tmp_path, "W2") == []  # another window's verification: none
    receipts = [Receipt.from_dict(r) for r in _kept(tmp_path)]
    transcript, package = window.transcript(), window.auditor_package()
    unanswered = load_unanswered(tmp_path, "W1")
    assert Verifier().verify(transcript, receipts, package, unanswered=unanswered).passed


def test_commitments_that_cannot_be_fetched_stop_the_request_before_it_is_sent(
    tmp_path: Path,
) -> None:
    """The open window's commitments are fetched before the query is sent: when they
    cannot be, the query is not sent (no record, nothing to log). When the window list
    itself cannot be read, the receipt of a window not pinned before the request is
    refused and the request logged, so its record is excused."""
    window = _window()
    queries: list[str] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/audit/windows":
            return httpx.Response(200, json=[{"window_id": "W1", "status": "open"}])
        if request.url.path.endswith("/commitments"):
            return httpx.Response(503, json={"detail": "down"})
        body = json.loads(request.content)
        queries.append(body["query"])
        return httpx.Response(200, json={"receipt": _honest(window, body["query"], body["nonce"])})

    with (
        _client(httpx.MockTransport(handle), tmp_path) as alice,
        pytest.raises(BackendError, match="503"),
    ):
        alice.retrieve("who has asthma?")
    assert queries == [] and _kept(tmp_path) == []
    assert not (tmp_path / "unanswered").exists()

    def unlisted(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/audit/windows":
            return httpx.Response(503, json={"detail": "down"})
        if request.url.path.endswith("/commitments"):
            return httpx.Response(200, json=window.commitments.to_dict())
        body = json.loads(request.content)
        return httpx.Response(200, json={"receipt": _honest(window, body["query"], body["nonce"])})

    with (
        _client(httpx.MockTransport(unlisted), tmp_path) as alice,
        pytest.raises(VerificationError, match="not published before this request"),
    ):
        alice.retrieve("who has gout?")
    assert load_unanswered(tmp_path, "W1") == [(None, query_hash("who has gout?"))]
    assert _kept(tmp_path) == []


def test_noise_derived_without_the_client_s_nonce_is_refused_and_fails_the_window(
    tmp_path: Path,
) -> None:
    """The provider derives the noise without the client's nonce (from a seed it chose
    for queries it predicted): the client refuses the receipt. Re-signing the receipt to
    name the client's nonce does not help: it no longer opens the public record."""
    window = _window()

    def predicted(w: AuditWindow, query: str, nonce: str) -> dict[str, Any]:
        return w.query("alice", query).receipt.to_dict()  # no nonce: precomputable noise

    with (
        _client(_provider(window, predicted), tmp_path / "a") as alice,
        pytest.raises(VerificationError, match="nonce is not the one this client sent"),
    ):
        alice.retrieve("who has asthma?")

    def relabelled(w: AuditWindow, query: str, nonce: str) -> dict[str, Any]:
        r = replace(w.query("alice", query).receipt, nonce=nonce)
        return replace(r, signature=w.key.sign(r.message())).to_dict()

    with _client(_provider(window, relabelled), tmp_path / "b") as alice:
        alice.retrieve("who has gout?")
    receipts = [Receipt.from_dict(r) for r in _kept(tmp_path / "b")]
    v = Verifier().verify(window.transcript(), receipts, window.auditor_package())
    assert v.failed_check == "receipt_consistency", v.failures[:3]


def test_a_receipt_in_another_account_s_name_or_pseudonym_is_refused(tmp_path: Path) -> None:
    """The provider answers alice's request as bob (charging bob, recording bob's
    pseudonym), or signs a receipt whose pseudonym its holder's name does not open: the
    client refuses both (kept apart as evidence)."""
    window = _window()

    def as_bob(w: AuditWindow, query: str, nonce: str) -> dict[str, Any]:
        return w.query("bob", query, nonce=nonce).receipt.to_dict()

    def unopened(w: AuditWindow, query: str, nonce: str) -> dict[str, Any]:
        r = w.query("alice", query, nonce=nonce).receipt
        forged = replace(r, holder_salt="00" * 32)
        return replace(forged, signature=w.key.sign(forged.message())).to_dict()

    answers: list[Answer] = [_honest, as_bob, unopened]
    with _client(_provider(window, lambda w, q, n: answers.pop(0)(w, q, n)), tmp_path) as alice:
        alice.retrieve("who has asthma?")
        for words in ("another account", "committed pseudonym"):
            with pytest.raises(VerificationError, match=words):
                alice.retrieve("who has gout?")
    assert len(_kept(tmp_path)) == 1
    assert len(load_receipts(tmp_path / "rejected")) == 2
