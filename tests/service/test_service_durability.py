"""Durability and concurrency of the running service (`ragprivacy serve --workers 2`).

* Concurrency: 200 clients at once on one account with r = 100 get exactly 100 answers
  and 100 refusals (429), the ledger holds exactly 100 records at distinct positions with
  query numbers 1..100; then 200 clients at once on two accounts of two tenants (r = 50
  each) get exactly 50 answers each; the closed window verifies from outside
  (``ragprivacy audit verify --url --receipts --auditor``).
* Crash: kill -9 the server's process group under load from three accounts, restart it
  on the same state, again and again (3 times by default, 20 under ``slow``); every tree
  head a client saw (polled, and the root in every receipt) is a prefix of the final
  ledger (consistency proofs from the service, and recomputed from the ledger file),
  every receipt is included at its position, every account's budget equals its records,
  and the closed window verifies.
* The races behind the concurrency, reproduced deterministically in process: two
  :class:`ServiceProvider` objects over one state are two server workers, and a hook on
  :class:`MerkleLog` runs another request exactly where a thread switch can put it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.service.conftest import MANY_AT_ONCE

from ragprivacy.audit import (
    MerkleLog,
    QueryRecord,
    Receipt,
    SignedTreeHead,
    query_hash,
    verify_consistency,
    verify_inclusion,
    verify_signature,
)
from ragprivacy.cli import main
from ragprivacy.errors import BudgetExhaustedError, BusyError, ConfigError
from ragprivacy.service import ServiceProvider, ServiceState

W = "/v1/audit/windows/W1"
Admin = Callable[..., str]  # what the conftest fixtures give
Corpus = Callable[[Path, str, int], Path]
ServerFactory = Callable[..., Any]
Json = dict[str, Any]


def _make_state(
    root: Path, admin: Admin, corpus_file: Corpus, accounts: dict[str, tuple[str, int]]
) -> tuple[Path, dict[str, str]]:
    """A state with tenants ``clinic`` (K = 3) and ``firm`` (K = 2), ``accounts`` (name →
    (tenant, rate limit)) with one key each, and window W1 open."""
    state = root / "state"
    for tenant, k, n in [("clinic", "3", 40), ("firm", "2", 20)]:
        admin(state, "tenant", "create", tenant, "--k", k)
        admin(state, "docs", "add", tenant, str(corpus_file(root / f"{tenant}.jsonl", tenant, n)))
    keys = {}
    for account, (tenant, rate) in accounts.items():
        admin(state, "account", "create", tenant, account, "--eps", "4", "--delta", "1e-6",
              "--rate-limit", str(rate))  # fmt: skip
        keys[account] = admin(state, "key", "create", account).strip().splitlines()[-1]
    admin(state, "window", "open")
    return state, keys


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _get(url: str, path: str, **kw: Any) -> Any:
    r = httpx.get(f"{url}{path}", timeout=60, **kw)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def _close_and_verify(
    state: Path,
    url: str,
    root: Path,
    receipts: list[Json],
    admin: Admin,
    unanswered: list[Json] = (),  # type: ignore[assignment]
) -> Json:
    """Close the window, export the auditor's package, write the receipts one file per
    account and the requests that got no answer (as :class:`ragprivacy.service.Client`
    keeps them) and run ``ragprivacy audit verify --url URL --receipts DIR --auditor DIR
    --json``."""
    admin(state, "window", "close", "--export-auditor", str(root / "auditor"))
    receipts_dir = root / "receipts"
    (receipts_dir / "unanswered").mkdir(parents=True)
    for r in receipts:
        with (receipts_dir / f"{r['account']}.jsonl").open("a") as f:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    for u in unanswered:
        with (receipts_dir / "unanswered" / "requests.jsonl").open("a") as f:
            f.write(json.dumps(u, sort_keys=True) + "\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["audit", "verify", "--url", url, "--receipts", str(receipts_dir),
                     "--auditor", str(root / "auditor"), "--json"])  # fmt: skip
    verdict: Json = json.loads(out.getvalue())
    verdict["exit_code"] = code
    return verdict


def _check_ledger_matches_receipts(records: list[str], receipts: list[Json]) -> None:
    """Each receipt names its own record: same account, query and top-K."""
    for r in receipts:
        rec = QueryRecord.from_bytes(records[r["position"]].encode())
        assert rec.account == r["account"] and rec.opens_to(
            r["salt"], r["query_hash"], r["topk_hash"]
        ), f"the receipt at position {r['position']} does not name the record there"


def _check_account_records(records: list[str], receipts: list[Json]) -> dict[str, int]:
    """Every account's records carry its query numbers 1..n in ledger order (none skipped
    or reused) and timestamps increase with the position; returns n per account (named
    as its receipts name it: the records carry its pseudonym)."""
    names = {r["account"]: r["holder"] for r in receipts}
    seqs: dict[str, list[int]] = {}
    last_ts = 0
    for i, leaf in enumerate(records):
        rec = QueryRecord.from_bytes(leaf.encode())
        seqs.setdefault(names.get(rec.account, rec.account), []).append(rec.seq)
        assert rec.ts >= last_ts, f"record {i}: timestamp {rec.ts} is before {last_ts}"
        last_ts = rec.ts
    for account, seq in seqs.items():
        assert seq == list(range(1, len(seq) + 1)), (
            f"{account}: (n-th record, its query number) "
            f"{[(n, s) for n, s in enumerate(seq, 1) if n != s][:5]}"
        )
    return {a: len(s) for a, s in seqs.items()}


# ---------------------------------------------------------------- 200 clients at once
async def _burst(url: str, jobs: list[tuple[str, str]]) -> list[httpx.Response]:
    """Send every (key, query) of ``jobs`` at once, one connection each."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, timeout=180, limits=limits) as http:
        return await asyncio.gather(
            *(http.post("/v1/retrieve", json={"query": q}, headers=_auth(k)) for k, q in jobs)
        )


