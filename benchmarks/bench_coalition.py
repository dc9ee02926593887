"""The coalition-size estimator (collusion paper §5.4) at scale, in one run against a
named baseline.

- ``baseline``: the estimator as it was — the N × N float32 cosine matrix and Prim's
  maximum spanning tree over it, cut at θ (written out here): O(N²) time and memory;
- ``current``: :func:`ragprivacy.audit.coalition_sizes` — an exact blocked range search
  (a float32 pruning bound, float64 verification) and a maximum spanning forest of the
  linked pairs (``search="exact"``, the default);
- ``ivf``: the same with IVF candidates (``search="ivf"``: each query probes its
  ``nprobe`` = 32 nearest of ⌈√N⌉ spherical k-means cells; every candidate verified in
  float64), approximate: its pair recall at θ* against the exact search is measured
  (:func:`ragprivacy.audit.coalition_pairs`, :func:`ragprivacy.audit.pair_recall`);
- ``ivf-bound``: the IVF search that probes every cell the angle bound cannot rule out
  (exact); at N = 10⁴ it runs in full, at N = 10⁵ only the share of cells it would probe
  is computed (on i.i.d. queries it probes nearly all of them).

All must give the same ĉ (checked, not assumed); the figures at N = 10⁴ are ratios of
times (interleaved repeats, medians). At N = 10⁵ the baseline does not run (it would
need a 40 GB matrix); ``ivf`` and the exact search run once each, ``ivf`` first: their
times, peaks of traced memory (tracemalloc) and ĉ, and the growth of the process's
maximum resident set during the ``ivf`` run; then the pair recall at θ* (one more pass of
each, holding every pair).

Windows: :func:`ragprivacy.audit.simulate_window` with 384-d queries (the dimension of
all-MiniLM-L6-v2), 100 queries per account, and a coalition of 10 accounts following P-C
(5 paraphrase intents); the other accounts draw i.i.d. uniform unit-sphere queries,
the expensive case for any pruning. θ = θ* = 0.80, no τ (every pair is compared); at
N = 10⁵ the current estimator runs once more with the sliding window of §5.4 (one query
per time step, τ = 2,000 steps). The current estimator also runs with 1 and 2 BLAS
threads at N = 10⁴.

Usage::

    python benchmarks/bench_coalition.py [--repeats 3] [--nprobe 32] [--dim 384] [--quick]
        [--json PATH]

Timings vary ±30 % on shared machines: compare the ratio within one run.
"""

from __future__ import annotations

import resource
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, bench_parser, once, start, time_interleaved

import ragprivacy.audit.coalition as coalition
from ragprivacy.audit import simulate_window
from ragprivacy.audit.coalition import coalition_pairs, coalition_sizes, pair_recall

THETA = 0.80
TAU = 2000
GOAL_SECONDS = 15.0  # ĉ at 10⁵ × 384 in under 15 s ...
GOAL_BYTES = 2 * 2**30  # ... within 2 GiB, the same ĉ, pair recall 1.0 at θ*
_NO_EDGE = -3.0


def _baseline_sizes(vectors: np.ndarray, accounts: Sequence[str], theta: float) -> int:
    """The earlier estimator: dense float32 similarity, Prim's maximum spanning tree."""
    v = np.asarray(vectors, dtype=np.float64)
    v = (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-300)).astype(np.float32)
    _, codes = np.unique(np.asarray(accounts), return_inverse=True)
    w = v @ v.T
    np.putmask(w, codes[:, None] == codes[None, :], _NO_EDGE)
    n = w.shape[0]
    in_tree = np.zeros(n, dtype=bool)
    in_tree[0] = True
    key = w[0].copy()
    key[0] = -np.inf
    parent = np.zeros(n, dtype=np.int64)
    a = np.empty(n - 1, dtype=np.int64)
    b = np.empty(n - 1, dtype=np.int64)
    wt = np.empty(n - 1)
    for step in range(n - 1):
        j = int(np.argmax(key))
        a[step], b[step], wt[step] = parent[j], j, key[j]
        in_tree[j] = True
        key[j] = -np.inf
        row = w[j]
        upd = (row > key) & ~in_tree
        key[upd] = row[upd]
        parent[upd] = j
    keep = wt >= theta - 1e-12
    graph = coo_matrix((np.ones(int(keep.sum())), (a[keep], b[keep])), shape=(n, n))
    labels = connected_components(graph, directed=False)[1]
    pairs = np.unique(np.stack([labels, codes]), axis=1)
    return int(np.bincount(pairs[0]).max())


