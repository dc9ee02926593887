"""Secure audited private retrieval against a FAISS HNSW search, in one run (ratios).

One tenant of n random unit vectors (d = 384, float32), K = 5, one FAISS thread for
searching. Rows:

- **audited query** — ``AuditWindow.query`` with a query vector: noise derived from
  (s_W, rec_q) by the committed derivation (``AuditPolicy.noise = "lazy"``, exact
  discrete Gaussian drawn only for the slots above a public threshold), exact integer
  scores of the candidates, the Merkle openings of the K selected slots, the witness,
  the record appended to the ledger (in memory) and the signed receipt — against a FAISS
  HNSW search of the same vectors (M = 32, efSearch = 64), the baseline a user at scale
  would pick;
- **the selection alone** (``QueryNoise`` + ``select``: what the noise costs) against the
  same search;
- **small σ** — the same audited query under policies whose σ is set below the
  calibration (timing only: such a window would fail the verifier's σ floor): where the
  score range is about σ, ``ragprivacy.dp.lazy_suits`` still takes the lazy path with a
  larger first draw; where it is several σ, every query takes the full derivation (every
  slot's noise, the noise-first scoring); against the same search;
- **the verifier's re-execution per record** — ``Verifier().verify`` of the window in
  full mode, the mean time in ``AuditorReexecution.verify_record`` per record (A1–A4:
  the witness's openings, the re-derived first draw, the lazy selection run again),
  against the same search.

The HNSW index is built with 2 FAISS threads and searched with one, and kept under
``--cache`` (default ``~/.cache/ragprivacy-bench``) for the next run over the same vectors
(``_harness.hnsw_index``).

Usage::

    python benchmarks/bench_audited_retrieval.py [--n 100000] [--queries 20]
        [--small-sigma 2.0 0.5] [--cache DIR] [--quick] [--json PATH]

``--quick``: at most n = 10,000 and 5 queries. Timings vary ±30 % on shared machines:
compare the ratios within one run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    DEFAULT_CACHE,
    Row,
    StageTimer,
    bench_parser,
    hnsw_index,
    once,
    start,
    time_interleaved,
)

from ragprivacy.audit import AuditPolicy, AuditWindow, QueryNoise, Verifier
from ragprivacy.audit.commitments import fixed_point
from ragprivacy.audit.proofs import AuditorReexecution
from ragprivacy.dp import query_input

DIM = 384
K = 5


def _vectors(n: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _policy(sigma: float | None, rate: int) -> AuditPolicy:
    return AuditPolicy(
        epsilon_acc=4.0, delta_acc=1e-6, rate_limit=rate, k_max=4, delta_policy=5e-6,
        window_id="bench", window_start=0, window_end=2**62, top_k=K, sigma=sigma,
    )  # fmt: skip


def _window(docs: np.ndarray, policy: AuditPolicy, accounts: int) -> AuditWindow:
    ids = [f"d{i}" for i in range(docs.shape[0])]
    w = AuditWindow(
        policy=policy,
        tenants={"t": (ids, docs)},
        accounts={f"a{j}": "t" for j in range(accounts)},
        seed=bytes(range(32)),
    )
    w.commit(published_at=0)
    return w


def run(
    n: int, queries: int, small_sigmas: list[float], cache: Path
) -> tuple[list[Row], dict[str, Any]]:
    docs = _vectors(n, 0)
    qs = _vectors(queries, 1)
    built = once(lambda: hnsw_index(docs, cache))
    index = built.value
    rate = 20
    accounts = queries // rate + 2  # every timed query is a fresh record of some account
    policy = _policy(None, rate)
    smalls = [_policy(sigma, rate) for sigma in small_sigmas]
    windows = once(
        lambda: [_window(docs, p, accounts) for p in [policy, *smalls]]  # type: ignore[misc]
    )
    window, *small_windows = windows.value
    mech = policy.mechanism()
    fixed = window._index[window.tenant_id("t")]
    used = {"lazy": 0} | {f"small{i}": 0 for i in range(len(smalls))}

    def asker(w: AuditWindow, key: str) -> Callable[[int], object]:
        def ask(r: int) -> object:
            i = used[key]
            used[key] += 1
            return w.query(f"a{i // rate}", vector=qs[r % queries], ts=1 + i)

        return ask

    def hnsw(r: int) -> object:
        return index.search(qs[r % queries : r % queries + 1], K)

    q_fixed = fixed_point(qs)

    def select(r: int) -> object:
        rec = query_input("bench", "x", "t", f"q{r}", 1)
        noise = QueryNoise(bytes(32), rec, mech, n, policy.noise)
        q = q_fixed[r % queries]
        return noise.select(lambda p: fixed.scores_at(q, p.tolist(), policy.grid_bits))

    t = time_interleaved(
        {
            "hnsw": hnsw,
            "audited": asker(window, "lazy"),
            "select": select,
            **{f"small{i}": asker(w, f"small{i}") for i, w in enumerate(small_windows)},
        },
        repeats=queries,
    )
    ms = {name: 1000 * timing.median for name, timing in t.items()}
    # the verifier: full mode, the time inside verify_record per record
    stages = StageTimer()
    with stages.patched([(AuditorReexecution, "verify_record", "record")]):
        verified = once(
            lambda: Verifier().verify(window.transcript(), [], window.auditor_package())
        )
    records = stages.calls.get("record", 0)
    verdict = verified.value
    ms["verify_record"] = 1000 * stages.seconds.get("record", 0.0) / max(1, records)
    lazy_share = QueryNoise(bytes(32), ("x",), mech, n, policy.noise).lazy
    small_lazy = [QueryNoise(bytes(32), ("x",), p.mechanism(), n, p.noise).lazy for p in smalls]
    config = {
        "n": n, "d": DIM, "k": K, "queries": queries,
        "sigma": policy.noise_sigma, "small_sigmas": [p.noise_sigma for p in smalls],
        "lazy_at_sigma": lazy_share, "lazy_at_small_sigmas": small_lazy,
    }  # fmt: skip

    def row(name: str, key: str, goal: float | None = None) -> Row:
        return Row(
            name=f"{name}, n = {n:,}",
            config=config,
            measured=ms[key],
            unit="ms",
            baseline="FAISS HNSW (M 32, efSearch 64)",
            baseline_measured=ms["hnsw"],
            goal=None if goal is None else f"≤ {goal:g}×",
            met=None if goal is None else ms[key] <= goal * ms["hnsw"],
        )

    rows = [
        row("audited query (lazy noise)", "audited", 2.0),
        row("noise + selection alone (lazy)", "select"),
        *(
            row(
                f"audited query at σ = {p.noise_sigma:g} ({'lazy' if lazy else 'full derivation'})",
                f"small{i}",
                5.0,
            )
            for i, (p, lazy) in enumerate(zip(smalls, small_lazy))
        ),
        row("verifier re-execution per record", "verify_record"),
    ]
    details = {
        "ms": ms,
        "hnsw_build_or_load_s": built.seconds,
        "windows_build_s": windows.seconds,
        "verify_s": verified.seconds,
        "verify_passed": bool(verdict.passed),
        "records": records,
    }
    for w in (window, *small_windows):
        w.close()
    return rows, details


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = bench_parser(__doc__, repeats=None)
    parser.add_argument("--n", type=int, default=100_000, help="documents")
    parser.add_argument("--queries", type=int, default=20, help="queries (timed rounds)")
    parser.add_argument(
        "--small-sigma",
        type=float,
        nargs="+",
        default=[2.0, 0.5],
        help="σ of the small-σ rows (score units; the range is 2)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="where built HNSW indices are kept",
    )
    session = start("audited_retrieval", parser, argv)
    n = min(session.args.n, 10_000) if session.quick else session.args.n
    queries = min(session.args.queries, 5) if session.quick else session.args.queries
    rows, details = run(n, queries, session.args.small_sigma, session.args.cache)
    print(
        f"verifier: {details['records']} records in {details['verify_s']:.1f} s "
        f"(passed: {details['verify_passed']})"
    )
    return session.finish(rows, details)


if __name__ == "__main__":
    main()
