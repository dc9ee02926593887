"""200 concurrent clients on one account with r = 100, two server workers: exactly 100
answers, 100 records, and the window verifies."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx

from ragprivacy.audit import Receipt, Verifier, load_window
from ragprivacy.service import fetch_window


def test_two_workers_serve_an_account_exactly_r_queries(
    tmp_path, admin, corpus_file, server_factory
) -> None:
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "3")
    admin(state, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "c", 50)))
    admin(state, "account", "create", "clinic", "alice", "--eps", "4", "--delta", "1e-6",
          "--rate-limit", "100")  # fmt: skip
    key = admin(state, "key", "create", "alice").strip().splitlines()[-1]
    admin(state, "window", "open")
    server = server_factory(state, workers=2)

    def ask(i: int) -> httpx.Response:
        return httpx.post(
            f"{server.url}/v1/retrieve",
            json={"query": f"patient {i} with asthma"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )

    with ThreadPoolExecutor(max_workers=200) as pool:
        answers = list(pool.map(ask, range(200)))
    codes = sorted(r.status_code for r in answers)
    odd = {(r.status_code, r.text[:200]) for r in answers if r.status_code not in (200, 429)}
    assert codes.count(200) == 100 and codes.count(429) == 100, odd
    receipts = [r.json()["receipt"] for r in answers if r.status_code == 200]
    assert sorted(r["position"] for r in receipts) == list(range(100))
    records = httpx.get(f"{server.url}/v1/audit/windows/W1/records").json()
    assert len(records) == 100
    assert sorted(json.loads(r)["seq"] for r in records) == list(range(1, 101))
    admin(state, "window", "close", "--export-auditor", str(tmp_path / "aud"))
    verdict = Verifier().verify(
        fetch_window(server.url),
        [Receipt.from_dict(r) for r in receipts],
        load_window(tmp_path / "aud")[2],
    )
    assert verdict.passed, verdict.failures[:3]