def _receipts(answers: list[httpx.Response]) -> list[Json]:
    return [r.json()["receipt"] for r in answers if r.status_code == 200]


def _others(answers: list[httpx.Response]) -> list[tuple[int, str]]:
    return [(r.status_code, r.text[:200]) for r in answers if r.status_code not in (200, 429)]


def _check_solo(solo: list[httpx.Response], records: list[str], budget: Json) -> None:
    codes = Counter(r.status_code for r in solo)
    assert codes == {200: 100, 429: 100}, f"{dict(codes)}; others: {_others(solo)[:3]}"
    assert all(r.headers.get("Retry-After") for r in solo if r.status_code == 429)
    assert len(records) == 100, f"{len(records)} ledger records"
    receipts = _receipts(solo)
    assert sorted(r["position"] for r in receipts) == list(range(100))  # distinct
    assert all(r["position"] < r["tree_size"] <= 100 for r in receipts)
    _check_ledger_matches_receipts(records, receipts)
    assert _check_account_records(records, receipts) == {"solo": 100}
    assert (budget["used"], budget["remaining"]) == (100, 0), budget


def _check_pair(
    pair: list[httpx.Response], records: list[str], budgets: dict[str, Json], receipts: list[Json]
) -> None:
    codes = Counter((a, r.status_code) for a, r in zip(["left", "right"] * 100, pair))
    assert codes == {
        ("left", 200): 50, ("left", 429): 50, ("right", 200): 50, ("right", 429): 50,
    }, f"{dict(codes)}; others: {_others(pair)[:3]}"  # fmt: skip
    assert len(records) == 200, f"{len(records)} ledger records"
    assert sorted(r["position"] for r in receipts) == list(range(200))  # distinct
    _check_ledger_matches_receipts(records, receipts)
    assert _check_account_records(records, receipts) == {"solo": 100, "left": 50, "right": 50}
    assert len({QueryRecord.from_bytes(r.encode()).tenant for r in records[100:]}) == 2
    for a in ("left", "right"):
        assert (budgets[a]["used"], budgets[a]["remaining"]) == (50, 0), (a, budgets[a])


