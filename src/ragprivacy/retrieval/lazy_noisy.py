"""Exact Gaussian noise-then-select at approximate-nearest-neighbour speed.

Full noise-then-select (collusion paper eq. 2.1) draws N(0, σ²) for *every* score and takes
the top K of the noisy vector. Noise must reach every score, but it need not be *drawn*
for every score: :func:`lazy_noisy_topk` draws it only where it can matter and returns
indices distributed **exactly** as the full mechanism's.

Algorithm (one query; ``s`` the exact scores, ``u`` a certified upper bound on every
score outside the candidate set):

1. Take a candidate set C of c ≥ K documents chosen *without looking at the noise*
   (the exact or ANN top-c by score, or any other noise-independent rule).
2. Draw Z_i ~ N(0, 1) for i ∈ C and let τ be the K-th largest of s_i + σ Z_i over C.
3. Let t = (τ − u)/σ and q = P(Z > t) = Φ̄(t). Draw B ~ Binomial(N', q), N' = n − c,
   choose B non-candidates uniformly without replacement, and draw their Z from N(0, 1)
   truncated to (t, ∞).
4. Return the top K of the noisy scores of C and of the B chosen documents.

If the expected count N'·q exceeds ``max_exceed_fraction``·N' the algorithm falls back:
it keeps the candidates' noise already drawn and draws fresh N(0, 1) noise for every
non-candidate (step 3 replaced by the plain full draw).

**Proof of exactness.** Let Z = (Z_C, Z_R) be the full mechanism's i.i.d. N(0, 1) noise,
R the non-candidates. C does not depend on Z, so we may draw Z_C first; τ and t are
functions of Z_C only, and given Z_C the Z_j (j ∈ R) are still i.i.d. N(0, 1). Split R
into E = {j ∈ R : Z_j > t} and its complement. (a) For j ∉ E: s_j + σZ_j ≤ u + σt = τ,
so j is not strictly above the K-th noisy candidate and cannot be in the top K (ties
have probability 0 for continuous noise). (b) Given Z_C, the indicators 1{Z_j > t} are
i.i.d. Bernoulli(q) and do not depend on s_j (t is common to all j), so |E| ~
Binomial(N', q) and, given |E| = B, E is a uniformly random B-subset of R; given E, the
Z_j for j ∈ E are i.i.d. N(0, 1) conditioned on Z_j > t, i.e. truncated normals, and
independent of everything else. Steps 3–4 sample (E, Z_E) from exactly this conditional
law, and by (a) the top K of C ∪ E equals the top K of all n noisy scores. Hence the
output has the full mechanism's distribution. The fallback draws Z_R from its exact
conditional law given Z_C (plain N(0, 1)), so it is exact too: nothing already drawn is
redrawn (redrawing after looking would bias the output). The decision to fall back
depends on Z_C only and changes how Z_R is sampled, not its law. ∎

Requirements: ``u`` must bound every non-candidate score (1 for cosine scores of
unit-norm vectors, with a small margin for float rounding, or a per-bucket bound).

Privacy: the output law is the full Gaussian mechanism's, so the guarantee of
:class:`~ragprivacy.dp.GaussianNoisyTopK` applies. **Timing side channel**: the run time
depends on τ and so on the private scores (the number B of exceedances and the fallback);
a deployment must pad the response time or treat timing as out of scope.

**Simulation only.** The noise comes from numpy (the candidates' noise through
:func:`ragprivacy.dp.gaussian_noise_float`, the binomial count, the uniform subset and the
truncated normals from the same ``rng``): this is the float fast path, not the secure
integer sampler. An integer-exact lazy variant needs a truncated discrete Gaussian
sampler, which ``ragprivacy.dp`` does not provide.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive, check_positive_int, check_probability
from ragprivacy.dp import GaussianEvent, gaussian_noise_float, top_k_indices
from ragprivacy.errors import ConfigError

__all__ = ["LazySelection", "lazy_noisy_topk", "truncated_normal_above"]


@dataclass(frozen=True, slots=True)
class LazySelection:
    """The result of one lazy noise-then-select.

    Attributes:
        indices: the K selected positions, best noisy score first.
        noisy_scores: their noisy scores (instrumented evaluation only).
        exceedances: B, how many non-candidates had to be noised (−1 after a fallback).
        fell_back: whether every non-candidate was noised.
        event: the privacy event (one Gaussian release of the score vector).
    """

    indices: IntArray
    noisy_scores: FloatArray
    exceedances: int
    fell_back: bool
    event: GaussianEvent


def truncated_normal_above(t: float, size: int, *, rng: RngLike = None) -> FloatArray:
    """i.i.d. N(0, 1) conditioned on Z > t, by inversion: Z = Φ̄⁻¹(U·Φ̄(t)).

    Uses Φ̄(x) = Φ(−x) and Φ̄⁻¹(p) = −Φ⁻¹(p), which stays accurate in the far tail.
    """
    gen = make_rng(rng)
    tail = float(ndtr(-t))
    if tail <= 0.0:
        raise ConfigError(f"The truncation point t={t!r} is too far in the tail to sample.")
    u = gen.random(size)
    # U ∈ [0, 1): use 1 − U ∈ (0, 1] so the argument of ndtri is never 0.
    z = -ndtri((1.0 - u) * tail)
    return np.maximum(z, t)


def lazy_noisy_topk(
    candidate_positions: IntArray,
    candidate_scores: FloatArray,
    n: int,
    k: int,
    sigma: float,
    *,
    score_of: object,
    bound: float = 1.0,
    sensitivity: float = 1.0,
    max_exceed_fraction: float = 0.1,
    rng: RngLike = None,
) -> LazySelection:
    """Lazy exact Gaussian noise-then-select over ``n`` documents (see the module proof).

    Args:
        candidate_positions: the c ≥ k candidate positions (chosen without the noise).
        candidate_scores: their exact scores.
        n: the number of documents the mechanism selects from.
        k: how many to select.
        sigma: the noise standard deviation σ.
        score_of: a callable ``positions -> scores`` giving exact scores of other
            documents (e.g. a dot product with the stored vectors), or the full score
            vector (an array of length ``n``).
        bound: u, an upper bound on every non-candidate score.
        sensitivity: L2 sensitivity of the score vector (for the event).
        max_exceed_fraction: fall back to full noise when N'·q exceeds this fraction of
            the non-candidates.
        rng: the simulation stream.
    """
    k = check_positive_int("k", k)
    n = check_positive_int("n", n)
    sigma = check_positive("sigma", sigma)
    check_probability("max_exceed_fraction", max_exceed_fraction)
    gen = make_rng(rng)
    cand = np.asarray(candidate_positions, dtype=np.int64)
    cs = np.asarray(candidate_scores, dtype=np.float64)
    if cand.ndim != 1 or cand.shape != cs.shape:
        raise ConfigError("Candidate positions and scores must be 1-D arrays of equal length.")
    if np.unique(cand).size != cand.size or (cand < 0).any() or (cand >= n).any():
        raise ConfigError(f"Candidate positions must be distinct and in [0, {n}).")
    if cand.size < min(k, n):
        raise ConfigError(
            f"The lazy selection needs at least k={k} candidates; got {cand.size}. "
            f"Search for more candidates."
        )
    event = GaussianEvent(sigma=sigma, sensitivity=sensitivity)
    noisy_c = cs + gaussian_noise_float(sigma, cs.size, rng=gen)
    rest = n - cand.size
    if rest == 0:
        idx = top_k_indices(noisy_c, k)
        return LazySelection(cand[idx], noisy_c[idx], 0, False, event)
    kk = min(k, cand.size)
    tau = float(np.partition(noisy_c, cand.size - kk)[cand.size - kk])
    t = (tau - bound) / sigma
    q = float(ndtr(-t))
    if rest * q > max_exceed_fraction * rest or q >= 1.0:
        mask = np.ones(n, dtype=bool)
        mask[cand] = False
        others = np.flatnonzero(mask)
        scores = _scores(score_of, others)
        noisy_o = scores + gaussian_noise_float(sigma, others.size, rng=gen)
        pos = np.concatenate([cand, others])
        vals = np.concatenate([noisy_c, noisy_o])
        idx = top_k_indices(vals, k)
        return LazySelection(pos[idx], vals[idx], -1, True, event)
    b = int(gen.binomial(rest, q))
    if b:
        # Uniform B-subset of the non-candidates: B distinct ranks among them.
        ranks = gen.choice(rest, size=b, replace=False)
        others = _non_candidate_at(np.sort(cand), np.sort(ranks))
        noisy_e = _scores(score_of, others) + sigma * truncated_normal_above(t, b, rng=gen)
        pos = np.concatenate([cand, others])
        vals = np.concatenate([noisy_c, noisy_e])
    else:
        pos, vals = cand, noisy_c
    idx = top_k_indices(vals, k)
    return LazySelection(pos[idx], vals[idx], b, False, event)


def _non_candidate_at(sorted_cand: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The positions of the non-candidates of the given ranks (0-based, in position
    order), without materialising the n − c non-candidates."""
    shifted = sorted_cand - np.arange(sorted_cand.size)  # candidates before each gap
    return ranks + np.searchsorted(shifted, ranks, side="right")


def _scores(score_of: object, positions: np.ndarray) -> np.ndarray:
    if callable(score_of):
        return np.asarray(score_of(positions), dtype=np.float64)
    return np.asarray(score_of, dtype=np.float64)[positions]
