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
        [--quick] [--json PATH]

Timings vary ±30 % on shared machines: compare the ratio within one run.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, bench_parser, once, start, time_call

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


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = bench_parser(__doc__, repeats=3, quick_repeats=1)
    parser.add_argument("--n", type=int, default=2000, help="stored documents")
    parser.add_argument("--answers", type=int, default=200, help="answers scanned")
    run = start("extraction", parser, argv)
    args = run.args
    n, answers = (300, 20) if args.quick else (args.n, args.answers)
    repeats = run.repeats

    corpus = synthesize("medical", n, seed=3)
    texts = list(corpus.texts)
    copies = [" ".join(t.split()[:64]) for t in texts[: answers // 2]]
    others = background_texts("medical", answers - len(copies), seed=4)
    candidates = copies + [" ".join(t.split()[:64]) for t in others]

    base_build = once(lambda: _BaselineStore(texts))
    build = once(lambda: DatastoreIndex(texts))
    base_store, store = base_build.value, build.value

    base = time_call(lambda: [base_store.best(c) for c in candidates], repeats=repeats, warmup=0)
    cur = time_call(
        lambda: [max_rouge_l(c, store, threshold=0.0)[0] for c in candidates],
        repeats=repeats,
        warmup=0,
    )
    base_s, cur_s = base.median, cur.median
    agree = all(abs(x - y) < 1e-12 for x, y in zip(base.value, cur.value))
    leaks = sum(b > 0.5 for b in cur.value)
    details: dict[str, Any] = {
        "documents": n,
        "answers": len(candidates),
        "repeats": repeats,
        "same_results": agree,
        "leaks": leaks,
        "baseline": {"build_s": base_build.seconds, "scan_s": base_s},
        "current": {"build_s": build.seconds, "scan_s": cur_s},
        "scan_speedup": base_s / cur_s if cur_s > 0 else float("inf"),
    }
    config = {"documents": n, "answers": len(candidates), "repeats": repeats}
    rows = [
        Row(
            name=f"best ROUGE-L scan, {n:,} documents × {len(candidates)} answers",
            config=config,
            measured=cur_s,
            unit="s",
            baseline="the earlier scan (LCS table, postings loop)",
            baseline_measured=base_s,
            notes=f"same results: {agree}; {leaks} leaks",
        ),
        Row(
            name=f"datastore index build, {n:,} documents",
            config={"documents": n},
            measured=build.seconds,
            unit="s",
            baseline="the earlier store (token lists, bags, postings)",
            baseline_measured=base_build.seconds,
        ),
    ]
    print(
        f"{n} documents, {len(candidates)} answers ({leaks} leaks), median of "
        f"{repeats}: baseline scan {base_s:.3f} s, current {cur_s:.3f} s -> "
        f"{details['scan_speedup']:.1f}x faster; same results: {agree}"
    )
    return run.finish(rows, details)


if __name__ == "__main__":
    main()
