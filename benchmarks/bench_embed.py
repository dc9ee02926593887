"""Embedders: encoding throughput and retrieval recall, all in one run (ratios).

1. Throughput: texts/s of each embedder encoding the same documents, with the ratio to a
   baseline embedder (``hashing`` by default), plus set-up time (fit for ``lsa``, model
   load for ``minilm``).
2. Recall@1/@5 of the gold document for one question per fact, by inner product:
   the ``lsa`` defaults against alternatives (width, bigrams, stop words, singular-value
   weighting, converged SVD, word+char TF-IDF), plain TF-IDF (no SVD; an upper
   reference), ``hashing`` and ``minilm``; on the package's synthetic ``knowledge``
   corpus and on the proxy corpora of ``_knowledge_proxy.py`` (Zipf or Faker names).

Usage::

    python benchmarks/bench_embed.py [--quick] [--json PATH] [--embedders lsa hashing minilm]
        [--baseline hashing] [--skip-recall] [--repeats 3]

``--quick`` is a smoke run of a few seconds (small inputs, no MiniLM unless named).
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

from _harness import Row, bench_parser, once, start, time_call
from _knowledge_proxy import make_knowledge_proxy, recall_at

from ragprivacy.embed import Embedder, LsaEmbedder, create_embedder

Dataset = tuple[list[str], list[str], np.ndarray]


def knowledge_corpus(n: int, seed: int = 0) -> Dataset:
    """Documents, single-hop questions and gold positions of ``synthesize("knowledge")``."""
    from ragprivacy.corpus import synthesize

    corpus = synthesize("knowledge", n, seed=seed)
    position = {doc.id: i for i, doc in enumerate(corpus)}
    items = [q for q in corpus.questions if q.hops == 1 and q.support_ids]
    gold = np.array([position[q.support_ids[0]] for q in items])
    return [doc.text for doc in corpus], [q.question for q in items], gold


def proxy_corpus(n: int, names: str) -> Dataset:
    proxy = make_knowledge_proxy(n, rng=0, names=names)
    return proxy.docs, proxy.questions, proxy.gold


def _normalise(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _tfidf_recall(docs: list[str], questions: list[str], gold: np.ndarray) -> dict[int, float]:
    """Plain TF-IDF cosine (the LSA defaults' vocabulary, no SVD)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(sublinear_tf=True, stop_words="english", strip_accents="unicode")
    d = vec.fit_transform(docs)
    q = vec.transform(questions)
    scores = (q @ d.T).toarray()
    gold_scores = scores[np.arange(len(gold)), gold]
    rank = (scores >= gold_scores[:, None]).sum(axis=1) - 1
    return {k: float((rank < k).mean()) for k in (1, 5)}


def _word_char_lsa(
    docs: list[str], questions: list[str], gold: np.ndarray, k: int
) -> dict[int, float]:
    """TF-IDF over words and char_wb 3-5-grams side by side, then the default SVD."""
    import scipy.sparse as sp
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.utils.extmath import randomized_svd

    word = TfidfVectorizer(sublinear_tf=True, stop_words="english", dtype=np.float32)
    char = TfidfVectorizer(sublinear_tf=True, analyzer="char_wb", ngram_range=(3, 5))
    x = sp.hstack([word.fit_transform(docs), char.fit_transform(docs)]).tocsr()
    xq = sp.hstack([word.transform(questions), char.transform(questions)]).tocsr()
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # as LsaEmbedder does by default
        _, s, vt = randomized_svd(x, min(k, min(x.shape) - 1), n_iter=0, random_state=0)
    w = (vt.T * s**-0.5).astype(np.float32)
    return recall_at(_normalise(np.asarray(x @ w)), _normalise(np.asarray(xq @ w)), gold)


def _embedder_recall(embedder: Embedder, data: Dataset) -> tuple[dict[int, float], float]:
    docs, questions, gold = data

    def fit_and_encode() -> dict[int, float]:
        if isinstance(embedder, LsaEmbedder):
            embedder.fit(docs)
        d = embedder.encode(docs, progress=False)
        q = embedder.encode(questions, progress=False)
        return recall_at(d, q, gold)

    timing = once(fit_and_encode)
    return timing.value, timing.seconds


DEFAULT_LSA = "lsa (default: k=384, words, stop words, p=0.5, n_iter=0)"
LSA_VARIANTS: dict[str, dict[str, Any]] = {
    DEFAULT_LSA: {},
    "lsa k=128": {"n_components": 128},
    "lsa k=256": {"n_components": 256},
    "lsa k=512": {"n_components": 512},
    "lsa + word bigrams": {"ngram_range": (1, 2)},
    "lsa without stop words": {"stop_words": None},
    "lsa p=1 (TruncatedSVD.transform)": {"singular_power": 1.0},
    "lsa n_iter=2": {"n_iter": 2},
    "lsa n_iter=5 (converged SVD)": {"n_iter": 5},
    "lsa k=256, n_iter=5, p=1 (classic LSA)": {
        "n_components": 256,
        "n_iter": 5,
        "singular_power": 1.0,
    },
}
QUICK_VARIANTS = (DEFAULT_LSA, "lsa k=128")
LARGE_VARIANTS = (
    DEFAULT_LSA,
    "lsa + word bigrams",
    "lsa p=1 (TruncatedSVD.transform)",
    "lsa n_iter=5 (converged SVD)",
)


def bench_recall(
    datasets: dict[str, Callable[[], Dataset]],
    variants: Sequence[str],
    others: Sequence[str],
    extras: bool,
) -> list[dict[str, Any]]:
    rows = []
    for data_name, make in datasets.items():
        data = make()
        for variant in variants:
            recall, seconds = _embedder_recall(LsaEmbedder(**LSA_VARIANTS[variant]), data)
            rows.append(_row(data_name, variant, recall, seconds))
        if extras:
            tfidf = once(partial(_tfidf_recall, *data))
            rows.append(
                _row(data_name, "tf-idf cosine, no SVD (reference)", tfidf.value, tfidf.seconds)
            )
            word_char = once(partial(_word_char_lsa, *data, 384))
            rows.append(
                _row(
                    data_name,
                    "lsa over word + char 3-5-gram TF-IDF, k=384",
                    word_char.value,
                    word_char.seconds,
                )
            )
        for name in others:
            emb = create_embedder(name)
            recall, seconds = _embedder_recall(emb, data)
            rows.append(_row(data_name, name, recall, seconds))
    return rows


def _row(data: str, variant: str, recall: dict[int, float], seconds: float) -> dict[str, Any]:
    row = {
        "data": data,
        "embedder": variant,
        "recall@1": round(recall[1], 4),
        "recall@5": round(recall[5], 4),
        "seconds": round(seconds, 2),
    }
    print(
        f"  {data:<22} {variant:<58} R@1 {row['recall@1']:.4f}  R@5 {row['recall@5']:.4f}"
        f"  ({row['seconds']:.1f} s fit+encode)",
        flush=True,
    )
    return row


def bench_throughput(
    names: Sequence[str], texts: list[str], baseline: str, repeats: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in names:

        def make(name: str = name) -> Embedder:
            emb = create_embedder(name)
            if isinstance(emb, LsaEmbedder):
                emb.fit(texts)
            return emb

        made = once(make)
        emb, setup = made.value, made.seconds
        emb.encode(texts[: min(32, len(texts))])  # warm-up
        best = time_call(partial(emb.encode, texts, progress=False), repeats=repeats, warmup=0).min
        rows.append(
            {
                "embedder": name,
                "dim": emb.dim,
                "texts": len(texts),
                "setup_s": round(setup, 3),
                "encode_s": round(best, 4),
                "texts_per_s": round(len(texts) / best, 1),
            }
        )
    base = next((r for r in rows if r["embedder"] == baseline), rows[0])
    for r in rows:
        r["ratio_to_" + base["embedder"]] = round(r["texts_per_s"] / base["texts_per_s"], 3)
        print(
            f"  {r['embedder']:<10} dim {r['dim']:>5}  {r['texts_per_s']:>10.1f} texts/s  "
            f"x{r['ratio_to_' + base['embedder']]:<8} setup {r['setup_s']:.2f} s",
            flush=True,
        )
    return rows


def rows(res: dict[str, Any]) -> list[Row]:
    """Encoding throughput of each embedder against the baseline embedder, and recall@5
    of each alternative against the ``lsa`` defaults on the same data."""
    out: list[Row] = []
    throughput = res["throughput"]
    base = next((r for r in throughput if r["embedder"] == res["baseline"]), throughput[0])
    for r in throughput:
        if r is base:
            continue
        out.append(
            Row(
                name=f"encoding throughput, {r['embedder']}",
                config={"embedder": r["embedder"], "dim": r["dim"], "texts": r["texts"]},
                measured=r["texts_per_s"],
                unit="texts/s",
                baseline=base["embedder"],
                baseline_measured=base["texts_per_s"],
                notes=f"set-up {r['setup_s']:.2f} s",
            )
        )
    defaults = {r["data"]: r for r in res.get("recall", []) if r["embedder"] == DEFAULT_LSA}
    for r in res.get("recall", []):
        default = defaults.get(r["data"])
        if default is None or r is default or not default["recall@5"]:
            continue
        out.append(
            Row(
                name=f"recall@5, {r['embedder']}, {r['data']}",
                config={"data": r["data"], "embedder": r["embedder"]},
                measured=r["recall@5"],
                unit="recall@5",
                baseline=DEFAULT_LSA,
                baseline_measured=default["recall@5"],
                notes=f"recall@1 {r['recall@1']:.4f}",
            )
        )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = bench_parser(__doc__, repeats=3, quick_repeats=1, repeats_help="timed encodings (best)")
    p.add_argument("--embedders", nargs="+", default=None)
    p.add_argument("--baseline", default="hashing")
    p.add_argument("--skip-recall", action="store_true")
    run = start("embed", p, argv)
    a = run.args
    names = a.embedders or (["lsa", "hashing"] if a.quick else ["lsa", "hashing", "minilm"])
    n_docs = 300 if a.quick else 2000
    texts = make_knowledge_proxy(n_docs, rng=1).docs
    result: dict[str, Any] = {"baseline": a.baseline}
    print(
        f"throughput: {len(texts)} proxy documents (mean {np.mean([len(t) for t in texts]):.0f}"
        " chars)",
        flush=True,
    )
    result["throughput"] = bench_throughput(names, texts, a.baseline, a.repeats)
    if not a.skip_recall:
        print("recall of the gold document, one question per fact:", flush=True)
        others = [n for n in names if n != "lsa"]
        if a.quick:
            datasets = {"proxy-zipf-300": lambda: proxy_corpus(300, "zipf")}
            result["recall"] = bench_recall(datasets, QUICK_VARIANTS, others, extras=False)
        else:
            small = {
                "knowledge-2000": lambda: knowledge_corpus(2000),
                "proxy-zipf-2000": lambda: proxy_corpus(2000, "zipf"),
                "proxy-faker-2000": lambda: proxy_corpus(2000, "faker"),
            }
            large = {"knowledge-10000": lambda: knowledge_corpus(10000)}
            result["recall"] = bench_recall(small, list(LSA_VARIANTS), others, extras=True)
            result["recall"] += bench_recall(large, LARGE_VARIANTS, ["hashing"], extras=True)
    return run.finish(rows(result), result)


if __name__ == "__main__":
    main()
