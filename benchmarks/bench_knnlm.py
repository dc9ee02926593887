"""Per-token cost of kNN-LM (RP paper §4.1) against plain RAG.

Both continue the same prompts of the synthetic medical corpus with the reference
reader: plain RAG (top-5 documents, one generation) and ``knnlm`` (one datastore search
per generated token over a token-level datastore of the same records, K = 32, λ = 0.1).
The cost per generated token is the answer's wall time divided by its token count; the
report also splits kNN-LM's token into its parts (the reader's distribution, the
datastore search, the mixing), so a regression shows where it is.

Usage::

    python benchmarks/bench_knnlm.py [--n 400] [--prompts 30] [--index exact|faiss-hnsw]
        [--max-tokens 16] [--repeats 1] [--quick] [--json PATH]

``--quick``: 30 records, 4 prompts, 6 tokens.

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, StageTimer, bench_parser, once, start

from ragprivacy.corpus import background_texts, synthesize
from ragprivacy.generate import Task, create_generator, tokenize
from ragprivacy.rag import KNN_WINDOW, KNNLM, Query, StandardRAG, knn_datastore
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever


def _per_token(system: Any, prompts: list[Query]) -> tuple[float, float]:
    """Seconds per generated token over the answers to ``prompts`` (each answer counts
    at least one token), and tokens per answer."""
    total, tokens = 0.0, 0
    for q in prompts:
        answer = once(partial(system.answer, q))
        total += answer.seconds
        tokens += max(1, len(answer.value.tokens))
    return total / tokens, tokens / len(prompts)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = bench_parser(__doc__, repeats=1, repeats_help="timed passes over the prompts")
    p.add_argument("--n", type=int, default=400, help="medical records in the datastore")
    p.add_argument("--prompts", type=int, default=30)
    p.add_argument("--index", default="exact", help="datastore index: exact or faiss-hnsw")
    p.add_argument("--max-tokens", type=int, default=16)
    run = start("knnlm", p, argv)
    a = run.args
    if a.quick:
        a.n, a.prompts, a.max_tokens = 30, 4, 6
    corpus = synthesize("medical", a.n, seed=1)
    bg = background_texts("medical", 1000, seed=2)
    gen = create_generator("reference", background=bg)
    kb = KnowledgeBase.build(corpus, embedder="lsa")
    built = once(
        lambda: KnowledgeBase.build(
            knn_datastore(corpus), embedder=kb.embedder, index=a.index, progress=False
        )
    )
    store = built.value
    opts = {"max_tokens": a.max_tokens}
    # continue the opening words of stored records (what an extraction attack sends)
    prompts = [
        Query(" ".join(tokenize(d.text)[: 2 * KNN_WINDOW]), Task.CONTINUE, options=opts)
        for d in list(corpus)[: a.prompts]
    ]
    plain = StandardRAG(TopKRetriever(kb, k=5), gen)
    knn = KNNLM(TopKRetriever(store, k=32), gen, lam=0.1, max_tokens=a.max_tokens)
    _per_token(plain, prompts[:3])  # warm-up
    _per_token(knn, prompts[:3])
    # kNN-LM's token in parts: the reader's distribution, the datastore search, the mixing
    stages = StageTimer()
    parts = [
        (gen, "next_token_distribution", "reader"),
        (knn.retriever, "retrieve", "search"),
        (knn, "_mix_argmax", "mix"),
    ]
    t_plain, t_knn, len_plain, len_knn = [], [], 0.0, 0.0
    for _ in range(a.repeats):
        seconds, len_plain = _per_token(plain, prompts)
        t_plain.append(seconds)
        with stages.patched(parts):
            seconds, len_knn = _per_token(knn, prompts)
        t_knn.append(seconds)
    plain_ms = 1e3 * statistics.median(t_plain)
    knn_ms = 1e3 * statistics.median(t_knn)
    tokens = max(1, stages.calls.get("reader", 0))
    result = {
        "records": a.n,
        "datastore_entries": len(store),
        "datastore_index": a.index,
        "datastore_build_s": built.seconds,
        "repeats": a.repeats,
        "plain_ms_per_token": plain_ms,
        "knnlm_ms_per_token": knn_ms,
        "ratio": knn_ms / plain_ms,
        **{
            f"knnlm_{part}_ms_per_token": stages.seconds.get(part, 0.0) / tokens * 1e3
            for part in ("reader", "search", "mix")
        },
        "plain_tokens_per_answer": len_plain,
        "knnlm_tokens_per_answer": len_knn,
    }
    print(json.dumps(result))
    row = Row(
        name=f"kNN-LM per token, {a.index} datastore of {len(store):,} entries",
        config={
            "records": a.n,
            "prompts": len(prompts),
            "index": a.index,
            "k": 32,
            "lam": 0.1,
            "max_tokens": a.max_tokens,
            "repeats": a.repeats,
        },
        measured=knn_ms,
        unit="ms/token",
        baseline="plain RAG (top-5)",
        baseline_measured=plain_ms,
        notes=", ".join(
            f"{part} {result[f'knnlm_{part}_ms_per_token']:.2f}"
            for part in ("reader", "search", "mix")
        ),
    )
    return run.finish([row], result)


if __name__ == "__main__":
    main()
