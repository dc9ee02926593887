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

    python benchmarks/bench_samplers.py [--n 1000000] [--repeats 3] [--opendp-n 100000]
        [--quick] [--json PATH]

``--quick``: 20,000 draws (2,000 for OpenDP), one repeat.

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, bench_parser, start, time_call

from ragprivacy.dp import (
    ChaCha20Bits,
    GaussianNoisyTopK,
    discrete_gaussian,
    discrete_laplace,
    gaussian_noise_float,
)


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


def run(n: int, repeats: int, opendp_n: int) -> dict[str, Any]:
    """Time every sampler (the median of ``repeats`` after a warm-up; one timing of the
    cases of other sizes); returns a JSON-ready report."""
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
            partial(discrete_gaussian, sigma, n, bits=src),
        )
    for scale in (1.0, 50.0, 2.0**32):
        cases[f"ragprivacy discrete_laplace scale=2^{np.log2(scale):.1f} (secure)"] = (
            n,
            partial(discrete_laplace, scale, n, bits=src),
        )
    scores = np.random.default_rng(1).uniform(-1, 1, 100_000)
    for sigma in (0.05, 3584.4):
        mech = GaussianNoisyTopK(sigma=sigma, k=5)
        cases[f"GaussianNoisyTopK sigma={sigma:g}, N=1e5 (secure, per score)"] = (
            scores.size,
            partial(mech.select, scores, bits=src),
        )
    opendp = _opendp_cases(opendp_n)
    for name, fn in opendp.items():
        cases[name] = (opendp_n, fn)

    rows: list[dict[str, Any]] = []
    base = None
    for name, (count, fn) in cases.items():
        seconds = time_call(fn, repeats=repeats if count == n else 1).median
        rate = count / seconds
        if base is None:
            base = rate
        rows.append({"sampler": name, "draws": count, "seconds": seconds, "draws_per_s": rate})
    for row in rows:
        row["relative_to_numpy"] = row["draws_per_s"] / base  # type: ignore[operator]
    return {
        "draws": n,
        "repeats": repeats,
        "exact_path_per_draw": _exact_path_rates(src, n),
        "opendp": "measured" if opendp else "not installed (skipped)",
        "results": rows,
    }


def rows(report: dict[str, Any]) -> list[Row]:
    """Each sampler's draws per second against numpy's ``standard_normal`` (the first
    case)."""
    base, *others = report["results"]
    return [
        Row(
            name=r["sampler"],
            config={"draws": r["draws"]},
            measured=r["draws_per_s"],
            unit="draws/s",
            baseline=base["sampler"],
            baseline_measured=base["draws_per_s"],
        )
        for r in others
    ]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = bench_parser(__doc__, repeats=3, quick_repeats=1, repeats_help="timings per sampler")
    parser.add_argument("--n", type=int, default=1_000_000, help="draws per timing")
    parser.add_argument("--opendp-n", type=int, default=100_000, help="draws for OpenDP")
    bench = start("samplers", parser, argv)
    args = bench.args
    if args.quick:
        args.n, args.opendp_n = 20_000, 2_000
    report = run(args.n, args.repeats, args.opendp_n)
    print(f"OpenDP: {report['opendp']}")
    print("exact-path comparisons per draw (discrete_gaussian):")
    for key, rate in report["exact_path_per_draw"].items():
        print(f"  {key:<14} {rate:.3g}")
    return bench.finish(rows(report), report)


if __name__ == "__main__":
    main()
