"""The private service against the same HTTP stack with privacy off, in one run (ratios).

1. ``POST /v1/retrieve`` of ``ragprivacy serve`` (uvicorn, one worker, on 127.0.0.1) over one
   tenant of ``--docs`` documents (embedder ``hashing:384``, K = 5), driven by concurrent
   httpx clients (asyncio, one account and key per client), against a minimal FastAPI app
   written here and served the same way (uvicorn, one worker, the same request shape and
   body-size middleware, no auth) that embeds the query with the same embedder and returns
   the plain exact top-K (``TopKRetriever`` over a ``KnowledgeBase`` of the same documents
   and vectors). Blocks of the two alternate, so a change of machine load hits both.
   Reported: requests/s, p50 and p99 latency, and the private/non-private ratios.
2. Where one private request's time goes, in process: API-key check (scrypt), the window
   lookup, embedding, exact integer scores, derived noise, clip + noise + select, Merkle
   openings, the witness digest, the witness write, the ledger append, the receipt's root
   and signature, and the privacy/budget fields (exclusive times, by wrapping the very
   functions ``answer_query`` and ``ServiceProvider`` call).
3. ``ragprivacy audit verify --url --receipts --auditor`` (subprocess wall time, full and
   sampled with the default β = 0.01, η = 2^-20) of a window of ``--verify-queries``
   queries over ``--verify-docs`` documents, with an in-process split (fetch, package load,
   Verifier.verify).
4. Timing side channel: the same probe query against a world where a target document is in
   the index and one where it is replaced by a random document (same id, same position,
   same N), interleaved in random order, ``--timing-queries`` timed queries per world
   (``ServiceProvider.retrieve``, the full private path); and an A/A control (two
   providers over the member world). Reported: medians, the median difference with a
   bootstrap 95 % CI, and the Mann-Whitney U p-value. For contrast the same on the library's
   ``NoisyTopKRetriever(simulation=True)`` with ``lazy=True`` (data-dependent by design, not
   used by the service) and ``lazy=False``.

Usage::

    python benchmarks/bench_service.py [--docs 100000] [--queries 600] [--concurrency 1 8]
        [--verify-docs 10000] [--verify-queries 10000] [--timing-queries 300]
        [--rounds 3] [--threads 1] [--out DIR] [--json PATH] [--quick]
        [--skip http profile verify timing]

``--out DIR`` writes ``results.json`` (the same results file as ``--json``) and
``results.md``; ``--rounds`` is also spelled ``--repeats``.

``--quick`` runs everything small in well under a minute. Timings vary ±30 % on shared
machines: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    Machine,
    Row,
    StageTimer,
    bench_parser,
    markdown_table,
    once,
    start,
    time_call,
    time_interleaved,
    write_results,
)

from ragprivacy.service.app import MAX_BODY_BYTES, RetrieveRequest  # the service's shape
from ragprivacy.types import Document

TENANT = "bench"
K = 5
EMBEDDER = "hashing:384"
_SYLLABLES = [
    "ka", "ri", "to", "mu", "sel", "var", "on", "dra", "len", "qui", "bor", "tas", "eph",
    "ul", "ni", "gor", "phe", "ran", "sta", "vel", "mor", "ith", "cal", "den", "zu", "pra",
    "lo", "ves", "tri", "mab",
]  # fmt: skip
TARGET_TEXT = (
    "Record target. Patient Orvalinde Quistbrook, 58, was treated for hereditary angioedema "
    "with icatibant at the Marrowgate clinic after a reaction to lisinopril."
)
PROBE = "Which patient was treated for hereditary angioedema with icatibant at Marrowgate?"


# ---------------------------------------------------------------------------- data
def _vocabulary(rng: np.random.Generator, size: int = 4000) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES, int(rng.integers(2, 4)))))
    return sorted(words)


def make_documents(n: int, *, seed: int = 0) -> list[Document]:
    """``n`` generated records of ~25 words (~200 characters) from a 4,000-word vocabulary."""
    rng = np.random.default_rng(seed)
    vocab = np.array(_vocabulary(rng))
    picks = rng.integers(0, len(vocab), size=(n, 24))
    return [Document(f"doc-{i:06d}", f"Record {i}. " + " ".join(vocab[picks[i]])) for i in range(n)]


def make_queries(n: int, *, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = np.array(_vocabulary(np.random.default_rng(0)))
    return [" ".join(vocab[rng.integers(0, len(vocab), 6)]) for _ in range(n)]


def build_state(
    directory: Path,
    documents: Sequence[Document],
    accounts: dict[str, int],
    *,
    epsilon: float = 4.0,
    delta: float = 1e-6,
) -> tuple[Any, dict[str, str], float]:
    """A state with one tenant of ``documents``, ``accounts`` (name → rate limit) each with
    a key, and an open window. Returns (state, name → key token, build seconds)."""
    from ragprivacy.service import ServiceState, open_window

    def build() -> tuple[Any, dict[str, str]]:
        state = ServiceState(directory, embedder=EMBEDDER)
        state.create_tenant(TENANT, k=K)
        state.add_documents(TENANT, documents, batch=1024)
        for name, rate in accounts.items():
            state.create_account(TENANT, name, epsilon=epsilon, delta=delta, rate_limit=rate)
        keys = {name: state.create_key(name).token for name in accounts}
        open_window(state)
        return state, keys

    built = once(build)
    return *built.value, built.seconds


# ---------------------------------------------------------------------------- servers
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(threads: int) -> dict[str, str]:
    """The child processes' environment: ``threads`` BLAS threads, and bytecode cached
    beside the sources even where PYTHONDONTWRITEBYTECODE is set: otherwise every process
    would compile whatever has no bytecode yet (the project's own sources, installed
    editable) from source again, tenths of a second per start that have nothing to do
    with the service. No PYTHONPYCACHEPREFIX: a cache of its own would also pass over
    the installed packages' bytecode (``make venv`` compiles it) and compile numpy,
    scipy and FastAPI afresh in the first server of a run, seconds of its first request."""
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


class Server:
    """A uvicorn server in its own process group on 127.0.0.1 (as tests/service do)."""

    def __init__(self, cmd: list[str], port: int, threads: int, ready_path: str) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=_env(threads),
        )
        import httpx

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"server exited: {err[-2000:]}")
            try:
                if httpx.get(self.url + ready_path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("the server did not start within 300 s")

    def peak_rss_mb(self) -> float | None:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()


def serve_private(state_dir: Path, threads: int) -> Server:
    port = _free_port()
    cmd = [sys.executable, "-m", "ragprivacy.cli", "serve", "--state", str(state_dir)]
    return Server([*cmd, "--port", str(port)], port, threads, "/v1/audit/windows")


def serve_baseline(state_dir: Path, threads: int, index_path: Path | None = None) -> Server:
    port = _free_port()
    cmd = [sys.executable, __file__, "--serve-baseline", str(state_dir), "--port", str(port)]
    if index_path is not None:
        cmd += ["--plain-index-path", str(index_path)]
    return Server(cmd, port, threads, "/health")


def build_plain_hnsw(state: Any, path: Path) -> float:
    """A FAISS HNSW index (M = 32, efConstruction = 40 as FAISS builds it by default,
    efSearch = 64) of the tenant's vectors, built with 2 threads and saved at ``path`` for
    the baseline server (which searches with one); returns the build seconds."""
    from ragprivacy.index import FaissHnswIndex

    ids, _, vectors = state.documents(TENANT)

    def build() -> None:
        index = FaissHnswIndex(
            vectors.shape[1], m=32, ef_construction=40, ef_search=64, num_threads=2
        )
        index.add(vectors, ids)
        index.save(path)

    return once(build).seconds


def baseline_app(state_dir: Path, index_path: Path | None = None) -> Any:
    """Privacy off: the same request model (``RetrieveRequest``) and body-size middleware,
    no auth, the same embedder, plain top-K (``TopKRetriever`` over a ``KnowledgeBase`` of
    the state's documents and vectors): exact, or over the HNSW index saved at
    ``index_path`` (:func:`build_plain_hnsw`), searched with one thread."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    from ragprivacy.corpus import Corpus
    from ragprivacy.index import create_index, load_index
    from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
    from ragprivacy.service import ServiceState

    state = ServiceState(state_dir, create=False)
    ids, texts, vectors = state.documents(TENANT)
    if index_path is not None:
        index = load_index(index_path)
        index.num_threads = 1  # type: ignore[attr-defined]  # a FAISS index
        del vectors  # the index holds its own copy
    else:
        index = create_index("exact", dim=vectors.shape[1], num_threads=1)
        index.add(vectors, ids)
    kb = KnowledgeBase(
        Corpus([Document(i, t) for i, t in zip(ids, texts)]), state.embedder(), index
    )
    retriever = TopKRetriever(kb, k=K)

    app = FastAPI(title="plain top-K")

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Any) -> Any:  # as the service's
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return JSONResponse({"detail": "too large"}, status_code=413)
        return await call_next(request)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"ok": "yes"}

    @app.post("/v1/retrieve")
    def retrieve(body: RetrieveRequest) -> dict[str, Any]:
        r = retriever.retrieve(body.query)
        keep = r.indices[: body.k or K]
        return {"documents": [{"id": ids[p], "text": texts[p]} for p in keep]}

    return app


