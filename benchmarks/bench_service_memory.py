"""Memory of one service worker per tenant, against the float32 index it serves.

One ``noisy_topk`` tenant of ``--n`` documents whose embeddings are random unit float32
vectors (d = 384: an embedder registered here draws each document's vector from its text),
one account, an open window, in a state directory made first (in its own process, not
measured). Then the worker runs in a fresh process, so that its RSS is that process's
only: the server's worker object, :class:`ragprivacy.service.ServiceProvider`, loads the
open window as a worker does on its first request (the
:class:`~ragprivacy.audit.AuditWindow` that ``provider.audit_window`` builds over the
tenant's stored rows, read block by block into the commitment's fixed-point rows, and the
texts' hashes), answers ``--queries`` retrieve requests (the lazy noise path, a few rows a
query; the K texts of each answer read from the state) and scores ``--full`` queries
against every committed row (``TenantCommitment.scores``: the path of voting and small-σ
tenants).

Rows: the peak RSS (``ru_maxrss``) and the RSS once the window is built, each against
the float32 index n·d·4 bytes (goal: ≤ 1.2×). Details: the process's RSS after its
imports, what the tenant's state holds part by part (int32 rows, packed Merkle tree,
content hashes, ids and their lists), the build time and the time of a full scoring.

Usage::

    python benchmarks/bench_service_memory.py [--n 100000] [--queries 20] [--full 3]
        [--quick] [--json PATH]

``--quick``: at most n = 3,000, 3 queries and 1 full scoring. n = 10^6 needs about 6 GB
of free memory and a few GB of disk for its state.
"""

from __future__ import annotations

import hashlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, bench_parser, start

DIM = 384
TENANT, ACCOUNT = "bench", "reader"
EMBEDDER = f"bench-random:{DIM}"
SETUPS = ("service",)


def _register_embedder() -> None:
    from ragprivacy.embed import Embedder, register_embedder

    class RandomEmbedder(Embedder):
        """A unit vector drawn from each text's SHA-256 (random vectors, reproducible)."""

        name = "bench-random"

        def __init__(self, dim: str | int = DIM) -> None:
            self._dim = int(dim)

        @property
        def dim(self) -> int:
            return self._dim

        def config(self) -> dict[str, Any]:
            return {"dim": self._dim}

        def _encode(self, texts: list[str]) -> np.ndarray:
            out = np.empty((len(texts), self._dim), dtype=np.float32)
            for i, text in enumerate(texts):
                seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                out[i] = np.random.default_rng(seed).standard_normal(self._dim)
            return out

    register_embedder("bench-random", RandomEmbedder, replace=True)


def _rss() -> int:
    """This process's resident set now (bytes)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _peak() -> int:
    """This process's peak resident set (bytes; ru_maxrss is in KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def build_state(directory: Path, n: int) -> None:
    """The state: one tenant of ``n`` documents (short texts), one account, a window."""
    _register_embedder()
    from ragprivacy.service import ServiceState, open_window
    from ragprivacy.types import Document

    state = ServiceState(directory, embedder=EMBEDDER)
    state.create_tenant(TENANT, k=5)
    docs = (Document(f"doc-{i:07d}", f"document {i}") for i in range(n))
    state.add_documents(TENANT, docs, batch=4096)
    state.create_account(TENANT, ACCOUNT, epsilon=4.0, delta=1e-6, rate_limit=10**6)
    open_window(state)
    state.close()


def _deep(items: Any) -> int:
    """Bytes of a list or dict of strings: the container and every string in it."""
    total = sys.getsizeof(items)
    if isinstance(items, dict):
        return total + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in items.items())
    return total + sum(sys.getsizeof(x) for x in items)