def _window(accounts: int, dim: int, seed: int) -> tuple[np.ndarray, list[str]]:
    return simulate_window(
        accounts=accounts, queries=100, dim=dim, k_true=10, pattern="P-C", rng=seed
    )


def _traced(run: Callable[[], int]) -> tuple[float, int, int, int]:
    """Time, result, peak of traced memory, growth of the maximum resident set (bytes)."""
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    timing = once(run)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
    return timing.seconds, timing.value, int(peak), int(rss_growth)


def _recall(v: np.ndarray, names: Sequence[str], search: str, nprobe: int) -> dict[str, Any]:
    """Pair recall at θ* of ``search`` against the exact search (one pass of each)."""
    exact = coalition_pairs(v, names, theta=THETA)
    found = coalition_pairs(v, names, theta=THETA, search=search, nprobe=nprobe)
    return {
        "linked_pairs": int(exact.shape[0]),
        "found_pairs": int(found.shape[0]),
        "pair_recall": pair_recall(found, exact),
    }


def _bound_share(v: np.ndarray) -> float:
    """The mean share of the IVF cells ``ivf-bound`` would probe at θ* (no search run)."""
    x = coalition._unit_rows(v)
    _, probe, _ = coalition._probe_matrix(
        x, x.astype(np.float32), THETA, coalition._Search("ivf-bound")
    )
    return float(probe.mean())


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = bench_parser(__doc__, repeats=3, quick_repeats=1)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--nprobe", type=int, default=32, help="cells each query probes (ivf)")
    run = start("coalition", parser, argv)
    args = run.args
    small, large, dim = (20, 100, 64) if args.quick else (100, 1000, args.dim)
    repeats, nprobe = run.repeats, args.nprobe

    v, names = _window(small, dim, seed=1)

    def current(threads: int) -> Callable[[int], int]:
        return lambda _: coalition_sizes(v, names, [THETA], threads=threads)[0]

    def searched(search: str) -> Callable[[int], int]:
        return lambda _: coalition_sizes(v, names, [THETA], search=search, nprobe=nprobe)[0]

    fns: dict[str, Callable[[int], int]] = {
        "baseline": lambda _: _baseline_sizes(v, names, THETA),
        "current_1": current(1),
        "current_2": current(2),
        "ivf": searched("ivf"),
        "ivf-bound": searched("ivf-bound"),
    }
    # The baseline runs on 1 BLAS thread; the others set their own thread counts.
    with threadpool_limits(limits=1, user_api="blas"):
        timed = time_interleaved(fns, repeats=repeats, warmup=0)
    base_k = timed["baseline"].value
    same = timed["current_1"].value == base_k and timed["current_2"].value == base_k
    same_ivf = timed["ivf"].value == base_k and timed["ivf-bound"].value == base_k
    base_s = timed["baseline"].median
    cur_s = {th: timed[f"current_{th}"].median for th in (1, 2)}
    ivf_s = {s: timed[s].median for s in ("ivf", "ivf-bound")}
    small_recall = _recall(v, names, "ivf", nprobe)

    big_v, big_names = _window(large, dim, seed=2)
    ivf_big_s, ivf_big_k, ivf_peak, ivf_rss = _traced(
        lambda: coalition_sizes(big_v, big_names, [THETA], search="ivf", nprobe=nprobe)[0]
    )
    big_s, big_k, peak, _ = _traced(
        lambda: coalition_sizes(big_v, big_names, [THETA], threads=1)[0]
    )
    # The sliding window of §5.4: one query per time step, τ = 2,000 steps.
    steps = list(range(big_v.shape[0]))
    tau = once(lambda: coalition_sizes(big_v, big_names, [THETA], ts=steps, tau=TAU, threads=1)[0])
    tau_s, tau_k = tau.seconds, tau.value
    big_recall = _recall(big_v, big_names, "ivf", nprobe)

    details: dict[str, Any] = {
        "dim": dim,
        "theta": THETA,
        "repeats": repeats,
        "nprobe": nprobe,
        "small": {
            "queries": v.shape[0],
            "k_hat": base_k,
            "same_k_hat": same,
            "baseline_s": base_s,
            "current_s": cur_s[1],
            "current_2_threads_s": cur_s[2],
            "speedup": base_s / cur_s[1] if cur_s[1] > 0 else float("inf"),
            "ivf_s": ivf_s["ivf"],
            "ivf_bound_s": ivf_s["ivf-bound"],
            "ivf_same_k_hat": same_ivf,
            "ivf_speedup_vs_current": cur_s[1] / ivf_s["ivf"] if ivf_s["ivf"] > 0 else None,
            "ivf_bound_cell_share": _bound_share(v),
            **{f"ivf_{k}": val for k, val in small_recall.items()},
        },
        "large": {
            "queries": big_v.shape[0],
            "k_hat": big_k,
            "current_s": big_s,
            "input_bytes": int(big_v.nbytes),
            "peak_traced_bytes": peak,
            "tau": TAU,
            "current_tau_s": tau_s,
            "k_hat_tau": tau_k,
            "ivf_s": ivf_big_s,
            "ivf_k_hat": ivf_big_k,
            "ivf_same_k_hat": ivf_big_k == big_k,
            "ivf_peak_traced_bytes": ivf_peak,
            "ivf_max_rss_growth_bytes": ivf_rss,
            "ivf_speedup_vs_current": big_s / ivf_big_s if ivf_big_s > 0 else None,
            "ivf_bound_cell_share": _bound_share(big_v),
            **{f"ivf_{k}": val for k, val in big_recall.items()},
        },
    }
    s, g = details["small"], details["large"]
    print(
        f"N = {s['queries']} x {dim}, median of {repeats}: baseline {base_s:.2f} s, current "
        f"{cur_s[1]:.2f} s (2 threads: {cur_s[2]:.2f} s) -> {s['speedup']:.1f}x faster; "
        f"same k_hat: {same} (k_hat = {base_k}); ivf (nprobe {nprobe}) {ivf_s['ivf']:.2f} s, "
        f"ivf-bound {ivf_s['ivf-bound']:.2f} s (probes {s['ivf_bound_cell_share']:.0%} of "
        f"the cells), same k_hat: {same_ivf}, ivf pair recall at theta* "
        f"{s['ivf_pair_recall']:.4f} ({s['ivf_found_pairs']} of {s['ivf_linked_pairs']})"
    )
    print(
        f"N = {g['queries']} x {dim}: ivf {ivf_big_s:.2f} s, k_hat = {ivf_big_k}, peak traced "
        f"{ivf_peak / 2**30:.2f} GiB, max RSS growth {ivf_rss / 2**30:.2f} GiB, pair recall "
        f"at theta* {g['ivf_pair_recall']:.4f} ({g['ivf_found_pairs']} of "
        f"{g['ivf_linked_pairs']}); current (exact) {big_s:.2f} s, k_hat = {big_k}, peak "
        f"traced memory {peak / 2**30:.2f} GiB (input {big_v.nbytes / 2**30:.2f} GiB); "
        f"ivf {g['ivf_speedup_vs_current']:.1f}x faster, same k_hat: {g['ivf_same_k_hat']}; "
        f"ivf-bound would probe {g['ivf_bound_cell_share']:.0%} of the cells; with tau = "
        f"{TAU} steps (one query a step): {tau_s:.2f} s, k_hat = {tau_k}"
    )
    return run.finish(rows(details), details)


