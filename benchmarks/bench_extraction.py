"""The untargeted-extraction leak test's datastore scan: the best ROUGE-L of an answer
over every stored document (random-projection paper G.2), in one run against a named
baseline.

- ``baseline``: the scan as it was — the textbook O(|a|·|b|) dynamic programme for the
  LCS and a per-word postings loop in Python for the bag-of-words bounds (both written
  out here);
- ``current``: :func:`ragprivacy.eval.metrics.max_rouge_l` over a
  :class:`~ragprivacy.eval.metrics.DatastoreIndex` (bit-parallel LCS, the bounds of every
  document from one sparse product).

Both must give the same best ROUGE-L for every answer (checked, not assumed); the figure
is the ratio of their times on the same answers. Answers: half copy a stored record's
opening (what a leaking RAG system returns), half are public background text of the same
kind (no leak: the scan cannot stop early, the expensive case).

Usage::

    python benchmarks/bench_extraction.py [--n 2000] [--answers 200] [--repeats 3]
        [--quick] [--json OUT]

Timings vary ±30 % on shared machines: compare the ratio within one run.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ragprivacy.corpus import background_texts, synthesize
from ragprivacy.eval.metrics import DatastoreIndex, max_rouge_l, rouge_tokens


def _lcs_by_table(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
        prev = cur
    return prev[-1]


def _f(lcs: int, n_a: int, n_b: int) -> float:
    return 0.0 if lcs == 0 else 2.0 * lcs / (n_a + n_b)


class _BaselineStore:
    """The earlier scan: token lists, bags of words and a word → documents postings map."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.tokens = [rouge_tokens(t) for t in texts]
        self.bags = [Counter(t) for t in self.tokens]
        self.postings: dict[str, list[int]] = {}
        for i, bag in enumerate(self.bags):
            for w in bag:
                self.postings.setdefault(w, []).append(i)

    def best(self, candidate: str) -> float:
        a = rouge_tokens(candidate)
        if not a:
            return 0.0
        bag = Counter(a)
        inter: dict[int, int] = {}
        for w, c in bag.items():
            for i in self.postings.get(w, ()):
                inter[i] = inter.get(i, 0) + min(c, self.bags[i][w])
        order = sorted(inter, key=lambda i: -_f(inter[i], len(a), len(self.tokens[i])))
        best = 0.0
        for i in order:
            if _f(inter[i], len(a), len(self.tokens[i])) <= best:
                break
            best = max(best, _f(_lcs_by_table(a, self.tokens[i]), len(a), len(self.tokens[i])))
        return best


def _median_time(run: Callable[[], list[float]], repeats: int) -> tuple[float, list[float]]:
    times, out = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="stored documents")
    parser.add_argument("--answers", type=int, default=200, help="answers scanned")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="seconds: 300 documents, 20 answers")
    parser.add_argument("--json", default=None, help="write the result here")
    args = parser.parse_args(argv)
    n, answers, repeats = (300, 20, 1) if args.quick else (args.n, args.answers, args.repeats)

    corpus = synthesize("medical", n, seed=3)
    texts = list(corpus.texts)
    copies = [" ".join(t.split()[:64]) for t in texts[: answers // 2]]
    others = background_texts("medical", answers - len(copies), seed=4)
    candidates = copies + [" ".join(t.split()[:64]) for t in others]

    t0 = time.perf_counter()
    base_store = _BaselineStore(texts)
    base_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    store = DatastoreIndex(texts)
    build = time.perf_counter() - t0

    base_s, base = _median_time(lambda: [base_store.best(c) for c in candidates], repeats)
    cur_s, cur = _median_time(
        lambda: [max_rouge_l(c, store, threshold=0.0)[0] for c in candidates], repeats
    )
    agree = all(abs(x - y) < 1e-12 for x, y in zip(base, cur))
    result: dict[str, Any] = {
        "documents": n,
        "answers": len(candidates),
        "repeats": repeats,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "same_results": agree,
        "leaks": sum(b > 0.5 for b in cur),
        "baseline": {"build_s": base_build, "scan_s": base_s},
        "current": {"build_s": build, "scan_s": cur_s},
        "scan_speedup": base_s / cur_s if cur_s > 0 else float("inf"),
    }
    print(
        f"{n} documents, {len(candidates)} answers ({result['leaks']} leaks), median of "
        f"{repeats}: baseline scan {base_s:.3f} s, current {cur_s:.3f} s -> "
        f"{result['scan_speedup']:.1f}x faster; same results: {agree}"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