def test_200_concurrent_clients_get_exactly_r_answers_per_account(
    tmp_path, admin, corpus_file, server_factory
) -> None:  # type: ignore[no-untyped-def]
    """Two server workers. 200 queries at once on ``solo`` (r = 100): 100 answers, 100
    refusals (429), 100 records at distinct positions with query numbers 1..100. Then 200
    at once, alternating ``left`` (clinic) and ``right`` (firm), r = 50 each: 50 answers
    each. The window then verifies from outside. Every check runs; all failures are
    reported together."""
    state, keys = _make_state(
        tmp_path, admin, corpus_file,
        {"solo": ("clinic", 100), "left": ("clinic", 50), "right": ("firm", 50)},
    )  # fmt: skip
    server = server_factory(state, workers=2, extra=MANY_AT_ONCE)
    jobs = [(keys["solo"], f"patient {i} with asthma") for i in range(200)]
    solo = asyncio.run(_burst(server.url, jobs))
    records_solo = _get(server.url, f"{W}/records")
    budget_solo = _get(server.url, "/v1/budget", headers=_auth(keys["solo"]))
    jobs = [(keys[a], f"visit {i} {a} gout") for i in range(100) for a in ("left", "right")]
    pair = asyncio.run(_burst(server.url, jobs))
    records = _get(server.url, f"{W}/records")
    budgets = {a: _get(server.url, "/v1/budget", headers=_auth(keys[a])) for a in ("left", "right")}
    receipts = _receipts(solo) + _receipts(pair)
    problems = []
    for name, check in [
        ("one account", lambda: _check_solo(solo, records_solo, budget_solo)),
        ("two accounts", lambda: _check_pair(pair, records, budgets, receipts)),
    ]:
        try:
            check()
        except AssertionError as exc:
            problems.append(f"{name}: {exc}")
    verdict = _close_and_verify(state, server.url, tmp_path, receipts, admin)
    if verdict["verdict"] != "PASS" or verdict["exit_code"] != 0:
        problems.append(f"verify: {verdict['verdict']} {verdict['failures'][:3]}")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- kill -9 under load
CRASH_ACCOUNTS = {"a0": ("clinic", 100_000), "a1": ("clinic", 100_000), "a2": ("firm", 100_000)}


class _Load:
    """Client threads that query whichever server is up (``url``; None while it is down)
    and a thread polling the tree head; what they saw is kept for the checks."""

    def __init__(self, keys: dict[str, str]) -> None:
        self.url: str | None = None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.receipts: list[Json] = []
        self.heads: list[Json] = []
        self.others: list[tuple[int, str]] = []  # any answer but 200
        self.unanswered: list[Json] = []  # sent, no answer (killed mid-request)
        self.aliases: dict[str, str] = {}  # account -> its pseudonym, from its receipts
        # a0 has two clients: the two workers race on one account's query numbers
        self.threads = [
            threading.Thread(target=self._client, args=(keys[a], f"{a}/{n}", a))
            for n, a in enumerate(["a0", "a0", "a1", "a2"])
        ] + [threading.Thread(target=self._poll_heads)]

    def __enter__(self) -> _Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    def _client(self, key: str, name: str, account: str) -> None:
        i = 0
        with httpx.Client(timeout=30, headers=_auth(key)) as http:
            while not self.stop.is_set():
                url = self.url
                if url is None:
                    time.sleep(0.02)
                    continue
                i += 1
                query = f"{name} visit {i}"
                try:
                    r = http.post(f"{url}/v1/retrieve", json={"query": query})
                except httpx.HTTPError:  # killed mid-request: its record may exist
                    with self.lock:  # as the shipped client logs it
                        self.unanswered.append(
                            {"account": self.aliases.get(account), "query_hash": query_hash(query)}
                        )
                    time.sleep(0.02)
                    continue
                with self.lock:
                    if r.status_code == 200:
                        self.receipts.append(r.json()["receipt"])
                        self.aliases[account] = r.json()["receipt"]["account"]
                    else:
                        self.others.append((r.status_code, r.text[:200]))

    def _poll_heads(self) -> None:
        with httpx.Client(timeout=30) as http:
            while not self.stop.is_set():
                url = self.url
                with contextlib.suppress(httpx.HTTPError):
                    if url is not None:
                        h = http.get(f"{url}{W}/tree-head")
                        if h.status_code == 200:
                            with self.lock:
                                self.heads.append(h.json())
                time.sleep(0.05)

    def largest_size_seen(self) -> int:
        with self.lock:
            return max([r["tree_size"] for r in self.receipts] + [h["size"] for h in self.heads])

    def wait_for_answers(self, n: int, timeout: float = 120) -> None:
        with self.lock:
            target = len(self.receipts) + n
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.receipts) >= target:
                    return
            time.sleep(0.02)
        raise AssertionError(f"the server answered fewer than {n} queries in {timeout} s")


