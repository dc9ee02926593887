"""The collusion attack with a trained embedder (§A.1) and at production scale (§4.5).

* :func:`trained_embedder_check` — MiniLM over a fixed 50-paragraph corpus: the probe is
  the target's embedding (q* = x*), the decoy a document whose realised gap
  Δ = 1 − ⟨x*, x'*⟩ is closest to 0.4; M* with that Δ, ε_acc = 4, n = 200. Repeated for
  the ``pairs`` pairs with Δ closest to the target gap.
* :func:`production_scale_check` — ≥ 10⁵ synthetic passages embedded with MiniLM in a
  FAISS HNSW index; a target/decoy pair planted in one slot; two observation surfaces:
  the *user-observable* hit indicator (planted slot in the noisy top-5) and the
  *instrumented* pooled noisy score at the planted slot.

How noise on every score stays exact and fast: for a fixed index and a fixed probe, the
kn answers of a coalition are i.i.d., so the hit count is exactly Binomial(kn, p_b) with
p_b = P(planted slot in TopK(s + N(0, σ²I))) over *all* N scores, computed once per world
by quadrature (:func:`ragprivacy.attacks.collusion.hit_probability`: O(N·K) per node);
the scores are the exact inner products of all N stored vectors (``index.scores``), not
only the ANN candidates. The instrumented score channel is the scalar mechanism with
Δ = s_planted(D) − s_planted(D'), sampled by its sufficient statistic. A service-mode
cross-check (every score noised per query) agrees with p_b at small scale (tests).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragprivacy.attacks.collusion import (
    PooledMeanAttack,
    ScalarMechanism,
    auc_with_se,
    hit_probability,
)
from ragprivacy.dp import collusion_sigma, stream
from ragprivacy.embed import Embedder, create_embedder
from ragprivacy.eval.experiments._facts import FACTS

__all__ = ["production_scale_check", "trained_embedder_check"]


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


def production_scale_check(
    *,
    passages: int = 100_000,
    eps: Sequence[float] = (8.0, 16.0),
    ks: Sequence[int] = (1, 2, 5, 10, 20),
    n: int = 200,
    trials: int = 2000,
    top_k: int = 5,
    embedder: Embedder | None = None,
    index: str = "faiss-hnsw",
    seed: int = 0,
    min_gap: float = 0.05,
) -> dict[str, Any]:
    """§4.5 on synthetic passages (the ``knowledge`` generator), MiniLM and FAISS HNSW."""
    from ragprivacy.corpus import synthesize
    from ragprivacy.index import create_index

    start = time.perf_counter()
    emb = embedder or create_embedder("minilm")
    corpus = synthesize("knowledge", passages + 2, seed=seed)
    texts = corpus.texts
    vectors = np.asarray(emb.encode(texts), dtype=np.float32)
    t_embed = time.perf_counter() - start
    # Target and decoy: the last two passages; the probe is the target's embedding.
    target, decoy, background = vectors[-2], vectors[-1], vectors[:-2]
    probe = target
    gap = float(1.0 - target @ decoy)
    idx = create_index(index, dim=emb.dim)
    idx.add(np.vstack([background, target[None, :]]), [f"p{i}" for i in range(passages + 1)])
    t_index = time.perf_counter() - start - t_embed
    s_in = np.asarray(idx.scores(probe[None, :])[0], dtype=np.float64)
    s_out = s_in.copy()
    s_out[-1] = float(probe @ decoy)
    # Uniqueness screen of §4.5: how many passages sit within cosine 0.90 of the target.
    near = int((s_in[:-1] >= 0.90).sum())
    out_cells = []
    for e in eps:
        sigma = collusion_sigma(e, 1e-6, n)
        p_in = hit_probability(s_in, passages, sigma, top_k)
        p_out = hit_probability(s_out, passages, sigma, top_k)
        inst = _scalar_row(max(gap, min_gap), e, n, ks, trials, ("prod", seed, repr(e)))
        for k, icell in zip(ks, inst):
            rng = stream(seed, ("prod-hit", repr(e), k))
            auc, se = auc_with_se(
                rng.binomial(k * n, p_in, trials), rng.binomial(k * n, p_out, trials)
            )
            out_cells.append(
                {
                    "eps_acc": e,
                    "k": k,
                    "hit_auc": auc,
                    "hit_se": se,
                    "score_auc": icell["auc"],
                    "score_se": icell["se"],
                    "p_member": p_in,
                    "p_nonmember": p_out,
                }
            )
    return {
        "passages": passages,
        "index": index,
        "embedder": emb.name,
        "delta": gap,
        "near_duplicates_090": near,
        "n": n,
        "trials": trials,
        "cells": out_cells,
        "seconds_embed": t_embed,
        "seconds_index": t_index,
        "seconds": time.perf_counter() - start,
    }
