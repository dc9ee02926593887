"""Per-token cost of DP-RAG by token voting (Private-RAG Alg. 4) against plain RAG.

Both answer the same questions of the synthetic knowledge corpus with the reference
reader: plain RAG (top-5, one generation) and ``dp_vote`` with m = 50 voters of one
document each (the RP paper's m = 50, §4.1; it measured ~30× plain RAG's latency). The
cost per generated token is the answer's wall time divided by its token count.

Usage::

    python benchmarks/bench_dp_vote.py [--n 2000] [--questions 40] [--voters 50]

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ragprivacy.corpus import background_texts, synthesize
from ragprivacy.generate import create_generator, tokenize
from ragprivacy.rag import DPVoteRAG, StandardRAG
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever


def _per_token(system: object, questions: list[str]) -> tuple[float, float]:
    total, tokens = 0.0, 0
    for q in questions:
        t = time.perf_counter()
        r = system.answer(q)  # type: ignore[attr-defined]
        total += time.perf_counter() - t
        tokens += max(1, len(r.tokens))
    return total / tokens, tokens / len(questions)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--questions", type=int, default=40)
    p.add_argument("--voters", type=int, default=50)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    corpus = synthesize("knowledge", a.n, seed=1)
    kb = KnowledgeBase.build(corpus, embedder="lsa")
    bg = background_texts("knowledge", 1000, seed=2)
    gen = create_generator("reference", background=bg)
    words = {w for d in corpus for w in tokenize(d.text)}
    vocab = sorted(words | {w for t in bg for w in tokenize(t)})
    qs = [q.question for q in corpus.questions[: a.questions]]
    plain = StandardRAG(TopKRetriever(kb, k=5), gen)
    vote = DPVoteRAG(
        TopKRetriever(kb, k=a.voters),
        gen,
        epsilon=20.0,
        epsilon_token=1.0,
        max_tokens=16,
        simulation=True,
        vocabulary=vocab,
        rng=0,
    )
    _per_token(plain, qs[:3])
    _per_token(vote, qs[:3])
    t_plain, len_plain = _per_token(plain, qs)
    t_vote, len_vote = _per_token(vote, qs)
    row = {
        "voters": a.voters,
        "plain_ms_per_token": t_plain * 1e3,
        "dp_vote_ms_per_token": t_vote * 1e3,
        "ratio": t_vote / t_plain,
        "plain_tokens_per_answer": len_plain,
        "dp_vote_tokens_per_answer": len_vote,
        "numpy": np.__version__,
    }
    print(json.dumps(row))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f, indent=2)


if __name__ == "__main__":
    main()