def _crash_cycles(
    root: Path, admin: Admin, corpus_file: Corpus, server_factory: ServerFactory, crashes: int
) -> None:
    state, keys = _make_state(root, admin, corpus_file, CRASH_ACCOUNTS)
    rng = random.Random(crashes)
    with _Load(keys) as load:
        server = server_factory(state, workers=2)
        for _ in range(crashes):
            load.url = server.url
            load.wait_for_answers(4)  # queries flowing
            time.sleep(rng.uniform(0, 0.15))
            server.stop(signal.SIGKILL)  # kill -9 the process group: parent and workers
            load.url = None
            seen = load.largest_size_seen()
            server = server_factory(state, workers=2)  # on the same state
            size = _get(server.url, f"{W}/tree-head")["size"]
            assert size >= seen, f"the ledger came back with {size} records; {seen} were signed"
        load.url = server.url
        load.wait_for_answers(4)  # the last restart serves queries too
    url = server.url
    assert not load.others, f"answers other than 200 under load: {load.others[:5]}"

    records = _get(url, f"{W}/records")
    final = SignedTreeHead.from_dict(_get(url, f"{W}/tree-head"))
    size, root_hash = final.size, bytes.fromhex(final.root)
    assert size == len(records) >= len(load.receipts)
    key = _get(url, f"{W}/commitments")["provider_key"]
    assert verify_signature(key, final.message(), final.signature)

    # the ledger file itself, read without the service
    with MerkleLog(state / "ledgers" / "W1.sqlite") as log:
        log.verify_storage()
        assert log.size == size and log.root() == root_hash
        assert [log.leaf(i).decode() for i in range(size)] == records
        local_roots = [log.root(n).hex() for n in range(size + 1)]
        local_consistency = [log.consistency_proof(n, size) for n in range(size + 1)]
        local_inclusion = {
            (r["position"], r["tree_size"]): log.inclusion_proof(r["position"], r["tree_size"])
            for r in load.receipts
        }

    # every tree head a client saw, polled (signed) or inside a receipt, is a prefix
    assert len(load.heads) > crashes
    for h in load.heads:
        assert verify_signature(key, SignedTreeHead.from_dict(h).message(), h["signature"])
    heads = {(h["size"], h["root"]) for h in load.heads}
    heads |= {(r["tree_size"], r["root"]) for r in load.receipts}
    for n, head in sorted(heads):
        proof = [bytes.fromhex(p) for p in _get(
            url, f"{W}/proofs/consistency", params={"old": n, "new": size})]  # fmt: skip
        assert verify_consistency(n, size, bytes.fromhex(head), root_hash, proof), (
            f"the tree head (size {n}, root {head[:12]}…) is not a prefix of the final ledger"
        )
        assert local_roots[n] == head, f"the ledger file has another root at size {n}"
        assert verify_consistency(n, size, bytes.fromhex(head), root_hash, local_consistency[n])

    # every receipt a client got is in the final ledger, at its position
    for r in load.receipts:
        pos, n, head_root = r["position"], r["tree_size"], bytes.fromhex(r["root"])
        assert verify_signature(key, Receipt.from_dict(r).message(), r["signature"])
        leaf = records[pos].encode()
        proof = [bytes.fromhex(p) for p in _get(
            url, f"{W}/proofs/inclusion", params={"position": pos, "size": n})]  # fmt: skip
        assert verify_inclusion(leaf, pos, n, proof, head_root)
        assert verify_inclusion(leaf, pos, n, local_inclusion[(pos, n)], head_root)
    _check_ledger_matches_receipts(records, load.receipts)

    # nothing charged without a record; asked a few times, so that both workers answer
    counts = _check_account_records(records, load.receipts)
    assert set(counts) == set(CRASH_ACCOUNTS)
    for a, k in keys.items():
        used = {_get(url, "/v1/budget", headers=_auth(k))["used"] for _ in range(4)}
        assert used == {counts[a]}, f"{a}: budget used {used}, {counts[a]} records"

    verdict = _close_and_verify(state, url, root, load.receipts, admin, load.unanswered)
    assert verdict["verdict"] == "PASS" and verdict["exit_code"] == 0, verdict["failures"][:3]


def test_three_kill9_restarts_under_load_lose_nothing(
    tmp_path, admin, corpus_file, server_factory
) -> None:  # type: ignore[no-untyped-def]
    _crash_cycles(tmp_path, admin, corpus_file, server_factory, crashes=3)


@pytest.mark.slow
def test_twenty_kill9_restarts_under_load_lose_nothing(
    tmp_path, admin, corpus_file, server_factory
) -> None:  # type: ignore[no-untyped-def]
    _crash_cycles(tmp_path, admin, corpus_file, server_factory, crashes=20)


# ---------------------------------------------------------------- the races, in process
def _workers(
    root: Path, admin: Admin, corpus_file: Corpus, accounts: dict[str, tuple[str, int]], n: int
) -> list[ServiceProvider]:
    """``n`` server workers over one state (each with its own connections and ledger)."""
    state, _keys = _make_state(root, admin, corpus_file, accounts)
    return [ServiceProvider(ServiceState(state, create=False)) for _ in range(n)]


