"""The service end to end: admin CLI, `ragprivacy serve` on 127.0.0.1, accounts over HTTP,
and a verifier outside it (`ragprivacy audit verify --url`)."""

from __future__ import annotations

import functools
import json
import math
import time
from types import SimpleNamespace

import httpx
import pytest

from ragprivacy.cli import main
from ragprivacy.service import Client
from ragprivacy.service.app import error_body

# generous: under a loaded 2-core machine a cold worker's first request takes seconds
HTTP = SimpleNamespace(
    post=functools.partial(httpx.post, timeout=60), get=functools.partial(httpx.get, timeout=60)
)


@pytest.fixture()
def two_tenants(tmp_path, admin, corpus_file):  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "3")
    admin(state, "tenant", "create", "firm", "--k", "2")
    admin(state, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "clinic", 60)))
    admin(state, "docs", "add", "firm", str(corpus_file(tmp_path / "f.jsonl", "firm", 30)))
    keys = {}
    for tenant, account in [("clinic", "alice"), ("clinic", "bob"), ("firm", "carol")]:
        admin(state, "account", "create", tenant, account, "--eps", "4", "--delta", "1e-6",
              "--rate-limit", "5")  # fmt: skip
        keys[account] = admin(state, "key", "create", account).strip().splitlines()[-1]
    admin(state, "window", "open")
    return state, keys


def test_accounts_query_and_an_outside_verifier_passes_the_window(
    tmp_path, two_tenants, server_factory, admin, capsys
) -> None:
    state, keys = two_tenants
    server = server_factory(state)
    receipts = tmp_path / "receipts"
    with Client(server.url, keys["alice"], receipts_dir=receipts) as alice:
        got = alice.retrieve("which patient has asthma?")
        assert len(got["documents"]) == 3
        assert all(d["id"].startswith("clinic-") for d in got["documents"])
        assert got["budget"] == {
            "rate_limit": 5, "used": 1, "remaining": 4, "epsilon_acc": 4.0, "delta_acc": 1e-6,
        }  # fmt: skip
        assert 0 < got["privacy"]["epsilon"] <= got["privacy"]["cumulative_epsilon"] <= 4.0
        ans = alice.answer("who has diabetes?", k=2)
        assert isinstance(ans["answer"], str) and len(ans["documents"]) == 2
    with Client(server.url, keys["carol"], receipts_dir=receipts) as carol:
        docs = carol.retrieve("visit 3")["documents"]
        assert len(docs) == 2 and all(d["id"].startswith("firm-") for d in docs)
    assert len((receipts / "receipts.jsonl").read_text().splitlines()) == 3
    admin(state, "window", "close", "--export-auditor", str(tmp_path / "auditor"))
    capsys.readouterr()
    code = main(["audit", "verify", "--url", server.url, "--receipts", str(receipts),
                 "--auditor", str(tmp_path / "auditor"), "--json"])  # fmt: skip
    verdict = json.loads(capsys.readouterr().out)
    assert code == 0 and verdict["verdict"] == "PASS", verdict["failures"][:3]
    assert verdict["epsilon_audit"] == pytest.approx(8.0)  # √k_max · ε_acc, k_max = 4


