"""Per-token cost of kNN-LM (RP paper §4.1) against plain RAG.

Both continue the same prompts of the synthetic medical corpus with the reference
reader: plain RAG (top-5 documents, one generation) and ``knnlm`` (one datastore search
per generated token over a token-level datastore of the same records, K = 32, λ = 0.1).
The cost per generated token is the answer's wall time divided by its token count; the
report also splits kNN-LM's token into its parts (the reader's distribution, the
datastore search, the mixing), so a regression shows where it is.

Usage::

    python benchmarks/bench_knnlm.py [--n 400] [--prompts 30] [--index exact|faiss-hnsw]

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import numpy as np

from ragprivacy.corpus import background_texts, synthesize
from ragprivacy.generate import Task, create_generator, tokenize
from ragprivacy.rag import KNN_WINDOW, KNNLM, Query, StandardRAG, knn_datastore
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever


def _per_token(system: object, prompts: list[Query]) -> tuple[float, float]:
    total, tokens = 0.0, 0
    for q in prompts:
        t = time.perf_counter()
        r = system.answer(q)  # type: ignore[attr-defined]
        total += time.perf_counter() - t
        tokens += max(1, len(r.tokens))
    return total / tokens, tokens / len(prompts)


class _Timed:
    """Wraps a callable and sums its wall time."""

    def __init__(self, fn: object) -> None:
        self.fn = fn
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, *args: object, **kw: object) -> object:
        t = time.perf_counter()
        try:
            return self.fn(*args, **kw)  # type: ignore[operator]
        finally:
            self.seconds += time.perf_counter() - t
            self.calls += 1


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--n", type=int, default=400, help="medical records in the datastore")
    p.add_argument("--prompts", type=int, default=30)
    p.add_argument("--index", default="exact", help="datastore index: exact or faiss-hnsw")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    corpus = synthesize("medical", a.n, seed=1)
    bg = background_texts("medical", 1000, seed=2)
    gen = create_generator("reference", background=bg)
    kb = KnowledgeBase.build(corpus, embedder="lsa")
    t = time.perf_counter()
    store = KnowledgeBase.build(
        knn_datastore(corpus), embedder=kb.embedder, index=a.index, progress=False
    )
    build_s = time.perf_counter() - t
    opts = {"max_tokens": a.max_tokens}
    # continue the opening words of stored records (what an extraction attack sends)
    prompts = [
        Query(" ".join(tokenize(d.text)[: 2 * KNN_WINDOW]), Task.CONTINUE, options=opts)
        for d in list(corpus)[: a.prompts]
    ]
    plain = StandardRAG(TopKRetriever(kb, k=5), gen)
    knn = KNNLM(TopKRetriever(store, k=32), gen, lam=0.1, max_tokens=a.max_tokens)
    _per_token(plain, prompts[:3])
    _per_token(knn, prompts[:3])
    t_plain, len_plain = _per_token(plain, prompts)
    dist = _Timed(gen.next_token_distribution)
    search = _Timed(knn.retriever.retrieve)
    mix = _Timed(knn._mix_argmax)
    gen.next_token_distribution = dist  # type: ignore[method-assign]  # plain RAG is done
    knn.retriever.retrieve = search  # type: ignore[method-assign]
    knn._mix_argmax = mix  # type: ignore[method-assign]
    t_knn, len_knn = _per_token(knn, prompts)
    tokens = max(1, dist.calls)
    row = {
        "records": a.n,
        "datastore_entries": len(store),
        "datastore_index": a.index,
        "datastore_build_s": build_s,
        "plain_ms_per_token": t_plain * 1e3,
        "knnlm_ms_per_token": t_knn * 1e3,
        "ratio": t_knn / t_plain,
        "knnlm_reader_ms_per_token": dist.seconds / tokens * 1e3,
        "knnlm_search_ms_per_token": search.seconds / tokens * 1e3,
        "knnlm_mix_ms_per_token": mix.seconds / tokens * 1e3,
        "plain_tokens_per_answer": len_plain,
        "knnlm_tokens_per_answer": len_knn,
        "numpy": np.__version__,
    }
    print(json.dumps(row))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(row, f, indent=2)
    return row


if __name__ == "__main__":
    main()
