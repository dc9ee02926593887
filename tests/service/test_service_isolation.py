"""Tenant isolation over HTTP: two tenants (``clinic``: alice, bob; ``firm``: carol, dave) on
one running service, whose documents share their words and one id (``shared-0``), each text
carrying a canary that no query contains.

* Every authenticated endpoint × every way of presenting a key that is not one's own valid
  key (none, another scheme, malformed, unknown, revoked, another account's key id with
  one's secret, an account that is not in the open window) is refused with one body that
  tells the cases apart in nothing, and spends no one's budget.
* Over many queries through every endpoint — the other tenant's texts and ids among them,
  and requests that name another account or tenant in the body or headers — an account
  gets only its own tenant's documents, its own receipts and its own budget: every leak is
  counted, and the count must be 0. The public audit endpoints carry no document id, text
  or canary either.
* An unknown window id on every public audit endpoint is a 404 with the very body of a
  missing one.
"""

from __future__ import annotations

import itertools
import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from ragprivacy.service.app import error_body

QUERIES_PER_ACCOUNT = 36  # x 4 accounts, through retrieve, answer and chat in turn
AUTHENTICATED = [
    ("POST", "/v1/retrieve", {"query": "which patient has asthma?"}),
    ("POST", "/v1/answer", {"query": "which patient has asthma?"}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "asthma?"}]}),
    ("GET", "/v1/budget", None),
]
UNAUTHORIZED = error_body(401, "Invalid API key.", "auth")
NOT_FOUND = error_body(404, "Not found.", "not_found")


@pytest.fixture(scope="module")
def service(tenants_service_factory):  # type: ignore[no-untyped-def]
    # the module probes with hundreds of bad keys on purpose, from one address: the limit
    # on failed key checks (tested on its own) would answer them 429 before any hash
    unlimited = ("--auth-failures-per-client", "1000000", "--auth-failures-overall", "1000000")
    return tenants_service_factory(rate_limit=QUERIES_PER_ACCOUNT + 8, extra=unlimited)


@pytest.fixture(scope="module")
def http(service):  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=service.url, timeout=60) as c:
        yield c


def request(http, method: str, path: str, body: Any, headers: Any = None) -> httpx.Response:  # type: ignore[no-untyped-def]
    return http.request(method, path, json=body, headers=headers)


def budgets(http, service) -> dict[str, int]:  # type: ignore[no-untyped-def]
    out = {}
    for account in service.keys:
        r = http.get("/v1/budget", headers=service.headers(account))
        assert r.status_code == 200, r.text
        out[account] = r.json()["used"]
    return out


def ledger_size(http, window: str = "W1") -> int:  # type: ignore[no-untyped-def]
    return len(http.get(f"/v1/audit/windows/{window}/records").json())


def bad_credentials(service) -> dict[str, list[tuple[str, str]]]:  # type: ignore[no-untyped-def]
    """Every way of presenting something other than one's own valid key, as header lists."""
    alice, carol = service.keys["alice"], service.keys["carol"]
    alice_secret = alice.split("_", 2)[2]
    carol_id = carol.split("_", 2)[1]
    return {
        "no header": [],
        "empty": [("Authorization", "")],
        "scheme only": [("Authorization", "Bearer")],
        "basic scheme": [("Authorization", f"Basic {alice}")],
        "key without scheme": [("Authorization", alice)],
        "not a key": [("Authorization", "Bearer sk-0123456789")],
        "unknown key id": [("Authorization", "Bearer rpk_000000000000_" + alice_secret)],
        "truncated key": [("Authorization", f"Bearer {alice[:-1]}")],
        "key with one character changed": [
            ("Authorization", f"Bearer {alice[:-1]}{'A' if alice[-1] != 'A' else 'B'}")
        ],
        "revoked key of the same account": [
            ("Authorization", f"Bearer {service.revoked['alice']}")
        ],
        "revoked key of the other tenant": [
            ("Authorization", f"Bearer {service.revoked['carol']}")
        ],
        "other tenant's key id, own secret": [
            ("Authorization", f"Bearer rpk_{carol_id}_{alice_secret}")
        ],
        "key in another header": [("X-API-Key", alice)],
        "key as a query parameter": [("X-Ignored", "1")],  # sent as ?api_key= below
    }


def test_every_bad_key_on_every_endpoint_gets_one_body_and_spends_nothing(http, service) -> None:  # type: ignore[no-untyped-def]
    before, size = budgets(http, service), ledger_size(http)
    leaks = []
    bodies = set()
    for (method, path, body), (case, headers) in itertools.product(
        AUTHENTICATED, bad_credentials(service).items()
    ):
        params = {"api_key": service.keys["alice"]} if "query parameter" in case else None
        r = http.request(method, path, json=body, headers=headers, params=params)
        if r.status_code != 401 or r.json() != UNAUTHORIZED:
            leaks.append(f"{method} {path} [{case}] -> {r.status_code} {r.text[:200]}")
        if r.headers.get("WWW-Authenticate") != "Bearer":
            leaks.append(f"{method} {path} [{case}]: WWW-Authenticate {r.headers}")
        bodies.add(r.content)
    assert leaks == []
    assert len(bodies) == 1  # byte for byte: nothing tells revoked, unknown or foreign apart
    assert budgets(http, service) == before
    assert ledger_size(http) == size


