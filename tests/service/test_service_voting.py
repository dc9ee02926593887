"""Voting tenants (dp_vote, murag, murag_ada) and log-probabilities, through a running
server with two workers: only DP-voted answers leave, each costs the tenant's ε_q, an
account gets min(r, ⌊ε_acc/ε_q⌋) of them, refusals spend nothing, concurrent MURAG
answers never overspend a document's filter, and the audited window — every voted answer
among its records, MURAG's screenings replayed — verifies."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
from tests.service.conftest import MANY_AT_ONCE

from ragprivacy.audit import Receipt, Verifier, load_window
from ragprivacy.dp import SqliteBudgetStore
from ragprivacy.service import fetch_window

TENANTS = {  # tenant -> admin options
    "clinic": ["--k", "3", "--logprobs"],
    "vote": ["--mode", "dp_vote", "--k", "2", "--eps-q", "4"],
    "mu": ["--mode", "murag", "--k", "2", "--eps-q", "2", "--max-retrievals", "3", "--tau", "0"],
    "ada": ["--mode", "murag_ada", "--k", "2", "--eps-q", "4", "--max-retrievals", "2"],
}
ACCOUNTS = {  # account -> (tenant, ε_acc, r)
    "alice": ("clinic", "4", "6"),
    "v1": ("vote", "9", "5"),  # ⌊9/4⌋ = 2 answers
    "v2": ("vote", "9", "5"),
    "m1": ("mu", "1000", "100"),
    "m2": ("mu", "1000", "100"),
    "a1": ("ada", "1000", "100"),
}


@pytest.fixture(scope="module")
def service(tmp_path_factory, admin, corpus_file, module_server_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("voting")
    state = root / "state"
    for tenant, opts in TENANTS.items():
        admin(state, "tenant", "create", tenant, *opts)
        corpus = corpus_file(root / f"{tenant}.jsonl", tenant, 12)
        admin(state, "docs", "add", tenant, str(corpus))
    keys = {}
    for account, (tenant, eps, r) in ACCOUNTS.items():
        admin(state, "account", "create", tenant, account, "--eps", eps, "--delta", "1e-6",
                  "--rate-limit", r)  # fmt: skip
        keys[account] = admin(state, "key", "create", account).split()[-1]
    admin(state, "window", "open")
    server = module_server_factory(state, workers=2, extra=MANY_AT_ONCE)
    return {"state": state, "root": root, "url": server.url, "keys": keys}


def _post(service: dict[str, Any], account: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        service["url"] + path,
        json=body,
        headers={"Authorization": f"Bearer {service['keys'][account]}"},
        timeout=120,
    )


def _used(service: dict[str, Any], account: str) -> int:
    r = httpx.get(service["url"] + "/v1/budget", timeout=60,
                  headers={"Authorization": f"Bearer {service['keys'][account]}"})  # fmt: skip
    assert r.status_code == 200, r.text
    return int(r.json()["used"])


def test_a_voting_account_gets_answers_never_documents_and_its_cap(service) -> None:  # type: ignore[no-untyped-def]
    refused = _post(service, "v1", "/v1/retrieve", {"query": "who has asthma?"})
    assert refused.status_code == 400 and "DP-voted answers" in refused.json()["detail"]
    with_k = _post(service, "v1", "/v1/answer", {"query": "who has asthma?", "k": 1})
    assert with_k.status_code == 400 and "'k'" in with_k.json()["detail"]
    assert _used(service, "v1") == 0
    for n in (1, 2):
        got = _post(service, "v1", "/v1/answer", {"query": "which patient has asthma?"})
        assert got.status_code == 200, got.text
        body = got.json()
        assert isinstance(body["answer"], str)
        assert body["documents"] == []
        # an audited dp_vote answer: its receipt names the answer, never the documents
        receipt = Receipt.from_dict(body["receipt"])
        assert receipt.answer == body["answer"] and receipt.documents == ()
        com = httpx.get(f"{service['url']}/v1/audit/windows/W1/commitments", timeout=60).json()
        tenant = com["accounts"][receipt.account]  # the tenant's pseudonym
        assert receipt.seq == n and receipt.opened_topk(tenant) == receipt.topk_hash
        assert body["privacy"]["epsilon"] == 4.0 and body["privacy"]["mechanism"] == "dp_vote"
        assert 0 < body["privacy"]["epsilon_vote"] <= 4.0
        assert body["budget"] == {
            "window_id": "W1", "tenant": "vote", "mode": "dp_vote", "used": n, "answers": 2,
            "remaining": 2 - n, "epsilon_per_answer": 4.0, "epsilon_spent": 4.0 * n,
            "failures": {"charged": 0, "free": 0},
        }  # fmt: skip
    over = _post(service, "v1", "/v1/answer", {"query": "which patient has gout?"})
    assert over.status_code == 429 and over.headers["Retry-After"]
    assert _used(service, "v1") == 2


def test_log_probabilities_only_where_the_tenant_allows_them(service) -> None:  # type: ignore[no-untyped-def]
    chat = {"model": "ragprivacy", "messages": [{"role": "user", "content": "who has asthma?"}]}
    before = _used(service, "a1")
    no = _post(service, "a1", "/v1/chat/completions", {**chat, "logprobs": True})
    assert no.status_code == 400 and "log-probabilities" in no.json()["detail"]
    assert _used(service, "a1") == before
    yes = _post(service, "alice", "/v1/chat/completions", {**chat, "logprobs": True})
    assert yes.status_code == 200, yes.text
    choice = yes.json()["choices"][0]
    tokens = [t["token"] for t in choice["logprobs"]["content"]]
    assert tokens and "".join(tokens) == choice["message"]["content"].replace(" ", "")
    assert all(t["logprob"] <= 0 for t in choice["logprobs"]["content"])
    plain = _post(service, "alice", "/v1/chat/completions", chat)
    assert plain.json()["choices"][0]["logprobs"] is None
    top = _post(service, "alice", "/v1/chat/completions", {**chat, "logprobs": True,
                                                           "top_logprobs": 2})  # fmt: skip
    assert top.status_code == 400


def test_concurrent_murag_answers_never_overspend_a_document(service) -> None:  # type: ignore[no-untyped-def]
    """Two accounts, two workers, 40 answers at once on one topic: every document's
    filter (M·ε_q = 6) ends within its budget, and MURAG-ADA answers through the chat."""

    def ask(i: int) -> httpx.Response:
        return _post(service, ("m1", "m2")[i % 2], "/v1/answer",
                     {"query": f"which patient has asthma, visit {i}?"})  # fmt: skip

    with ThreadPoolExecutor(max_workers=40) as pool:
        answers = list(pool.map(ask, range(40)))
    assert {r.status_code for r in answers} == {200}, {r.text[:200] for r in answers}
    assert _used(service, "m1") + _used(service, "m2") == 40
    # every answer is a record of the window: its receipt names the answer, no documents
    assert all(Receipt.from_dict(r.json()["receipt"]).documents == () for r in answers)
    chat = {"model": "ragprivacy", "messages": [{"role": "user", "content": "who has diabetes?"}]}
    ada = _post(service, "a1", "/v1/chat/completions", chat)
    assert ada.status_code == 200, ada.text
    extra = ada.json()["ragprivacy"]
    assert extra["receipt"] is not None and extra["privacy"]["mechanism"] == "murag_ada"
    assert extra["privacy"]["document_budget"] == 8.0


def test_the_audited_window_verifies_beside_voting_tenants(service, tmp_path, admin) -> None:  # type: ignore[no-untyped-def]
    got = _post(service, "alice", "/v1/retrieve", {"query": "who has gout?"})
    assert got.status_code == 200
    voted = _post(service, "v2", "/v1/answer", {"query": "who has gout?"})
    assert voted.status_code == 200, voted.text
    commitments = httpx.get(f"{service['url']}/v1/audit/windows/W1/commitments", timeout=60)
    # every account is audited, the voting ones with their tenant's vote and MURAG/-ADA
    # ones with their screening and committed filters; all named by pseudonyms
    accounts = commitments.json()["accounts"]
    assert len(accounts) == len(ACCOUNTS) and not set(ACCOUNTS) & set(accounts)
    assert {got.json()["receipt"]["account"], voted.json()["receipt"]["account"]} <= set(accounts)
    settings = sorted(commitments.json()["voting"].values(), key=lambda v: v["mode"])
    assert [v["mode"] for v in settings] == ["dp_vote", "murag", "murag_ada"]
    assert all(v["slots"] == 2 for v in settings) and settings[1]["tau"] == 0
    assert len(commitments.json()["filters"]) == 2
    admin(service["state"], "window", "close", "--export-auditor", str(tmp_path / "aud"))
    # closing settled the MURAG charges into the tenant's lifetime filters: the 40
    # answers on one topic used its documents up (M·ε_q = 6), and not more
    ids = [
        json.loads(line)["id"] for line in (service["root"] / "mu.jsonl").read_text().splitlines()
    ]
    spent = SqliteBudgetStore(service["state"] / "filters" / "mu.sqlite").spent(ids)[:, 0]
    assert np.all(spent <= 6.0 + 1e-9) and spent.max() == pytest.approx(6.0), spent
    # alice's other answers (earlier tests of this module) went without kept receipts, so
    # this one receipt is checked alone: the unasked-record rule holds an account that
    # submits receipts to all of them
    window, package = fetch_window(service["url"]), load_window(tmp_path / "aud")[2]
    verdict = Verifier().verify(window, [], package)
    assert verdict.passed, verdict.failures[:3]
    votes = [w for w in package.witnesses.values() if w.vote is not None]
    assert len(votes) >= 1 and verdict.records_checked == verdict.records
    # v2's one answer, receipted: its record is the receipt's, and the vote replays
    mine = Receipt.from_dict(voted.json()["receipt"])
    assert Verifier().verify(window, [mine], package).passed
    receipt = Receipt.from_dict(got.json()["receipt"])
    partial = Verifier().verify(window, [receipt], package)
    assert {f.check for f in partial.failures} == {"receipt_consistency"}
    assert all("never asked for" in f.detail for f in partial.failures)
    assert not any(f"record {receipt.position} " in f.detail for f in partial.failures)
