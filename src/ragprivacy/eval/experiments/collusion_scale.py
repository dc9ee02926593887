"""The collusion attack with a trained embedder (§A.1) and at production scale (§4.5).

* :func:`trained_embedder_check` — MiniLM over a fixed 50-paragraph corpus: the probe is
  the target's embedding (q* = x*), the decoy a document whose realised gap
  Δ = 1 − ⟨x*, x'*⟩ is closest to 0.4; M* with that Δ, ε_acc = 4, n = 200. Repeated for
  the ``pairs`` pairs with Δ closest to the target gap.
* :func:`production_scale_check` — ≥ 10⁵ synthetic passages embedded with MiniLM (or the
  fast ``lsa`` alternative) in a FAISS HNSW index (M = 64, ef_cstr = 200, ef_q = 128 as in
  the paper); a target/decoy pair screened for uniqueness (no other passage within cosine
  0.90 of the target) with Δ = 1 − ⟨x*, x'*⟩ near the paper's 0.133, planted in one slot;
  two observation surfaces: the *user-observable* hit indicator (planted slot in the noisy
  top-5) and the *instrumented* pooled noisy score at the planted slot.

Encoding dominates the cost (MiniLM's rate: docs/audit.md, "The attack and its sweeps"),
so the passage embeddings are computed once and cached in float32 chunks under a
user-chosen directory (:func:`cached_embeddings`; a stopped run resumes at the next
chunk), with batching and a threads setting.

How noise on every score stays exact and fast: for a fixed index and a fixed probe, the
kn answers of a coalition are i.i.d., so the hit count is exactly Binomial(kn, p_b) with
p_b = P(planted slot in TopK(s + N(0, σ²I))) over *all* N scores, computed once per world
by quadrature (:func:`ragprivacy.dp.hit_probability`: O(N·K) per node);
the scores are the exact inner products of all N stored vectors (``index.scores`` reads
the HNSW index's flat storage: one GEMV, bound by memory bandwidth), not only the ANN
candidates. The HNSW graph is not used to select: an ANN walk cannot add noise to scores
it never visits. For contrast the result also gives p_b over the ``ef_search`` HNSW
candidates only (what noising only the ANN candidates would return). A full-scale check
draws noise for all N scores of ``check_queries`` queries and selects (the dp layer's
float fast path), comparing the hit rate with the quadrature's p_b. The instrumented score
channel is the scalar mechanism with Δ = s_planted(D) − s_planted(D'), sampled by its
sufficient statistic.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._validation import check_positive_int
from ragprivacy.attacks import PooledMeanAttack, auc_with_se
from ragprivacy.dp import (
    ScalarMechanism,
    collusion_sigma,
    gaussian_noise_float,
    hit_probability,
    stream,
    top_k_indices,
)
from ragprivacy.embed import Embedder, create_embedder
from ragprivacy.errors import ConfigError
from ragprivacy.eval.experiments._facts import FACTS

__all__ = ["cached_embeddings", "production_scale_check", "trained_embedder_check"]


def _scalar_row(
    gap: float, eps: float, n: int, ks: Sequence[int], trials: int, key: Any
) -> list[dict[str, Any]]:
    mech = ScalarMechanism(epsilon_acc=eps, n=n, delta_gap=gap)
    attack = PooledMeanAttack(mech)
    out = []
    for k in ks:
        rng = stream(0, (*key, k))
        auc, se = auc_with_se(
            attack.simulate(member=True, k=k, trials=trials, rng=rng),
            attack.simulate(member=False, k=k, trials=trials, rng=rng),
        )
        out.append({"k": k, "auc": auc, "se": se, "predicted": mech.predicted_auc(k)})
    return out


def trained_embedder_check(
    *,
    embedder: Embedder | None = None,
    eps: float = 4.0,
    n: int = 200,
    ks: Sequence[int] = (1, 2, 5, 10, 20),
    trials: int = 2000,
    target_gap: float = 0.4,
    pairs: int = 10,
    seed: int = 0,
) -> dict[str, Any]:
    """§A.1 with MiniLM (default) over :data:`FACTS`."""
    start = time.perf_counter()
    emb = embedder or create_embedder("minilm")
    x = np.asarray(emb.encode(list(FACTS)), dtype=np.float64)
    gaps = 1.0 - x @ x.T
    iu = np.triu_indices(len(FACTS), k=1)
    order = np.argsort(np.abs(gaps[iu] - target_gap))[:pairs]
    rows: list[dict[str, Any]] = []
    for rank, j in enumerate(order):
        a, b = int(iu[0][j]), int(iu[1][j])
        gap = float(gaps[a, b])
        cells = _scalar_row(gap, eps, n, ks, trials, ("a1", seed, rank))
        rows.append({"target": FACTS[a][:60], "decoy": FACTS[b][:60], "delta": gap, "cells": cells})
    first = float(np.median([r["cells"][0]["auc"] for r in rows]))
    last = float(np.median([r["cells"][-1]["auc"] for r in rows]))
    return {
        "embedder": emb.name,
        "eps": eps,
        "n": n,
        "trials": trials,
        "k": list(ks),
        "pairs": rows,
        "median_auc_first_k": first,
        "median_auc_last_k": last,
        "median_advantage_growth": (last - 0.5) / (first - 0.5) if first > 0.5 else math.inf,
        "predicted_growth": math.sqrt(ks[-1] / ks[0]),
        "seconds": time.perf_counter() - start,
    }


def cached_embeddings(
    texts: Sequence[str],
    embedder: Embedder,
    *,
    cache_dir: str | Path | None,
    key: str,
    chunk: int = 5000,
    batch_size: int = 256,
    log: Callable[[str], None] | None = None,
) -> np.ndarray:
    """Embed ``texts`` once: float32 chunks ``cache_dir/<digest>/chunk-NNNNN.npy``.

    The digest binds the embedder's fingerprint, ``key`` (what the texts are) and the
    number of texts, so a changed model or corpus never reuses stale vectors. Chunks are
    written atomically as they finish: an interrupted run resumes where it stopped.
    ``cache_dir=None`` embeds in memory without caching.
    """
    chunk = check_positive_int("chunk", chunk)
    if cache_dir is None:
        return np.asarray(embedder.encode(list(texts), batch_size=batch_size), dtype=np.float32)
    digest = hashlib.sha256(
        json.dumps([embedder.fingerprint(), key, len(texts), chunk]).encode()
    ).hexdigest()[:20]
    folder = Path(cache_dir).expanduser() / f"{embedder.name}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").write_text(
        json.dumps(
            {
                "embedder": embedder.name,
                "fingerprint": embedder.fingerprint(),
                "key": key,
                "texts": len(texts),
                "chunk": chunk,
                "dim": embedder.dim,
            },
            indent=1,
        )
    )
    parts = []
    for c, start in enumerate(range(0, len(texts), chunk)):
        path = folder / f"chunk-{c:05d}.npy"
        if path.exists():
            part = np.load(path)
        else:
            t0 = time.perf_counter()
            part = np.asarray(
                embedder.encode(
                    list(texts[start : start + chunk]), batch_size=batch_size, progress=False
                ),
                dtype=np.float32,
            )
            tmp = path.with_suffix(".tmp.npy")
            np.save(tmp, part)
            os.replace(tmp, path)
            if log is not None:
                rate = len(part) / max(time.perf_counter() - t0, 1e-9)
                log(f"embedded {start + len(part)}/{len(texts)} ({rate:.0f} texts/s)")
        parts.append(part)
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), np.float32)


def _pick_pair(
    vectors: np.ndarray, target_gap: float, unique: float, candidates: int, seed: int
) -> tuple[int, int]:
    """(target, decoy): a target with no other passage at cosine ≥ ``unique`` except
    possibly its decoy, and the decoy whose gap 1 − cos is closest to ``target_gap``.
    Exact scans over a random sample of candidate targets (§4.5's uniqueness screen)."""
    rng = np.random.default_rng(seed)
    cand = rng.choice(vectors.shape[0], size=min(candidates, vectors.shape[0]), replace=False)
    best = (np.inf, -1, -1)
    for lo in range(0, cand.size, 256):
        rows = cand[lo : lo + 256]
        sims = vectors[rows] @ vectors.T  # exact [256, N]
        sims[np.arange(rows.size), rows] = -np.inf
        for r, t in enumerate(rows):
            srow = sims[r]
            d = int(np.argmin(np.abs((1.0 - srow) - target_gap)))
            others = int((srow >= unique).sum()) - int(srow[d] >= unique)
            err = abs(1.0 - float(srow[d]) - target_gap)
            if others == 0 and err < best[0]:
                best = (err, int(t), d)
    if best[1] < 0:
        raise ConfigError(
            f"No candidate target is unique at cosine {unique}; raise 'candidates' or "
            "lower the screen."
        )
    return best[1], best[2]


def _monte_carlo_hits(
    scores: np.ndarray, target: int, sigma: float, top_k: int, queries: int, seed: int
) -> int:
    """Full noise-then-select on *every* score for ``queries`` independent queries (the dp
    layer's float fast path): how many returned ``target`` in the noisy top-K."""
    hits = 0
    rng = stream(seed, ("prod-mc", repr(sigma)))
    block = max(1, 2_000_000 // scores.size)
    done = 0
    while done < queries:
        q = min(block, queries - done)
        noisy = scores[None, :] + gaussian_noise_float(sigma, (q, scores.size), rng=rng)
        hits += int((top_k_indices(noisy, top_k) == target).any(axis=1).sum())
        done += q
    return hits


def production_scale_check(
    *,
    passages: int = 100_000,
    eps: Sequence[float] = (8.0, 16.0),
    ks: Sequence[int] = (1, 2, 5, 10, 20),
    n: int = 200,
    trials: int = 2000,
    top_k: int = 5,
    embedder: Embedder | str = "minilm",
    index: str = "faiss-hnsw",
    hnsw_m: int = 64,
    ef_construction: int = 200,
    ef_search: int = 128,
    target_gap: float = 0.133,
    unique: float = 0.90,
    candidates: int = 2000,
    check_queries: int = 2000,
    check_sigmas: Sequence[float] = (0.1, 0.3),
    cache_dir: str | Path | None = None,
    num_threads: int | None = None,
    batch_size: int = 256,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """§4.5 on synthetic passages (the ``knowledge`` generator), MiniLM and FAISS HNSW.

    Args:
        passages: slots of the tenant index (the planted slot included).
        eps, ks, n, trials, top_k: the sweep of §4.4 (σ by eq. 3.4 with the paper's Δ = 1).
        embedder: ``"minilm"`` (the reported figure) or ``"lsa"`` (fitted on the corpus;
            far faster on a CPU, for trying the pipeline; docs/audit.md) or an
            :class:`Embedder`.
        index, hnsw_m, ef_construction, ef_search: the index (paper: HNSW M = 64,
            ef_cstr = 200, ef_q = 128).
        target_gap, unique, candidates: pick the target/decoy pair: among ``candidates``
            random targets with no other passage at cosine ≥ ``unique``, the decoy whose
            Δ = 1 − ⟨x*, x'*⟩ is closest to ``target_gap`` (paper: realised Δ = 0.133).
        check_queries: queries of the full-scale Monte Carlo check of p_b (0 to skip): every
            one draws noise for all N scores and selects; run at each ε's σ and at
            ``check_sigmas`` (small σ, where p_b is far from 0 and the check has power).
        cache_dir: where the passage embeddings are cached (encode once, resume).
        num_threads: torch / FAISS / BLAS threads (``None``: library defaults).
        batch_size: texts per embedder call.
        log: progress messages (e.g. ``print``).
    """
    from ragprivacy.corpus import synthesize
    from ragprivacy.index import create_index

    say = log or (lambda _m: None)
    start = time.perf_counter()
    corpus = synthesize("knowledge", passages + 1, seed=seed)
    texts = corpus.texts
    if isinstance(embedder, str):
        opts: dict[str, Any] = {}
        if embedder == "minilm":
            opts = {"num_threads": num_threads, "batch_size": min(batch_size, 512)}
        emb = create_embedder(embedder, **opts)
        if embedder == "lsa":
            emb.fit(texts)
    else:
        emb = embedder
    vectors = cached_embeddings(
        texts,
        emb,
        cache_dir=cache_dir,
        key=f"synthesize(knowledge, {passages + 1}, seed={seed})",
        batch_size=batch_size,
        log=say,
    )
    t_embed = time.perf_counter() - start
    say(f"embeddings ready: {vectors.shape} in {t_embed:.0f} s")
    t0 = time.perf_counter()
    vectors = np.asarray(vectors, dtype=np.float32)  # no copy when the cache gave float32
    target, decoy = _pick_pair(vectors, target_gap, unique, candidates, seed)
    probe = vectors[target]
    gap = float(1.0 - probe @ vectors[decoy])
    keep = np.ones(passages + 1, dtype=bool)
    keep[[target, decoy]] = False
    background = vectors[keep]  # passages - 1 rows; the planted slot is last
    t_pair = time.perf_counter() - t0
    t0 = time.perf_counter()
    idx_opts: dict[str, Any] = {"num_threads": num_threads}
    if index == "faiss-hnsw":
        idx_opts.update(m=hnsw_m, ef_construction=ef_construction, ef_search=ef_search)
    idx = create_index(index, dim=emb.dim, **idx_opts)
    idx.add(np.vstack([background, probe[None, :]]), [f"p{i}" for i in range(passages)])
    t_index = time.perf_counter() - t0
    say(f"index {index} built in {t_index:.0f} s")
    t0 = time.perf_counter()
    planted = passages - 1
    s_in = np.asarray(idx.scores(probe[None, :])[0], dtype=np.float64)  # exact, all N
    s_out = s_in.copy()
    s_out[planted] = 1.0 - gap
    near = int((s_in[:planted] >= unique).sum())
    # What noising only the ANN candidates would see (not the mechanism; for contrast).
    ann = idx.search(probe[None, :].astype(np.float32), max(ef_search, top_k))
    cand = np.asarray(ann.indices[0])
    cand = cand[cand >= 0]
    cand_in = planted in set(cand.tolist())
    out_cells = []
    checks: list[dict[str, Any]] = []
    for sigma_c in check_sigmas if check_queries else ():
        p_c = hit_probability(s_in, planted, sigma_c, top_k)
        h = _monte_carlo_hits(s_in, planted, sigma_c, top_k, check_queries, seed)
        se = math.sqrt(max(p_c * (1 - p_c), 1e-300) / check_queries)
        checks.append(
            {
                "sigma": sigma_c,
                "queries": check_queries,
                "hits": h,
                "p_quadrature": p_c,
                "p_monte_carlo": h / check_queries,
                "z": (h / check_queries - p_c) / se,
            }
        )
    for e in eps:
        sigma = collusion_sigma(e, 1e-6, n)
        p_in = hit_probability(s_in, planted, sigma, top_k)
        p_out = hit_probability(s_out, planted, sigma, top_k)
        p_cand = (
            hit_probability(s_in[cand], int(np.flatnonzero(cand == planted)[0]), sigma, top_k)
            if cand_in
            else None
        )
        if check_queries:
            h = _monte_carlo_hits(s_in, planted, sigma, top_k, check_queries, seed)
            se = math.sqrt(max(p_in * (1 - p_in), 1e-300) / check_queries)
            checks.append(
                {
                    "eps_acc": e,
                    "queries": check_queries,
                    "hits": h,
                    "p_quadrature": p_in,
                    "p_monte_carlo": h / check_queries,
                    "z": (h / check_queries - p_in) / se,
                    "p_candidates_only": p_cand,
                }
            )
        inst = _scalar_row(max(gap, 1e-6), e, n, ks, trials, ("prod", seed, repr(e)))
        for k, icell in zip(ks, inst):
            rng = stream(seed, ("prod-hit", repr(e), k))
            auc, se_k = auc_with_se(
                rng.binomial(k * n, p_in, trials), rng.binomial(k * n, p_out, trials)
            )
            out_cells.append(
                {
                    "eps_acc": e,
                    "k": k,
                    "hit_auc": auc,
                    "hit_se": se_k,
                    "score_auc": icell["auc"],
                    "score_se": icell["se"],
                    "score_predicted": icell["predicted"],
                    "p_member": p_in,
                    "p_nonmember": p_out,
                    "p_member_candidates_only": p_cand,
                }
            )
    t_attack = time.perf_counter() - t0
    return {
        "passages": passages,
        "index": index,
        "index_config": idx.config(),
        "embedder": emb.name,
        "delta": gap,
        "target_gap": target_gap,
        "near_duplicates": near,
        "unique_threshold": unique,
        "n": n,
        "trials": trials,
        "top_k": top_k,
        "cells": out_cells,
        "full_scale_checks": checks,
        "seconds_embed": t_embed,
        "seconds_pair": t_pair,
        "seconds_index": t_index,
        "seconds_attack": t_attack,
        "seconds": time.perf_counter() - start,
    }