def test_an_account_not_in_the_open_window_is_refused_and_spends_nothing(http, service) -> None:  # type: ignore[no-untyped-def]
    before, size = budgets(http, service), ledger_size(http)
    for method, path, body in AUTHENTICATED:
        r = request(http, method, path, body, {"Authorization": f"Bearer {service.late}"})
        assert r.status_code == 409, (path, r.text)
        detail = r.json()["detail"]
        assert "\n" not in detail and "firm" not in detail and "carol" not in detail
    assert budgets(http, service) == before and ledger_size(http) == size


def _foreign_queries(service, tenant: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Queries aimed at the *other* tenant's documents: their texts (without the canary),
    their ids, and requests that name another account or tenant."""
    other = next(t for t in service.documents if t != tenant)
    others = list(service.documents[other].items())
    out: list[dict[str, Any]] = []
    for n in range(QUERIES_PER_ACCOUNT):
        doc_id, text = others[n % len(others)]
        plain = text.split(" (")[0]
        out.append(
            [
                {"query": plain},
                {"query": f"{doc_id} {plain}"},
                {"query": f"show document {doc_id} of tenant {other}"},
                {"query": "shared-0"},
            ][n % 4]
        )
    return out


def _send(http, service, account: str, n: int, body: dict[str, Any]) -> tuple[str, httpx.Response]:  # type: ignore[no-untyped-def]
    """The n-th query of ``account``, through retrieve, answer and chat in turn, some with
    another account or tenant named in the body or the headers."""
    other_account = next(
        a for a in service.keys if service.tenant_of[a] != service.tenant_of[account]
    )
    headers = service.headers(account)
    if n % 5 == 4:
        headers = {
            **headers,
            "X-Account": other_account,
            "X-Tenant": service.tenant_of[other_account],
        }
    kind = ("retrieve", "answer", "chat")[n % 3]
    if kind == "chat":
        chat = {"model": "ragprivacy", "messages": [{"role": "user", "content": body["query"]}]}
        if n % 2:  # the chat ignores fields it does not use: these must change nothing
            chat |= {"user": other_account, "account": other_account, "tenant": "x"}
        return kind, http.post("/v1/chat/completions", json=chat, headers=headers)
    return kind, http.post(f"/v1/{kind}", json=body, headers=headers)


def test_no_account_ever_sees_another_tenant_s_documents(http, service) -> None:  # type: ignore[no-untyped-def]
    leaks: list[str] = []
    start = budgets(http, service)
    served = {a: 0 for a in service.keys}
    receipts: dict[str, list[dict[str, Any]]] = {a: [] for a in service.keys}
    for account in service.keys:
        tenant = service.tenant_of[account]
        own = service.documents[tenant]
        foreign_canaries = [c for t, cs in service.canaries.items() if t != tenant for c in cs]
        foreign_ids = [i for t, d in service.documents.items() if t != tenant for i in d]
        foreign_ids = [i for i in foreign_ids if i not in own]  # "shared-0" is both tenants'
        for n, body in enumerate(_foreign_queries(service, tenant)):
            kind, r = _send(http, service, account, n, body)
            where = f"{account} {kind} {json.dumps(body)}"
            if r.status_code != 200:
                leaks.append(f"{where} -> {r.status_code} {r.text[:200]}")
                continue
            served[account] += 1
            raw = r.text
            leaks += [f"{where}: canary {c}" for c in foreign_canaries if c in raw]
            sent = json.dumps(body)  # an id the account sent itself may come back in the answer
            leaks += [f"{where}: id {i}" for i in foreign_ids if f'"{i}"' in raw and i not in sent]
            out = r.json()
            extra = out["ragprivacy"] if kind == "chat" else out
            for d in out.get("documents", []):
                if own.get(d["id"]) != d["text"]:  # another tenant's id, or its text
                    leaks.append(f"{where}: document {d}")
            if kind != "chat" and len(out["documents"]) != (3 if tenant == "clinic" else 2):
                leaks.append(f"{where}: {len(out['documents'])} documents, not the tenant's K")
            if kind == "chat" and "documents" in extra:
                leaks.append(f"{where}: the chat answer carries documents")
            answer = out.get("answer") or (out.get("choices") or [{}])[0].get("message", {})
            text = answer if isinstance(answer, str) else answer.get("content", "")
            if any(c in text for c in foreign_canaries):
                leaks.append(f"{where}: the answer quotes the other tenant")
            if extra["receipt"]["holder"] != account:
                leaks.append(f"{where}: receipt of {extra['receipt']['holder']}")
            if extra["budget"]["used"] != start[account] + served[account]:
                leaks.append(f"{where}: budget {extra['budget']} after {served[account]} answers")
            receipts[account].append(extra["receipt"])
    assert leaks == [], f"{len(leaks)} leaks:\n" + "\n".join(leaks[:20])
    assert served == {a: QUERIES_PER_ACCOUNT for a in service.keys}
    # Each account's budget is its own answers alone, and so are its ledger records.
    assert budgets(http, service) == {a: start[a] + served[a] for a in served}
    records = [json.loads(r) for r in http.get("/v1/audit/windows/W1/records").json()]
    tenants: dict[str, set[str]] = {}  # a tenant's name → the pseudonyms its records carry
    for account, mine in receipts.items():
        alias = {r["account"] for r in mine}  # one pseudonym an account in a window
        assert len(alias) == 1 and {r["holder"] for r in mine} == {account}
        positions = {r["position"] for r in mine}
        assert {i for i, rec in enumerate(records) if rec["account"] in alias} == positions
        tenants.setdefault(service.tenant_of[account], set()).update(
            records[r["position"]]["tenant"] for r in mine
        )
    assert all(len(v) == 1 for v in tenants.values())  # one pseudonym a tenant
    assert len(set.union(*tenants.values())) == len(tenants)  # and two tenants two


def test_the_public_audit_carries_no_document(http, service) -> None:  # type: ignore[no-untyped-def]
    """After queries from every account, nothing public names a document, its text or its
    canary (the ledger holds hashes, the commitments digests)."""
    for account in service.keys:
        r = http.post("/v1/retrieve", json={"query": "asthma"}, headers=service.headers(account))
        assert r.status_code == 200, r.text
    size = ledger_size(http)
    public = [
        http.get("/v1/audit/windows"),
        http.get("/v1/audit/windows/W1/commitments"),
        http.get("/v1/audit/windows/W1/tree-head"),
        http.get("/v1/audit/windows/W1/records"),
        http.get("/v1/audit/windows/W1/proofs/inclusion", params={"position": 0, "size": size}),
        http.get("/v1/audit/windows/W1/proofs/consistency", params={"old": 1, "new": size}),
    ]
    assert all(r.status_code == 200 for r in public), [r.text for r in public]
    raw = "\n".join(r.text for r in public)
    leaks = []
    for tenant, docs in service.documents.items():
        leaks += [c for c in service.canaries[tenant] if c in raw]
        leaks += [i for i in docs if f'"{i}"' in raw]
        leaks += [t for t in docs.values() if t.split(" (")[0] in raw]
    assert leaks == []


UNKNOWN_WINDOWS = [
    "nope", "W0", "W2", "W01", "w1", "W1 ", " W1", "W1\t", "1", "W1.sqlite", "W1%00",
    "' OR '1'='1", "W1; DROP TABLE windows", "..", "Ｗ１", "x" * 300, "W1%25",
]  # fmt: skip
AUDIT_ENDPOINTS = [
    ("commitments", None),
    ("tree-head", None),
    ("records", None),
    ("records", {"start": 0, "end": 1}),
    ("proofs/inclusion", {"position": 0, "size": 1}),
    ("proofs/consistency", {"old": 0, "new": 1}),
    ("coalition", None),
]


def test_an_unknown_window_on_every_audit_endpoint_is_the_one_404(http, service) -> None:  # type: ignore[no-untyped-def]
    missing = http.get("/v1/audit/windows/W1/coalition")  # W1 is open: no claim yet
    assert missing.status_code == 404 and missing.json() == NOT_FOUND
    differ = []
    for window, (endpoint, params) in itertools.product(UNKNOWN_WINDOWS, AUDIT_ENDPOINTS):
        quoted = quote(window, safe="").replace(".", "%2E")  # no dot segment to normalize
        r = http.get(f"/v1/audit/windows/{quoted}/{endpoint}", params=params)
        if (r.status_code, r.content, r.headers.get("content-type")) != (
            404, missing.content, missing.headers.get("content-type"),
        ):  # fmt: skip
            differ.append(f"{window!r}/{endpoint} -> {r.status_code} {r.text[:120]}")
    assert differ == []


def test_a_window_id_with_a_slash_gets_the_same_404_body(http, service) -> None:  # type: ignore[no-untyped-def]
    """An id the router cannot match (an encoded '/') is unknown too: the one 404 body."""
    missing = http.get("/v1/audit/windows/nope/commitments")
    differ = []
    for window in ["a%2Fb", "W1%2F..", "%2E%2E%2FW1"]:
        for endpoint, params in AUDIT_ENDPOINTS:
            r = http.get(f"/v1/audit/windows/{window}/{endpoint}", params=params)
            if (r.status_code, r.content) != (404, missing.content):
                differ.append(f"{window}/{endpoint} -> {r.status_code} {r.text[:120]}")
    assert differ == []
