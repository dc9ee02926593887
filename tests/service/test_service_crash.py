"""kill -9 under load, restart on the same state: the ledger stays append-only from every
root it published, every receipt issued is in it, and no account is charged for a query
without a record. (A crash after the append but before the reply charges an answer the
client never got: the record exists, so the accounting may over-count, never under-count
— the safe way.)"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from ragprivacy.audit import Receipt, Verifier, load_window, verify_consistency, verify_inclusion
from ragprivacy.service import fetch_window

ACCOUNTS = ("a0", "a1", "a2")


def _setup(tmp_path: Path, admin, corpus_file) -> tuple[Path, dict[str, str]]:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    admin(state, "tenant", "create", "clinic", "--k", "3")
    admin(state, "docs", "add", "clinic", str(corpus_file(tmp_path / "c.jsonl", "c", 40)))
    keys = {}
    for a in ACCOUNTS:
        admin(state, "account", "create", "clinic", a, "--eps", "4", "--delta", "1e-6",
              "--rate-limit", "1000")  # fmt: skip
        keys[a] = admin(state, "key", "create", a).strip().splitlines()[-1]
    admin(state, "window", "open")
    return state, keys


def _load(url: str, key: str, stop: threading.Event, receipts: list[dict], heads: list) -> None:  # type: ignore[type-arg]
    with httpx.Client(timeout=5) as http:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                r = http.post(
                    f"{url}/v1/retrieve",
                    json={"query": f"visit {i} asthma"},
                    headers={"Authorization": f"Bearer {key}"},
                )
                if r.status_code == 200:
                    receipts.append(r.json()["receipt"])
                h = http.get(f"{url}/v1/audit/windows/W1/tree-head")
                if h.status_code == 200:
                    heads.append(h.json())
            except httpx.HTTPError:
                time.sleep(0.02)  # the server is down: wait for the restart


def _warm(url: str, keys: dict[str, str]) -> None:
    """A fresh process loads its window on the first authenticated request; do that
    before the load, so that each cycle is killed while it is answering queries."""
    for key in keys.values():
        r = httpx.get(f"{url}/v1/budget", headers={"Authorization": f"Bearer {key}"}, timeout=60)
        assert r.status_code == 200, r.text


def _crash_cycles(tmp_path, admin, corpus_file, server_factory, crashes: int) -> None:  # type: ignore[no-untyped-def]
    state, keys = _setup(tmp_path, admin, corpus_file)
    receipts: list[dict] = []  # type: ignore[type-arg]
    heads: list[dict] = []  # type: ignore[type-arg]
    server = server_factory(state)
    for _ in range(crashes):
        _warm(server.url, keys)
        stop = threading.Event()
        threads = [
            threading.Thread(target=_load, args=(server.url, keys[a], stop, receipts, heads))
            for a in ACCOUNTS
        ]
        for t in threads:
            t.start()
        time.sleep(1.5)
        server.stop(signal.SIGKILL)  # kill -9 the whole server, mid-request
        stop.set()
        for t in threads:
            t.join()
        server = server_factory(state)
    assert receipts, "no query was answered"
    url = server.url
    _warm(url, keys)
    records = httpx.get(f"{url}/v1/audit/windows/W1/records").json()
    final = httpx.get(f"{url}/v1/audit/windows/W1/tree-head").json()
    size, root = final["size"], bytes.fromhex(final["root"])
    assert size == len(records)
    for h in heads:  # every published root is a prefix of the final ledger
        proof = httpx.get(
            f"{url}/v1/audit/windows/W1/proofs/consistency",
            params={"old": h["size"], "new": size},
        ).json()
        assert verify_consistency(
            h["size"], size, bytes.fromhex(h["root"]), root, [bytes.fromhex(p) for p in proof]
        )
    for r in receipts:  # every receipt issued is in the ledger, at its position
        proof = httpx.get(
            f"{url}/v1/audit/windows/W1/proofs/inclusion",
            params={"position": r["position"], "size": r["tree_size"]},
        ).json()
        leaf = records[r["position"]].encode()
        assert verify_inclusion(
            leaf, r["position"], r["tree_size"], [bytes.fromhex(p) for p in proof],
            bytes.fromhex(r["root"]),
        )  # fmt: skip
    for a in ACCOUNTS:  # the budget is the records: nothing charged without one
        used = httpx.get(f"{url}/v1/budget", headers={"Authorization": f"Bearer {keys[a]}"})
        mine = sum(1 for rec in records if f'"account":"{a}"' in rec)
        assert used.json()["used"] == mine
    admin(state, "window", "close", "--export-auditor", str(tmp_path / "aud"))
    verdict = Verifier().verify(
        fetch_window(url),
        [Receipt.from_dict(r) for r in receipts],
        load_window(tmp_path / "aud")[2],
    )
    assert verdict.passed, verdict.failures[:3]


def test_three_crashes_under_load(tmp_path, admin, corpus_file, server_factory) -> None:
    _crash_cycles(tmp_path, admin, corpus_file, server_factory, crashes=3)


@pytest.mark.slow
def test_twenty_crashes_under_load(tmp_path, admin, corpus_file, server_factory) -> None:
    _crash_cycles(tmp_path, admin, corpus_file, server_factory, crashes=20)
