"""Throughput of the noise samplers, all in one run (draws per second, one core).

Compares, on the same machine and in the same process:

- ragprivacy's secure samplers: exact discrete Gaussian and discrete Laplace from ChaCha20
  bits (``ragprivacy.dp.discrete_gaussian`` / ``discrete_laplace``);
- ragprivacy's float fast path for simulation (``gaussian_noise_float``);
- numpy's ``standard_normal`` (PCG64) — the floor for any float Gaussian noise;
- the raw ChaCha20 keystream (the secure samplers' bit source);
- OpenDP's vetted samplers (``make_gaussian`` / ``make_laplace`` on integers), when the
  ``opendp`` package is importable; skipped otherwise.

It also counts how often the secure samplers fall back to their exact (slow) comparison
path, per draw, at each σ: the figure docs/dp.md quotes.

Usage::

    python benchmarks/bench_samplers.py [--n 1000000] [--repeats 3] [--json out.json]

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

from ragprivacy.dp import (
    ChaCha20Bits,
    GaussianNoisyTopK,
    discrete_gaussian,
    discrete_laplace,
    gaussian_noise_float,
)


def _time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm up (imports, caches)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def _opendp_cases(n: int) -> dict[str, Callable[[], object]]:
    try:
        import opendp.prelude as dp
    except ImportError:
        return {}
    dp.enable_features("contrib")
    cases: dict[str, Callable[[], object]] = {}
    zeros = [0] * n
    gauss = dp.m.make_gaussian(
        dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int), scale=50.0
    )
    lap = dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=50.0
    )
    cases["opendp discrete gaussian sigma=50"] = lambda: gauss(zeros)
    cases["opendp discrete laplace scale=50"] = lambda: lap(zeros)
    return cases


def _exact_path_rates(src: ChaCha20Bits, n: int) -> dict[str, float]:
    """Exact-path comparisons per draw of ``discrete_gaussian`` at several σ (grid units)."""
    import ragprivacy.dp.samplers as samplers

    real = samplers.LazyUniform
    made = [0]

    class Counting(real):  # type: ignore[misc, valid-type]
        def __init__(self, prefix: int, extra: ChaCha20Bits) -> None:
            made[0] += 1
            super().__init__(prefix, extra)

    out: dict[str, float] = {}
    samplers.LazyUniform = Counting  # type: ignore[misc]
    try:
        for sigma in (1.0, 50.0, 2.0**20, 3584.4 * 2**20, 2.0**32, 2.0**39):
            made[0] = 0
            discrete_gaussian(sigma, n, bits=src)
            out[f"sigma=2^{np.log2(sigma):.1f}"] = made[0] / n
    finally:
        samplers.LazyUniform = real  # type: ignore[misc]
    return out


def run(n: int, repeats: int, opendp_n: int) -> dict[str, object]:
    """Time every sampler; returns a JSON-ready report."""
    src = ChaCha20Bits.from_entropy()
    rng = np.random.default_rng(0)
    cases: dict[str, tuple[int, Callable[[], object]]] = {
        "numpy standard_normal (PCG64)": (n, lambda: rng.standard_normal(n)),
        "ragprivacy gaussian_noise_float (simulation)": (
            n,
            lambda: gaussian_noise_float(0.1, n, rng=rng),
        ),
        "chacha20 keystream, 8 bytes/draw": (n, lambda: src.uint64(n)),
    }
    # σ in grid units: 2^20 (σ = 1 on the default grid) up to the collusion paper's
    # σ = 3584 on the default 2^-20 grid (≈ 2^31.8) and 2^32, where geometric draws are split.
    for sigma in (1.0, 50.0, 2.0**20, 3584.4 * 2**20, 2.0**32):
        cases[f"ragprivacy discrete_gaussian sigma=2^{np.log2(sigma):.1f} (secure)"] = (
            n,
            lambda s=sigma: discrete_gaussian(s, n, bits=src),
        )
    for scale in (1.0, 50.0, 2.0**32):
        cases[f"ragprivacy discrete_laplace scale=2^{np.log2(scale):.1f} (secure)"] = (
            n,
            lambda s=scale: discrete_laplace(s, n, bits=src),
        )
    scores = np.random.default_rng(1).uniform(-1, 1, 100_000)
    for sigma in (0.05, 3584.4):
        mech = GaussianNoisyTopK(sigma=sigma, k=5)
        cases[f"GaussianNoisyTopK sigma={sigma:g}, N=1e5 (secure, per score)"] = (
            scores.size,
            lambda m=mech: m.select(scores, bits=src),
        )
    opendp = _opendp_cases(opendp_n)
    for name, fn in opendp.items():
        cases[name] = (opendp_n, fn)

    rows = []
    base = None
    for name, (count, fn) in cases.items():
        seconds = _time(fn, repeats if count == n else 1)
        rate = count / seconds
        if base is None:
            base = rate
        rows.append({"sampler": name, "draws": count, "seconds": seconds, "draws_per_s": rate})
    for row in rows:
        row["relative_to_numpy"] = row["draws_per_s"] / base  # type: ignore[operator]
    return {
        "exact_path_per_draw": _exact_path_rates(src, n),
        "machine": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "cpu_count": os.cpu_count(),
        "opendp": "measured" if opendp else "not installed (skipped)",
        "results": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="draws per timing")
    parser.add_argument("--repeats", type=int, default=3, help="timings per sampler (median)")
    parser.add_argument("--opendp-n", type=int, default=100_000, help="draws for OpenDP")
    parser.add_argument("--json", type=str, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    report = run(args.n, args.repeats, args.opendp_n)
    width = max(len(r["sampler"]) for r in report["results"])  # type: ignore[index]
    print(f"{'sampler':<{width}}  {'draws/s':>12}  {'x numpy':>8}")
    for r in report["results"]:  # type: ignore[union-attr]
        print(f"{r['sampler']:<{width}}  {r['draws_per_s']:>12.3g}  {r['relative_to_numpy']:>8.3f}")
    print(f"OpenDP: {report['opendp']}")
    print("exact-path comparisons per draw (discrete_gaussian):")
    for key, rate in report["exact_path_per_draw"].items():  # type: ignore[union-attr]
        print(f"  {key:<14} {rate:.3g}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