def rows(res: dict[str, Any]) -> list[Row]:
    """The comparisons of a run's details: at N = 10⁴ (``small``) the exact search
    against the baseline and the IVF searches against the exact search; at N = 10⁵
    (``large``) ``ivf`` against the exact search in time, memory and pair recall (with
    the goal: under 15 s and 2 GiB, the same ĉ, recall 1.0), and τ against no τ."""
    s, g, d = res["small"], res["large"], res["dim"]
    probe = f"ivf, nprobe {res['nprobe']}"
    exact_s, gib = "exact search", 2.0**30

    def config(size: dict[str, Any], search: str, **kw: Any) -> dict[str, Any]:
        return {"queries": size["queries"], "dim": d, "theta": res["theta"], "search": search,
                **kw}  # fmt: skip

    n_s, n_g = f"{s['queries']:,} × {d}", f"{g['queries']:,} × {d}"
    out = [
        Row(
            name=f"coalition ĉ, {n_s}, exact search",
            config=config(s, "exact", threads=1, repeats=res["repeats"]),
            measured=s["current_s"],
            unit="s",
            baseline="dense matrix + Prim's tree (the earlier estimator)",
            baseline_measured=s["baseline_s"],
            notes=f"same ĉ: {s['same_k_hat']}, ĉ = {s['k_hat']}",
        ),
        Row(
            name=f"coalition ĉ, {n_s}, exact search, 2 BLAS threads",
            config=config(s, "exact", threads=2, repeats=res["repeats"]),
            measured=s["current_2_threads_s"],
            unit="s",
            baseline="exact search, 1 BLAS thread",
            baseline_measured=s["current_s"],
        ),
        Row(
            name=f"coalition ĉ, {n_s}, {probe}",
            config=config(s, "ivf", nprobe=res["nprobe"], repeats=res["repeats"]),
            measured=s["ivf_s"],
            unit="s",
            baseline=exact_s,
            baseline_measured=s["current_s"],
            notes=f"pair recall at θ* {s['ivf_pair_recall']:.4f}",
        ),
        Row(
            name=f"coalition ĉ, {n_s}, ivf-bound",
            config=config(s, "ivf-bound", repeats=res["repeats"]),
            measured=s["ivf_bound_s"],
            unit="s",
            baseline=exact_s,
            baseline_measured=s["current_s"],
            notes=f"probes {s['ivf_bound_cell_share']:.0%} of the cells",
        ),
        Row(
            name=f"coalition ĉ, {n_g}, {probe}: time",
            config=config(g, "ivf", nprobe=res["nprobe"]),
            measured=g["ivf_s"],
            unit="s",
            baseline=exact_s,
            baseline_measured=g["current_s"],
            goal=f"< {GOAL_SECONDS:g} s",
            met=g["ivf_s"] < GOAL_SECONDS,
        ),
        Row(
            name=f"coalition ĉ, {n_g}, {probe}: memory",
            config=config(g, "ivf", nprobe=res["nprobe"]),
            measured=g["ivf_peak_traced_bytes"] / gib,
            unit="GiB",
            baseline=exact_s,
            baseline_measured=g["peak_traced_bytes"] / gib,
            goal="≤ 2 GiB",
            met=max(g["ivf_peak_traced_bytes"], g["ivf_max_rss_growth_bytes"]) <= GOAL_BYTES,
            notes=f"peak traced; max RSS growth {g['ivf_max_rss_growth_bytes'] / gib:.2f} GiB",
        ),
        Row(
            name=f"coalition ĉ, {n_g}, {probe}: ĉ and pair recall at θ*",
            config=config(g, "ivf", nprobe=res["nprobe"]),
            measured=g["ivf_found_pairs"],
            unit="linked pairs",
            baseline=f"exact search (ĉ = {g['k_hat']})",
            baseline_measured=g["ivf_linked_pairs"],
            goal="same ĉ, recall 1.0",
            met=bool(g["ivf_same_k_hat"]) and g["ivf_pair_recall"] == 1.0,
            notes=f"ĉ = {g['ivf_k_hat']}",
        ),
        Row(
            name=f"coalition ĉ, {n_g}, exact search, τ = {g['tau']:,} steps",
            config=config(g, "exact", tau=g["tau"]),
            measured=g["current_tau_s"],
            unit="s",
            baseline="exact search, no τ",
            baseline_measured=g["current_s"],
            notes=f"ĉ = {g['k_hat_tau']}",
        ),
    ]
    return out


if __name__ == "__main__":
    main()