def measure(directory: Path, setup: str, queries: int, full: int) -> dict[str, Any]:
    """One worker's memory (run in a fresh process: see :func:`main`)."""
    _register_embedder()
    from ragprivacy.service import ServiceProvider, ServiceState

    imported = _rss()
    state = ServiceState(directory, create=False)
    provider = ServiceProvider(state)
    t = time.perf_counter()
    provider.window_id()  # the window and its AuditWindow, as a first request
    build_s = time.perf_counter() - t
    built = _rss()
    for i in range(queries):
        provider.retrieve(ACCOUNT, f"question {i}")
    window = provider._current()[1]
    commitment = window._index[window.tenant_id(TENANT)]  # the tenant's commitment
    q = commitment.fixed_at([0])[0]
    t = time.perf_counter()
    for _ in range(full):
        commitment.scores(q, window.policy.grid_bits)
    full_ms = 1000 * (time.perf_counter() - t) / max(full, 1)
    contents = commitment.contents
    parts = {
        "int32 rows": int(commitment.fixed.nbytes),
        "Merkle tree (packed)": int(commitment._tree.nbytes),
        "content hashes": len(contents) * 32 if not isinstance(contents, list) else _deep(contents),
        "ids (strings and the commitment's list)": _deep(commitment.ids),
    }
    return {
        "n": commitment.size,
        "imported_rss": imported,
        "built_rss": built,
        "end_rss": _rss(),
        "peak_rss": _peak(),
        "build_s": build_s,
        "full_scores_ms": full_ms,
        "parts": parts,
    }


def _child(directory: Path, setup: str, queries: int, full: int) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            str(directory),
            setup,
            str(queries),
            str(full),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"The {setup!r} worker failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run(n: int, queries: int, full: int, workdir: Path) -> tuple[list[Row], dict[str, Any]]:
    directory = workdir / "state"
    t = time.perf_counter()
    made = subprocess.run(
        [sys.executable, __file__, "--build", str(directory), str(n)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        raise RuntimeError(f"Building the state failed:\n{made.stderr[-3000:]}")
    setup_s = time.perf_counter() - t
    index = n * DIM * 4
    mb = 1e6
    rows: list[Row] = []
    runs: dict[str, Any] = {}
    for setup in SETUPS:  # one at a time: each worker alone in memory
        got = _child(directory, setup, queries, full)
        runs[setup] = got
        config = {"n": n, "d": DIM, "setup": setup, "queries": queries, "full": full}
        for what, key in (("peak RSS", "peak_rss"), ("RSS after the window's build", "built_rss")):
            rows.append(
                Row(
                    name=f"worker {what}, {setup}, n = {n:,}",
                    config=config,
                    measured=got[key] / mb,
                    unit="MB",
                    baseline="float32 index (n·d·4 bytes)",
                    baseline_measured=index / mb,
                    goal="≤ 1.2×",
                    met=got[key] <= 1.2 * index,
                )
            )
    details = {"index_bytes": index, "setup_s": setup_s, "runs": runs}
    return rows, details


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--build"]:
        build_state(Path(args[1]), int(args[2]))
        return {}
    if args[:1] == ["--child"]:
        got = measure(Path(args[1]), args[2], int(args[3]), int(args[4]))
        print(json.dumps(got))
        return got
    parser = bench_parser(__doc__, repeats=None)
    parser.add_argument("--n", type=int, default=100_000, help="documents of the tenant")
    parser.add_argument("--queries", type=int, default=20, help="retrieve requests")
    parser.add_argument("--full", type=int, default=3, help="full scorings")
    session = start("service_memory", parser, argv)
    quick = session.quick
    n = min(session.args.n, 3000) if quick else session.args.n
    queries = min(session.args.queries, 3) if quick else session.args.queries
    full = min(session.args.full, 1) if quick else session.args.full
    with tempfile.TemporaryDirectory(prefix="bench-service-memory-") as tmp:
        rows, details = run(n, queries, full, Path(tmp))
    for setup, got in details["runs"].items():
        print(
            f"{setup}: after imports {got['imported_rss'] / 1e6:.0f} MB, build "
            f"{got['build_s']:.1f} s, full scoring {got['full_scores_ms']:.1f} ms; held: "
            + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in got["parts"].items())
        )
    return session.finish(rows, details)


if __name__ == "__main__":
    main()