# ---------------------------------------------------------------------------- load
async def _drive(
    url: str, tokens: Sequence[str | None], queries: Sequence[str], concurrency: int
) -> tuple[list[float], float]:
    """``len(queries)`` POST /v1/retrieve from ``concurrency`` clients (client i sends
    ``tokens[i]``); returns (latencies in s, wall s)."""
    import httpx

    latencies: list[float] = []
    nxt = iter(range(len(queries)))

    async def client(i: int) -> None:
        headers = {"Authorization": f"Bearer {tokens[i]}"} if tokens[i] else {}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as http:
            for j in nxt:
                t = time.perf_counter()
                r = await http.post("/v1/retrieve", json={"query": queries[j]})
                latencies.append(time.perf_counter() - t)
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")

    t = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(concurrency)))
    return latencies, time.perf_counter() - t


def _summary(latencies: list[float], wall: float) -> dict[str, float]:
    a = np.asarray(latencies)
    return {
        "requests": int(a.size),
        "req_per_s": a.size / wall,
        "p50_ms": float(np.percentile(a, 50) * 1e3),
        "p99_ms": float(np.percentile(a, 99) * 1e3),
        "mean_ms": float(a.mean() * 1e3),
    }


def bench_http(
    state_dir: Path,
    keys: dict[str, str],
    *,
    queries: int,
    concurrency: Sequence[int],
    rounds: int,
    threads: int,
    plain_index: Path | None = None,
) -> dict[str, Any]:
    import httpx

    qs = make_queries(queries * rounds + 100, seed=2)
    accounts = sorted(keys)
    out: dict[str, Any] = {"levels": []}
    private = serve_private(state_dir, threads)
    plain = serve_baseline(state_dir, threads, plain_index)
    try:
        # the first private request loads the window (documents, fixed point, Merkle tree)
        first = once(
            lambda: httpx.post(
                private.url + "/v1/retrieve",
                json={"query": "warm up"},
                headers={"Authorization": f"Bearer {keys[accounts[0]]}"},
                timeout=600,
            )
        )
        first.value.raise_for_status()
        out["private_first_request_s"] = first.seconds
        for c in concurrency:
            tokens = [keys[accounts[i]] for i in range(c)]
            warm = qs[:c]
            asyncio.run(_drive(plain.url, [None] * c, warm, c))
            asyncio.run(_drive(private.url, tokens, warm, c))
            lat: dict[str, list[float]] = {"plain": [], "private": []}
            wall = {"plain": 0.0, "private": 0.0}
            per_block = max(c, queries // rounds)
            for rnd in range(rounds):
                block = qs[100 + rnd * per_block : 100 + (rnd + 1) * per_block]
                for name, url, toks in (
                    ("plain", plain.url, [None] * c),
                    ("private", private.url, tokens),
                ):
                    lt, w = asyncio.run(_drive(url, toks, block, c))
                    lat[name] += lt
                    wall[name] += w
            row: dict[str, Any] = {
                "concurrency": c,
                "plain": _summary(lat["plain"], wall["plain"]),
                "private": _summary(lat["private"], wall["private"]),
            }
            row["ratio_req_per_s"] = row["private"]["req_per_s"] / row["plain"]["req_per_s"]
            row["ratio_p50"] = row["private"]["p50_ms"] / row["plain"]["p50_ms"]
            row["ratio_p99"] = row["private"]["p99_ms"] / row["plain"]["p99_ms"]
            out["levels"].append(row)
            print(json.dumps(row), flush=True)
        out["private_peak_rss_mb"] = private.peak_rss_mb()
        out["plain_peak_rss_mb"] = plain.peak_rss_mb()
    finally:
        private.stop()
        plain.stop()
    return out


def bench_closed_window_reads(state: Any, threads: int, repeats: int = 3) -> dict[str, Any]:
    """GET /tree-head of the window while open (cached provider) and once closed (each
    request rebuilds the window's provider from the state)."""
    import httpx

    from ragprivacy.service import close_window

    wid = state.open_windows()[0].window_id
    out: dict[str, Any] = {}
    server = serve_private(state.directory, threads)
    try:
        path = f"/v1/audit/windows/{wid}/tree-head"
        for label in ("open", "closed"):
            if label == "closed":
                out["close_window_s"] = once(lambda: close_window(state)).seconds
            reads = time_call(  # one warm-up read, then the timed ones
                lambda: httpx.get(server.url + path, timeout=600).raise_for_status(),
                repeats=repeats,
            )
            out[f"tree_head_{label}_ms"] = 1e3 * reads.median
    finally:
        server.stop()
    return out


# ---------------------------------------------------------------------------- profile
def profile_query(state: Any, account: str, token: str, queries: Sequence[str]) -> dict[str, Any]:
    """Median exclusive ms per stage of one private request, in process."""
    from ragprivacy.audit import QueryNoise
    from ragprivacy.audit import noise as audit_noise
    from ragprivacy.audit import window as audit_window
    from ragprivacy.audit.commitments import TenantCommitment
    from ragprivacy.audit.merkle import MerkleLog
    from ragprivacy.audit.proofs import AuditorReexecution
    from ragprivacy.audit.records import ProviderKey
    from ragprivacy.service import ServiceProvider, ServiceState, StateWitnessStore

    sp = ServiceProvider(state)
    load = once(lambda: sp.retrieve(account, "warm up")).seconds  # loads the window
    stages = StageTimer()
    targets = [
        (ServiceState, "authenticate", "API key check (scrypt once per key, then cached)"),
        (ServiceProvider, "_current", "window lookup (SQLite)"),
        (audit_window.AuditWindow, "_embed", "embedding + fixed point + H(q)"),
        (audit_noise, "integer_scores", "integer scores (the slots the noise leaves)"),
        (QueryNoise, "__init__", "derived noise, first draw (lazy) or every slot"),
        (QueryNoise, "select", "clip + noise + top-K select (lazy: lower if needed)"),
        (TenantCommitment, "opening", "Merkle openings (K)"),
        (AuditorReexecution, "prove_record", "witness digest pi_q"),
        (StateWitnessStore, "put", "witness write (SQLite, fsync)"),
        (MerkleLog, "append", "ledger append (guard, fsync)"),
        (MerkleLog, "root", "receipt root"),
        (ProviderKey, "sign", "receipt signature (Ed25519)"),
        (ServiceProvider, "_spent", "privacy + budget fields"),
        (ServiceProvider, "_budget", "privacy + budget fields"),
    ]
    per_query: list[dict[str, float]] = []
    totals: list[float] = []

    def request(q: str) -> None:
        served = sp.retrieve(state.authenticate(token), q)
        json.dumps(served.to_dict())

    with stages.patched(targets):
        for q in queries:
            stages.reset()
            totals.append(once(partial(request, q)).seconds)
            per_query.append(dict(stages.seconds))
    names = list(dict.fromkeys(n for _, _, n in targets))
    out = {n: 1e3 * statistics.median(p.get(n, 0.0) for p in per_query) for n in names}
    out["other (answer_query glue, record, JSON)"] = 1e3 * statistics.median(
        tot - sum(p.values()) for tot, p in zip(totals, per_query)
    )
    if sp._provider is not None:
        sp._provider.ledger.close()
    return {"window_load_s": load, "total_ms": 1e3 * statistics.median(totals), "stages_ms": out}


def bench_scores_fix(state: Any, repeats: int = 10) -> dict[str, float]:
    """Exact integer scores of every document, as the service computes them when a query
    needs them all (a voting tenant, a full-derivation tenant): the int32 rows converted
    block by block into one reused float64 buffer (``commitments._block_scores``, what
    ``TenantCommitment.scores`` runs), against the float64 copy of the matrix that a
    worker kept before (:func:`scoring_matrix`), the whole int32 matrix converted per
    query, and a float32 matmul (what a plain retriever does)."""
    from ragprivacy.audit.commitments import _block_scores, fixed_point, scoring_matrix
    from ragprivacy.audit.noise import integer_scores

    _, _, vectors = state.documents(TENANT)
    fixed = fixed_point(vectors)
    q = fixed[len(fixed) // 3]
    kept = scoring_matrix(fixed)

    def med(fn: Callable[[], object]) -> float:
        return 1e3 * time_call(fn, repeats=repeats).median

    assert np.array_equal(_block_scores(fixed, q, 20), integer_scores(kept, q, 20))
    return {
        "block_scores_ms": med(lambda: _block_scores(fixed, q, 20)),
        "integer_scores_ms": med(lambda: integer_scores(fixed, q, 20)),
        "cached_float64_ms": med(lambda: integer_scores(kept, q, 20)),
        "float32_matmul_ms": med(lambda: vectors @ vectors[0]),
    }


# ---------------------------------------------------------------------------- verify
def bench_verify(
    root: Path, docs: int, queries: int, threads: int, *, cli: bool = True
) -> dict[str, Any]:
    from ragprivacy.audit import Receipt, Verifier, load_window
    from ragprivacy.service import (
        ServiceProvider,
        close_window,
        export_auditor,
        fetch_window,
        load_receipts,
    )

    accounts = 4  # ĉ ≤ k_max = 4 whatever the queries
    per = -(-queries // accounts)
    state, _, build = build_state(
        root / "verify-state",
        make_documents(docs, seed=5),
        {f"v{i}": per for i in range(accounts)},
    )
    sp = ServiceProvider(state)
    qs = make_queries(per * accounts, seed=6)
    receipts = root / "verify-receipts"
    receipts.mkdir()

    def serve() -> None:
        with open(receipts / "receipts.jsonl", "w") as f:
            for i in range(queries):
                served = sp.retrieve(f"v{i % accounts}", qs[i])
                f.write(json.dumps(served.receipt, sort_keys=True) + "\n")

    serve_s = once(serve).seconds
    if sp._provider is not None:
        sp._provider.ledger.close()
    close_s = once(lambda: close_window(state)).seconds
    wid = state.windows()[-1].window_id
    exported = once(lambda: export_auditor(state, wid, root / "verify-auditor"))
    auditor, export_s = exported.value, exported.seconds
    out: dict[str, Any] = {
        "docs": docs,
        "queries": queries,
        "build_state_s": build,
        "serve_in_process_s": serve_s,
        "close_window_s": close_s,
        "export_auditor_s": export_s,
        "auditor_json_mb": (auditor / "auditor.json").stat().st_size / 2**20,
    }
    server = serve_private(state.directory, threads)
    try:
        base = [sys.executable, "-m", "ragprivacy.cli", "audit", "verify", "--url", server.url]
        cmd = [*base, "--receipts", str(receipts), "--auditor", str(auditor), "--json"]
        if cli:  # the process start and imports alone, as the CLI's verify does them
            imports = (
                "import ragprivacy.cli.app, ragprivacy.audit, ragprivacy.service, scipy.stats;"
                f"from ragprivacy.embed import create_embedder; create_embedder({EMBEDDER!r})"
            )
            out["cli_startup_s"] = once(
                lambda: subprocess.run(
                    [sys.executable, "-c", imports], check=True, env=_env(threads)
                )
            ).seconds
        for mode in ("full", "sampled") if cli else ():
            ran = once(
                partial(
                    subprocess.run,
                    [*cmd, "--mode", mode],
                    capture_output=True,
                    text=True,
                    env=_env(threads),
                )
            )
            done, wall = ran.value, ran.seconds
            if done.returncode != 0:
                raise RuntimeError(f"audit verify {mode} failed: {done.stdout[-800:]}")
            verdict = json.loads(done.stdout)
            out[f"cli_{mode}_s"] = wall
            out[f"cli_{mode}_verdict"] = verdict["verdict"]
            out[f"cli_{mode}_records_checked"] = verdict["records_checked"]
        # in-process split of the same work
        fetched = once(lambda: fetch_window(server.url, wid))
        transcript, out["fetch_s"] = fetched.value, fetched.seconds
    finally:
        server.stop()
    loaded = once(
        lambda: (load_window(auditor)[2], [Receipt.from_dict(r) for r in load_receipts(receipts)])
    )
    (package, recs), out["load_package_and_receipts_s"] = loaded.value, loaded.seconds
    for mode in ("full", "sampled"):
        verified = once(partial(Verifier(mode=mode, rng=0).verify, transcript, recs, package))
        v, out[f"verify_{mode}_s"] = verified.value, verified.seconds
        out[f"verify_{mode}_passed"] = v.passed
        out[f"verify_{mode}_records_checked"] = v.records_checked
    print(json.dumps(out), flush=True)
    return out


# ---------------------------------------------------------------------------- timing
def _compare(a: Sequence[float], b: Sequence[float], *, seed: int = 0) -> dict[str, Any]:
    """Medians (ms), the median difference a − b with a bootstrap 95 % CI, Mann-Whitney U."""
    x, y = np.asarray(a) * 1e3, np.asarray(b) * 1e3
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(x, (2000, x.size)), axis=1) - np.median(
        rng.choice(y, (2000, y.size)), axis=1
    )
    out = {
        "n": [int(x.size), int(y.size)],
        "median_a_ms": float(np.median(x)),
        "median_b_ms": float(np.median(y)),
        "median_diff_ms": float(np.median(x) - np.median(y)),
        "diff_ci95_ms": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
    }
    from scipy.stats import mannwhitneyu

    out["mannwhitney_p"] = float(mannwhitneyu(x, y, alternative="two-sided").pvalue)
    return out


def _ignoring_round(fn: Callable[[], object]) -> Callable[[int], object]:
    return lambda _: fn()


def bench_timing(
    member: Any, member_accounts: tuple[str, str], root: Path, docs: list[Document], n: int
) -> dict[str, Any]:
    from ragprivacy.corpus import Corpus
    from ragprivacy.index import create_index
    from ragprivacy.retrieval import KnowledgeBase, NoisyTopKRetriever
    from ragprivacy.service import ServiceProvider

    target = len(docs) // 2
    stand_in = make_documents(1, seed=99)[0]
    other_docs = list(docs)
    other_docs[target] = Document(docs[target].id, stand_in.text)
    outsider, _, build = build_state(root / "nonmember-state", other_docs, {"tn": n + 20})
    worlds = {
        "member": (ServiceProvider(member), member_accounts[0]),
        "member_copy": (ServiceProvider(member), member_accounts[1]),
        "nonmember": (ServiceProvider(outsider), "tn"),
    }
    for sp, acct in worlds.values():
        sp.retrieve(acct, PROBE)  # loads the window
    hits = {
        name: docs[target].id in {d for d, _ in sp.retrieve(acct, PROBE).documents}
        for name, (sp, acct) in worlds.items()
    }
    times = time_interleaved(  # the order drawn anew for every round
        {
            name: _ignoring_round(partial(sp.retrieve, acct, PROBE))
            for name, (sp, acct) in worlds.items()
        },
        repeats=n,
        warmup=0,
        shuffle=np.random.default_rng(7),
    )
    out: dict[str, Any] = {
        "docs": len(docs),
        "queries_per_world": n,
        "build_nonmember_state_s": build,
        "target_in_top_k": hits,
        "member_vs_nonmember": _compare(times["member"].samples, times["nonmember"].samples),
        "aa_member_vs_member_copy": _compare(times["member"].samples, times["member_copy"].samples),
    }
    for sp, _ in worlds.values():
        if sp._provider is not None:
            sp._provider.ledger.close()
    del worlds
    # contrast: the library retriever, eager and lazy (float simulation; not the service)
    kbs = {}
    for name, state_docs, st in (("member", docs, member), ("nonmember", other_docs, outsider)):
        ids, _, vectors = st.documents(TENANT)
        index = create_index("exact", dim=vectors.shape[1], num_threads=1)
        index.add(vectors, ids)
        kbs[name] = KnowledgeBase(Corpus(state_docs), st.embedder(), index)
    for sigma in (0.1, 1.0):  # full-noise fallback on every query at 0.1, none at 1.0
        for lazy in (False, True):
            rets = {
                w: NoisyTopKRetriever(
                    kb,
                    k=K,
                    sigma=sigma,
                    simulation=True,
                    lazy=lazy,
                    rng=1,
                    queries_per_account=10 * n + 10,
                )
                for w, kb in kbs.items()
            }
            for r in rets.values():
                r.retrieve(PROBE)
            t2 = time_interleaved(
                {w: _ignoring_round(partial(r.retrieve, PROBE)) for w, r in rets.items()},
                repeats=n,
                warmup=0,
                shuffle=np.random.default_rng(8),
            )
            row = _compare(t2["member"].samples, t2["nonmember"].samples)
            out[f"library_sigma{sigma}_{'lazy' if lazy else 'eager'}"] = row
    print(json.dumps(out), flush=True)
    return out


# ---------------------------------------------------------------------------- report
def markdown(res: dict[str, Any]) -> str:
    lines = [
        "# bench_service",
        "",
        f"{Machine.from_dict(res['machine']).summary()}; BLAS threads set to {res['threads']}",
        "",
    ]
    http = res.get("http")
    if http:
        lines += [
            f"## POST /v1/retrieve, {res['docs']:,} documents, K = {K} "
            f"(first private request, loading the window: {http['private_first_request_s']:.1f} s;"
            f" peak RSS private {http['private_peak_rss_mb']:.0f} MB, plain "
            f"{http['plain_peak_rss_mb']:.0f} MB)",
            "",
            "| clients | plain req/s | private req/s | ratio | plain p50 / p99 ms | "
            "private p50 / p99 ms |",
            "|---|---|---|---|---|---|",
        ]
        for row in http["levels"]:
            p, q = row["plain"], row["private"]
            lines.append(
                f"| {row['concurrency']} | {p['req_per_s']:.1f} | {q['req_per_s']:.1f} | "
                f"{row['ratio_req_per_s']:.2f}x | {p['p50_ms']:.1f} / {p['p99_ms']:.1f} | "
                f"{q['p50_ms']:.1f} / {q['p99_ms']:.1f} |"
            )
        lines.append("")
    if res.get("closed_window_reads"):
        c = res["closed_window_reads"]
        lines += [
            f"GET /tree-head: {c['tree_head_open_ms']:.1f} ms while the window is open, "
            f"{c['tree_head_closed_ms']:.0f} ms once closed "
            f"(close_window {c['close_window_s']:.1f} s)",
            "",
        ]
    prof = res.get("profile")
    if prof:
        lines += [
            f"## One private request in process ({res['docs']:,} documents): "
            f"{prof['total_ms']:.1f} ms median",
            "",
            "| stage | ms |",
            "|---|---|",
        ]
        lines += [f"| {k} | {v:.2f} |" for k, v in prof["stages_ms"].items()]
        fix = res.get("scores_fix", {})
        if fix:
            lines += [
                "",
                f"exact integer scores of every document, block by block (the service's "
                f"path) {fix['block_scores_ms']:.1f} ms; from a kept float64 copy of the "
                f"matrix (before) {fix['cached_float64_ms']:.1f} ms; the whole int32 matrix "
                f"converted per query {fix['integer_scores_ms']:.1f} ms; a float32 matmul "
                f"{fix['float32_matmul_ms']:.1f} ms",
            ]
        lines.append("")
    ver = res.get("verify")
    if ver:
        cli = (
            f"CLI wall (`audit verify --url --receipts --auditor`): full {ver['cli_full_s']:.1f} s "
            f"({ver['cli_full_records_checked']} records re-executed, {ver['cli_full_verdict']}), "
            f"sampled {ver['cli_sampled_s']:.1f} s ({ver['cli_sampled_records_checked']} records, "
            f"{ver['cli_sampled_verdict']}), of which process start and imports "
            f"{ver['cli_startup_s']:.1f} s. "
            if "cli_full_s" in ver
            else ""
        )
        lines += [
            f"## audit verify, {ver['queries']:,} queries over {ver['docs']:,} documents",
            "",
            f"{cli}In process: fetch {ver['fetch_s']:.1f} s, package "
            f"load {ver['load_package_and_receipts_s']:.1f} s, Verifier full "
            f"{ver['verify_full_s']:.1f} s, sampled {ver['verify_sampled_s']:.1f} s. Making the "
            f"window: serving {ver['serve_in_process_s']:.0f} s, "
            f"close {ver['close_window_s']:.1f} s, export {ver['export_auditor_s']:.1f} s "
            f"({ver['auditor_json_mb']:.0f} MB).",
            "",
        ]
    tim = res.get("timing")
    if tim:
        lines += [
            f"## Timing side channel, {tim['docs']:,} documents, {tim['queries_per_world']} "
            "interleaved queries per world",
            "",
            "| comparison (a vs b) | median a ms | median b ms | a - b ms [95 % CI] | MWU p |",
            "|---|---|---|---|---|",
        ]
        for key, row in tim.items():
            if not isinstance(row, dict) or "median_a_ms" not in row:
                continue
            lo, hi = row["diff_ci95_ms"]
            lines.append(
                f"| {key} | {row['median_a_ms']:.2f} | {row['median_b_ms']:.2f} | "
                f"{row['median_diff_ms']:+.2f} [{lo:+.2f}, {hi:+.2f}] | "
                f"{row['mannwhitney_p']:.3g} |"
            )
        lines += ["", f"target in the private top-K: {tim['target_in_top_k']}", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- main
def rows(res: dict[str, Any]) -> list[Row]:
    """Private against plain requests per level of clients (throughput, p50 and p99
    latency); block-by-block exact scores against a kept float64 copy; sampled against
    full verification."""
    out = []
    hnsw = res.get("args", {}).get("plain_index") == "hnsw"
    base = f"privacy off (plain {'HNSW ' if hnsw else ''}top-K, same HTTP stack)"
    for level in res.get("http", {}).get("levels", []):
        c = level["concurrency"]
        config = {"docs": res["docs"], "k": K, "clients": c, "threads": res["threads"]}
        for what, key, unit in (
            ("throughput", "req_per_s", "req/s"),
            ("p50 latency", "p50_ms", "ms"),
            ("p99 latency", "p99_ms", "ms"),
        ):
            out.append(
                Row(
                    name=f"POST /v1/retrieve, private, {c} client{'s' * (c > 1)}: {what}",
                    config=config,
                    measured=level["private"][key],
                    unit=unit,
                    baseline=base,
                    baseline_measured=level["plain"][key],
                )
            )
    fix = res.get("scores_fix")
    if fix:
        out.append(
            Row(
                name=f"exact integer scores of {res['docs']:,} documents, block by block",
                config={"docs": res["docs"]},
                measured=fix["block_scores_ms"],
                unit="ms",
                baseline="a kept float64 copy of the matrix (8 bytes an entry)",
                baseline_measured=fix["cached_float64_ms"],
            )
        )
    ver = res.get("verify")
    if ver:
        out.append(
            Row(
                name=f"audit verify of {ver['queries']:,} queries over {ver['docs']:,} "
                "documents, sampled (in process)",
                config={"docs": ver["docs"], "queries": ver["queries"]},
                measured=ver["verify_sampled_s"],
                unit="s",
                baseline="full verification",
                baseline_measured=ver["verify_full_s"],
                notes=f"{ver['verify_sampled_records_checked']:,} of "
                f"{ver['verify_full_records_checked']:,} records",
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    p = bench_parser(
        __doc__,
        repeats=3,
        quick_repeats=2,
        repeats_help="alternating blocks per level of clients",
        repeats_aliases=("--rounds",),
    )
    p.add_argument("--docs", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=600, help="HTTP requests per mode and level")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--profile-queries", type=int, default=30)
    p.add_argument("--verify-docs", type=int, default=10_000)
    p.add_argument("--verify-queries", type=int, default=10_000)
    p.add_argument("--timing-queries", type=int, default=300)
    p.add_argument("--threads", type=int, default=1, help="BLAS threads (servers and here)")
    p.add_argument("--skip", nargs="*", default=[], choices=["http", "profile", "verify", "timing"])
    p.add_argument("--out", default=None, help="directory for results.json and results.md")
    p.add_argument(
        "--plain-index",
        choices=["exact", "hnsw"],
        default="exact",
        help="privacy off searches exactly, or a FAISS HNSW index (M 32, efSearch 64)",
    )
    p.add_argument("--plain-index-path", default=None, help=argparse.SUPPRESS)
    p.add_argument("--serve-baseline", default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    run = start("service", p, argv)
    a = run.args
    if a.serve_baseline:
        import uvicorn

        uvicorn.run(
            baseline_app(
                Path(a.serve_baseline),
                None if a.plain_index_path is None else Path(a.plain_index_path),
            ),
            host="127.0.0.1",
            port=a.port,
            log_level="warning",
            access_log=False,
        )
        return None
    if a.quick:
        a.docs, a.queries, a.concurrency = 1000, 24, [1, 4]
        a.profile_queries, a.verify_docs, a.verify_queries, a.timing_queries = 8, 300, 100, 20
    from threadpoolctl import threadpool_limits

    threadpool_limits(a.threads)
    res: dict[str, Any] = {
        "threads": a.threads,
        "docs": a.docs,
        "args": {
            k: v
            for k, v in vars(a).items()
            if k not in ("serve_baseline", "plain_index_path", "port", "json", "out")
        },
    }
    with tempfile.TemporaryDirectory(prefix="bench_service_") as tmp:
        root = Path(tmp)
        docs = make_documents(a.docs)
        docs[a.docs // 2] = Document(docs[a.docs // 2].id, TARGET_TEXT)
        http_rate = (a.queries + 2 * max(a.concurrency)) * len(a.concurrency) + 10
        accounts = {f"c{i}": http_rate for i in range(max(a.concurrency))}
        accounts |= {"prof": a.profile_queries + 10, "tm": a.timing_queries + 20}
        accounts |= {"tm2": a.timing_queries + 20}
        state, keys, build = build_state(root / "state", docs, accounts)
        res["build_state_s"] = build
        print(f"state of {a.docs} documents built in {build:.1f} s", flush=True)
        if "timing" not in a.skip:  # first, while the member ledger is as short as the other
            res["timing"] = bench_timing(state, ("tm", "tm2"), root, docs, a.timing_queries)
        if "http" not in a.skip:
            plain_index = None
            if a.plain_index == "hnsw":
                plain_index = root / "plain-hnsw"
                res["plain_hnsw_build_s"] = build_plain_hnsw(state, plain_index)
            res["http"] = bench_http(
                state.directory,
                {k: v for k, v in keys.items() if k.startswith("c")},
                queries=a.queries,
                concurrency=a.concurrency,
                rounds=a.repeats,
                threads=a.threads,
                plain_index=plain_index,
            )
        if "profile" not in a.skip:
            res["profile"] = profile_query(
                state, "prof", keys["prof"], make_queries(a.profile_queries, seed=3)
            )
            res["scores_fix"] = bench_scores_fix(state)
            print(json.dumps({"profile": res["profile"], **res["scores_fix"]}), flush=True)
        if "http" not in a.skip:
            res["closed_window_reads"] = bench_closed_window_reads(state, a.threads)
            print(json.dumps(res["closed_window_reads"]), flush=True)
        if "verify" not in a.skip:
            res["verify"] = bench_verify(
                root, a.verify_docs, a.verify_queries, a.threads, cli=not a.quick
            )
    document = run.finish(rows(res), res)
    md = markdown(document)
    if document["rows"]:
        md += "\n\n" + markdown_table(rows(res))
    print(md)
    if a.out:
        out = Path(a.out)
        out.mkdir(parents=True, exist_ok=True)
        write_results(out / "results.json", document)
        (out / "results.md").write_text(md + "\n")
    return document


if __name__ == "__main__":
    main()