def _in_thread(fn: Callable[[], object], timeout: float = 5.0) -> None:
    """Run ``fn`` in another thread (another request to the same worker) and wait for it
    a while; if it blocks on a lock this thread holds, go on (it finishes later)."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(timeout)


def test_an_audit_read_during_a_query_does_not_hide_another_workers_record(
    tmp_path, admin, corpus_file, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Worker A counts an account's records while a GET /records in another of its
    threads catches A's ledger up with a record worker B has just appended: A must still
    count it, so the account's 4th query (r = 3) is refused, not recorded as j = 3 again."""
    a, b = _workers(tmp_path, admin, corpus_file, {"a0": ("clinic", 3)}, n=2)
    a.retrieve("a0", "first")
    b.retrieve("a0", "second")
    armed = threading.Event()
    original = MerkleLog.leaf

    def leaf(self: MerkleLog, index: int) -> bytes:
        if armed.is_set():  # A reads the record B appended: a thread switch here
            armed.clear()
            b.retrieve("a0", "third")  # B appends the account's third query
            _in_thread(lambda: a.records("W1", 0, None))  # GET /records on worker A
        return original(self, index)

    monkeypatch.setattr(MerkleLog, "leaf", leaf)
    armed.set()
    try:
        a.retrieve("a0", "fourth")
        outcome = "answered"
    except BudgetExhaustedError:
        outcome = "refused"
    monkeypatch.undo()
    seqs = [QueryRecord.from_bytes(r.encode()).seq for r in a.records("W1", 0, None)]
    used = (a.budget("a0")["used"], b.budget("a0")["used"])
    assert (outcome, seqs, used) == ("refused", [1, 2, 3], (3, 3)), (
        f"4th query {outcome}; query numbers in the ledger {seqs} (r = 3); "
        f"budget used on workers A, B: {used}"
    )


def test_a_signed_tree_head_is_a_head_of_the_ledger_while_queries_append(
    tmp_path, admin, corpus_file, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """GET /tree-head while another request to the same worker appends: the signed head
    must pair a size with the root at that size."""
    (a,) = _workers(tmp_path, admin, corpus_file, {"a0": ("clinic", 10)}, n=1)
    a.retrieve("a0", "first")
    armed = threading.Event()
    original = MerkleLog.root

    def root(self: MerkleLog, size: int | None = None) -> bytes:
        if armed.is_set():  # the head's size was read: a thread switch
            armed.clear()
            _in_thread(lambda: a.retrieve("a0", "second"))  # POST /v1/retrieve meanwhile
        return original(self, size)

    monkeypatch.setattr(MerkleLog, "root", root)
    armed.set()
    head = a.tree_head("W1")
    monkeypatch.undo()
    with MerkleLog(tmp_path / "state" / "ledgers" / "W1.sqlite") as log:
        assert log.size == 2, "the concurrent query was not answered"
        at = [n for n in range(log.size + 1) if log.root(n).hex() == head.root]
        assert at == [head.size], (
            f"the signed tree head says size {head.size}; its root is the ledger's root "
            f"at size {at}"
        )


def test_a_query_overtaken_by_another_workers_appends_is_still_answered(
    tmp_path, admin, corpus_file, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Worker B appends a query between worker A stamping its query's timestamp and A's
    append, ten times in a row (two busy workers, as in the 200-client burst): A's query,
    well within its budget, must still be answered, not refused with 'The ledger is
    busy' (HTTP 503)."""
    a, b = _workers(
        tmp_path, admin, corpus_file, {"a0": ("clinic", 10), "b0": ("clinic", 100)}, n=2
    )
    a.retrieve("a0", "warm")
    b.retrieve("b0", "warm")
    overtakes = 0
    inside = False
    original = MerkleLog.append

    def append(self: MerkleLog, data: bytes, **kw: Any) -> int:
        nonlocal overtakes, inside
        if not inside and overtakes < 10:
            inside, overtakes = True, overtakes + 1
            try:
                b.retrieve("b0", f"overtake {overtakes}")  # B stamps later, appends first
            finally:
                inside = False
        return original(self, data, **kw)

    monkeypatch.setattr(MerkleLog, "append", append)
    try:
        a.retrieve("a0", "mine")
        outcome = "answered"
    except (BusyError, ConfigError) as exc:
        outcome = f"refused: {exc}"
    monkeypatch.undo()
    assert outcome == "answered", f"{outcome} (after {overtakes} appends of worker B)"
    assert a.budget("a0")["used"] == 2
