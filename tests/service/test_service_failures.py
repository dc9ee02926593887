"""A failure is an answer, through the real service and an upstream that fails on data.

The upstream is an OpenAI-compatible server on 127.0.0.1 that, like every hosted model,
answers HTTP 400 above a context length — and, like a content filter, when the prompt
holds a flagged word. Both failures depend on the retrieved documents. The attacks are
the ones that read such a service for free when failures were refunded:

* the vote-membership probe: a ``dp_vote`` tenant holding a long target record fails
  where one without it answers; the attacker's advantage must stay within what the ε it
  is charged allows, and every request that reached retrieval must be charged;
* the free-retrieval loop: a ``noisy_topk`` account repeats queries whose answers fail;
  each failure must cost one query of its rate limit (a ledger record), so it cannot
  make more retrievals than its limit.

A generator that was never reached is the one failure that costs nothing, and only a
few times per account and window; a query whose prompt could overflow the context is
refused before retrieval, for nothing.
"""

from __future__ import annotations

import json
import math
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._chat_endpoint import Endpoint, Reply

from ragprivacy.service.state import FREE_FAILURES

LIMIT = 1500  # the upstream's context, in characters of the prompt it is sent
FLAGGED = "FORBIDDEN"  # the upstream's content filter refuses prompts holding it
EPS_Q = 2.0
RATE = 10
DOC_BUDGET = 256
CONTEXT = 1400
SHORT = [f"record {i}: the patient has {t} and visit {i}" for i, t in
         enumerate(["asthma", "diabetes", "fracture", "migraine", "anemia", "eczema"])]  # fmt: skip
TARGET = "Zelda Quorn's diagnosis and treatment notes. " * 70  # 3,150 characters


def _upstream(body: dict[str, Any]) -> Reply:
    text = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
    if len(text) > LIMIT:
        return 400, {"error": {"message": f"context length exceeded: {len(text)} > {LIMIT}"}}
    if FLAGGED in text:
        return 400, {"error": {"message": "the prompt was flagged by the content filter"}}
    top = [{"token": "alpha", "logprob": -0.1}, {"token": "</s>", "logprob": -2.4}]
    if "prompt" in body:  # /completions: a continuation's next token
        return 200, {"choices": [{"text": "alpha", "logprobs": {"top_logprobs": [
            {t["token"]: t["logprob"] for t in top}]}}]}  # fmt: skip
    content = [{"token": "alpha", "logprob": -0.1, "top_logprobs": top}]
    return 200, {"choices": [{"message": {"role": "assistant", "content": "alpha"},
                              "logprobs": {"content": content}}]}  # fmt: skip


def _corpus(path: Path, texts: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in texts.items()))
    return path