def test_refusals_are_4xx_and_spend_nothing(two_tenants, server_factory, admin) -> None:
    state, keys = two_tenants
    server = server_factory(state)
    h = {"Authorization": f"Bearer {keys['bob']}"}
    url = f"{server.url}/v1/retrieve"
    assert HTTP.post(url, json={"query": "x"}).status_code == 401
    bad = {"Authorization": "Bearer rpk_000000000000_" + "A" * 43}
    r = HTTP.post(url, json={"query": "x"}, headers=bad)
    assert r.status_code == 401 and r.json() == error_body(401, "Invalid API key.", "auth")
    assert HTTP.post(url, json={"query": ""}, headers=h).status_code == 422
    assert HTTP.post(url, json={"query": "x", "extra": 1}, headers=h).status_code == 422
    assert HTTP.post(url, content=b"{not json", headers=h).status_code == 422
    assert HTTP.post(url, json={"query": "x" * 70_000}, headers=h).status_code == 413
    assert HTTP.post(url, json={"query": "x", "k": 9}, headers=h).status_code == 400
    spaced = {"Authorization": f"Bearer  {keys['bob']}"}  # exactly one space, as RFC 6750
    assert HTTP.post(url, json={"query": "x"}, headers=spaced).status_code == 401
    # no redirect built from Host:, no API docs unless asked, nothing for caches to keep
    slash = HTTP.post(url + "/", json={"query": "x"}, headers={**h, "Host": "evil.example"})
    assert slash.status_code == 404 and "location" not in slash.headers
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert HTTP.get(server.url + path).status_code == 404
    assert HTTP.get(f"{server.url}/healthz").json() == {"status": "ok"}
    assert HTTP.get(f"{server.url}/readyz").json() == {"status": "ready", "window_id": "W1"}
    budget = HTTP.get(f"{server.url}/v1/budget", headers=h).json()
    assert budget["used"] == 0  # none of the refused requests was charged
    for _ in range(5):
        ok = HTTP.post(url, json={"query": "asthma"}, headers=h)
        assert ok.status_code == 200 and ok.headers["cache-control"] == "no-store"
    over = HTTP.post(url, json={"query": "asthma"}, headers=h)
    assert over.status_code == 429 and over.headers["Retry-After"]
    assert over.headers["cache-control"] == "no-store"
    assert HTTP.get(f"{server.url}/v1/budget", headers=h).json()["used"] == 5
    records = HTTP.get(f"{server.url}/v1/audit/windows/W1/records").json()
    assert len(records) == 5  # the refused requests appended nothing
    key_id = keys["alice"].split("_")[1]
    admin(state, "key", "revoke", key_id)
    r = HTTP.post(url, json={"query": "x"}, headers={"Authorization": f"Bearer {keys['alice']}"})
    assert r.status_code == 401
    missing = HTTP.get(f"{server.url}/v1/audit/windows/nope/commitments")
    assert missing.status_code == 404 and missing.json() == error_body(
        404, "Not found.", "not_found"
    )
    assert HTTP.get(f"{server.url}/v1/audit/windows/W1/coalition").json() == missing.json()


def test_a_coalition_over_http_fails_the_cap_and_one_within_it_passes(
    tmp_path, corpus_file, admin, server_factory, capsys
) -> None:
    """The k-account collusion attack through k real accounts of one tenant: the verifier
    reports PASS for k ≤ k_max and FAIL (policy cap) above it."""
    for k, verdict_wanted in [(4, "PASS"), (5, "FAIL")]:
        state = tmp_path / f"state-{k}"
        admin(state, "tenant", "create", "clinic", "--k", "3")
        admin(state, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "c", 40)))
        keys = []
        for i in range(k):
            admin(state, "account", "create", "clinic", f"colluder-{i}", "--eps", "1",
                  "--delta", "1e-6", "--rate-limit", "3")  # fmt: skip
            keys.append(admin(state, "key", "create", f"colluder-{i}").strip().splitlines()[-1])
        admin(state, "window", "open")
        server = server_factory(state)
        for key in keys:  # every colluder probes the same target
            with Client(server.url, key) as c:
                for _ in range(3):
                    c.retrieve("does record 7 say the patient has fracture?")
        admin(state, "window", "close", "--export-auditor", str(tmp_path / f"aud-{k}"))
        capsys.readouterr()
        code = main(["audit", "verify", "--url", server.url, "--auditor",
                     str(tmp_path / f"aud-{k}"), "--json"])  # fmt: skip
        verdict = json.loads(capsys.readouterr().out)
        assert verdict["verdict"] == verdict_wanted, verdict["failures"][:2]
        assert (code == 0) == (verdict_wanted == "PASS")
        if verdict_wanted == "FAIL":
            assert verdict["failed_check"] == "policy_cap"
        server.stop()


def test_a_flood_of_bad_keys_is_refused_before_hashing_over_http(
    two_tenants, server_factory
) -> None:  # type: ignore[no-untyped-def]
    state, keys = two_tenants
    n = 3
    server = server_factory(state, extra=("--auth-failures-per-client", str(n)))
    url = f"{server.url}/v1/retrieve"
    good = {"Authorization": f"Bearer {keys['bob']}"}
    assert HTTP.post(url, json={"query": "asthma"}, headers=good).status_code == 200
    start = time.monotonic()
    codes = []
    for _ in range(4 * n):
        r = HTTP.post(
            url,
            json={"query": "x"},
            headers={"Authorization": "Bearer rpk_000000000000_" + "A" * 43},
        )
        codes.append(r.status_code)
        if r.status_code == 429:
            assert int(r.headers["Retry-After"]) >= 1 and "\n" not in r.json()["detail"]
    elapsed = time.monotonic() - start
    # the invariant: no more hashes than the bucket holds plus what refilled meanwhile
    assert set(codes) <= {401, 429}
    assert codes.count(401) <= n + math.ceil(elapsed * n / 60)
    ok = HTTP.post(url, json={"query": "asthma"}, headers=good)
    assert ok.status_code == 200 and ok.json()["budget"]["used"] == 2  # refusals spent nothing