@pytest.fixture(scope="module")
def service(tmp_path_factory, admin, module_server_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("failures")
    state = root / "state"
    upstream = Endpoint(_upstream)
    short = {f"s{i}": t for i, t in enumerate(SHORT)}
    flagged = {f"f{i}": f"{FLAGGED} note {i}: the patient has asthma" for i in range(3)}
    corpora = {
        "members": {**short, "target": TARGET},
        "others": dict(short),
        "docs": {**short, **flagged, "target": TARGET},
    }
    for tenant, texts in corpora.items():
        mode = ["--mode", "dp_vote", "--eps-q", str(EPS_Q)] if tenant != "docs" else []
        admin(state, "tenant", "create", tenant, "--k", "2", *mode)
        admin(state, "docs", "add", tenant, str(_corpus(root / f"{tenant}.jsonl", texts)))
    keys = {}
    for tenant, account, eps in [("members", "m", 40), ("others", "o", 40), ("docs", "n", 4)]:
        admin(state, "account", "create", tenant, account, "--eps", str(eps), "--delta",
              "1e-6", "--rate-limit", str(RATE))  # fmt: skip
        keys[account] = admin(state, "key", "create", account).split()[-1]
    admin(state, "window", "open")
    server = module_server_factory(state, extra=(
        "--generator", f"openai:m@{upstream.url}", "--doc-tokens", str(DOC_BUDGET),
        "--context-tokens", str(CONTEXT)))  # fmt: skip
    yield {"url": server.url, "keys": keys, "upstream": upstream}
    upstream.close()


def _ask(service: dict[str, Any], account: str, query: str) -> httpx.Response:
    return httpx.post(
        f"{service['url']}/v1/answer",
        json={"query": query},
        headers={"Authorization": f"Bearer {service['keys'][account]}"},
        timeout=120,
    )


def _budget(service: dict[str, Any], account: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {service['keys'][account]}"}
    out: dict[str, Any] = httpx.get(f"{service['url']}/v1/budget", headers=headers).json()
    return out


def test_the_vote_membership_probe_gains_nothing_it_does_not_pay_for(service) -> None:  # type: ignore[no-untyped-def]
    """With refunded failures the member's tenant failed 10/10 for 0 ε and the other
    answered 10/10 (advantage 1.0 where ε = 2 allows 0.76)."""
    outcomes: dict[str, list[int]] = {}
    for account in ("m", "o"):
        codes = [_ask(service, account, f"What is Zelda Quorn's diagnosis? {n}").status_code
                 for n in range(6)]  # fmt: skip
        assert set(codes) <= {200, 502}, codes
        outcomes[account] = codes
        # every request that reached retrieval was charged, failed or not
        budget = _budget(service, account)
        assert budget["used"] == len(codes)
        assert budget["epsilon_spent"] == pytest.approx(EPS_Q * len(codes))
    fail = {a: sum(c != 200 for c in codes) / len(codes) for a, codes in outcomes.items()}
    advantage = abs(fail["m"] - fail["o"])
    assert advantage <= math.tanh(EPS_Q / 2)  # the most one ε_q-DP answer can give
    # the prompt's size no longer depends on the documents: the target is cut to the
    # budget, so the member's tenant answers as the other does
    assert outcomes["m"] == outcomes["o"] == [200] * 6


def test_the_free_retrieval_loop_pays_for_every_failure(service) -> None:  # type: ignore[no-untyped-def]
    """A content filter fails on some documents whatever their length: each failure is a
    ledger record, so the loop stops at the rate limit."""
    records = httpx.get(f"{service['url']}/v1/audit/windows/W1/records").json()
    responses = [_ask(service, "n", f"{FLAGGED} note on asthma {n}") for n in range(3 * RATE)]
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 502, 429}, codes
    for r in responses:
        if r.status_code == 502:  # says it was charged; quotes neither upstream nor document
            detail = r.json()["detail"]
            assert "charged like an answer" in detail
            assert FLAGGED not in detail and "filter" not in detail and "note" not in detail
    reached = [c for c in codes if c != 429]
    assert len(reached) == RATE and 502 in reached  # the filter did fail some answers
    assert codes[RATE:] == [429] * (2 * RATE)  # refused: the limit counts the failures
    budget = _budget(service, "n")
    assert budget["used"] == RATE and budget["remaining"] == 0
    assert budget["failures"] == {"charged": reached.count(502), "free": 0}
    after = httpx.get(f"{service['url']}/v1/audit/windows/W1/records").json()
    assert len(after) - len(records) == RATE  # one record per charged request


def test_a_prompt_that_could_overflow_is_refused_before_retrieval(service) -> None:  # type: ignore[no-untyped-def]
    for account in ("o", "n"):
        before = _budget(service, account)
        response = _ask(service, account, "why " * 300)
        assert response.status_code == 400
        assert "Nothing was read or spent" in response.json()["detail"]
        assert _budget(service, account) == before


def test_a_generator_never_reached_is_free_only_a_few_times(
    tmp_path, admin, server_factory
) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    admin(state, "tenant", "create", "docs", "--k", "2")
    admin(
        state,
        "docs",
        "add",
        "docs",
        str(_corpus(tmp_path / "d.jsonl", {"a": SHORT[0], "b": SHORT[1]})),
    )
    admin(state, "tenant", "create", "votes", "--k", "2", "--mode", "dp_vote", "--eps-q", "2")
    admin(state, "docs", "add", "votes", str(_corpus(tmp_path / "v.jsonl", {"c": SHORT[2]})))
    keys = {}
    for tenant, account in (("docs", "n"), ("votes", "v")):
        admin(state, "account", "create", tenant, account, "--eps", "40", "--delta", "1e-6",
              "--rate-limit", "20")  # fmt: skip
        keys[account] = admin(state, "key", "create", account).split()[-1]
    admin(state, "window", "open")
    with socket.socket() as held:  # bound, never listening: connections there are refused
        held.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{held.getsockname()[1]}/v1"
        server = server_factory(state, extra=("--generator", f"openai:m@{dead}"))

        def ask(account: str) -> list[httpx.Response]:  # one request after the other
            headers = {"Authorization": f"Bearer {keys[account]}"}
            return [
                httpx.post(f"{server.url}/v1/answer", json={"query": f"asthma {n}"},
                           headers=headers, timeout=120)
                for n in range(FREE_FAILURES + 3)
            ]  # fmt: skip

        # the two accounts at once: each request waits out the generator's retries
        with ThreadPoolExecutor(2) as pool:
            asked = dict(zip(("n", "v"), pool.map(ask, ("n", "v"))))
        for account, answers in asked.items():  # a noisy_topk and an audited dp_vote account
            headers = {"Authorization": f"Bearer {keys[account]}"}
            assert [r.status_code for r in answers] == [503] * FREE_FAILURES + [502] * 3
            # a charged failure's record was appended: the account keeps its receipt
            assert all(r.json()["receipt"]["holder"] == account for r in answers[-3:])
            budget = httpx.get(f"{server.url}/v1/budget", headers=headers).json()
            assert budget["used"] == 3
            assert budget["failures"] == {"charged": 3, "free": FREE_FAILURES}
        records = httpx.get(f"{server.url}/v1/audit/windows/W1/records").json()
        assert len(records) == 6  # the free failures appended nothing
