"""Exact Gaussian noise-then-select at approximate-nearest-neighbour speed.

Full noise-then-select (collusion paper eq. 2.1) draws N(0, σ²) for *every* score and takes
the top K of the noisy vector. Noise must reach every score, but it need not be *drawn*
for every score: :func:`lazy_noisy_topk` draws it only where it can matter and returns
indices distributed **exactly** as the full mechanism's.

Setting (one query): n documents with exact scores s_j; a candidate set C of c ≥ K
positions chosen *without looking at the noise* (the exact or ANN top-c, or any other
noise-independent rule); the other documents R are split into buckets R_1, …, R_B (a
partition fixed before the query, e.g. :class:`~ragprivacy.retrieval.BucketBounds`; one
bucket holding all of R when only a global bound is known) with a certified bound u_b ≥
s_j for every j ∈ R_b (u = 1 for cosine scores of unit vectors; u_b = q·c_b + ‖q‖·r_b per
bucket).

Algorithm:

1. Draw Z_i ~ N(0, 1) for i ∈ C; the pool P = C with noisy values s_i + σZ_i; τ = the K-th
   best value of P.
2. Repeat in rounds. Every unrevealed j ∈ R_b is known to have Z_j ≤ h_b (h_b = +∞ at
   first). Choose a level L ≥ τ (a function of what has been drawn so far) and set
   a_b = (L − u_b)/σ. In every bucket with a_b < h_b, draw how many unrevealed members have
   Z in (a_b, h_b]: m_b ~ Binomial(U_b, p_b), p_b = P(a_b < Z ≤ h_b | Z ≤ h_b), U_b the
   unrevealed count; choose which ones uniformly without replacement among the
   unrevealed members; draw their Z from N(0, 1) truncated to (a_b, h_b]; compute their
   exact scores, add them to P; set h_b ← min(h_b, a_b); update τ.
3. Stop after a round whose level was L = τ (the τ at the start of that round): every
   unrevealed j ∈ R_b then has s_j + σZ_j ≤ u_b + σ a_b = L ≤ τ. Return the top K of P.

The level is L = τ as soon as the expected count Σ_b U_b p_b at L = τ is small (round 1
with L = τ is the single-threshold algorithm: a binomial count of exceedances of
t_b = (τ − u_b)/σ per bucket, a uniform subset, truncated normals); otherwise an
intermediate L > τ reveals a few of the largest noises first, which raises τ — at large σ
the K-th best noisy score of all n documents is far above that of the c candidates, so
this reveals ~K documents instead of ~K·n/c. If a round would have to reveal more than
``max_reveal_fraction`` of R, or when L = τ would reveal more than half of the
unrevealed documents (loose bounds at small σ: the rounds cannot help), the level is
L = −∞: the fallback to full noise, keeping what was drawn. Every unrevealed member is
drawn from N(0, 1) truncated to Z ≤ h_b, with the plain sampler in bulk (one N(0, 1)
draw per document, a draw above h_b replaced by a truncated one) and every document
scored by one full scan, so a fallback costs about what the full mechanism costs.

**Proof of exactness.** Let Z = (Z_C, Z_R) be the full mechanism's i.i.d. N(0, 1) noise.
C and the buckets do not depend on Z, so Z_C may be drawn first. Induction over rounds:
before each round, conditionally on everything drawn so far (Z_C, the revealed members and
their Z), the unrevealed members of bucket b have i.i.d. Z ~ N(0, 1) truncated to
(−∞, h_b], independently across members and buckets, and their identities are
exchangeable within the bucket. True at the start (h_b = ∞). In a round with level
L (chosen from the past only), within bucket b the indicators 1{Z_j > a_b} of the U_b
unrevealed members are i.i.d. Bernoulli(p_b) and do not depend on s_j (a_b is common to
the bucket), so their number is Binomial(U_b, p_b) and, given the number, the set is a
uniformly random subset; given the set, its members' Z are i.i.d. N(0, 1) truncated to
(a_b, h_b] and the others' i.i.d. truncated to (−∞, a_b] — exactly what step 2 draws and
the new h_b. So the invariant holds after the round, and the revealed values have their
exact joint law. At the stop, every unrevealed j has s_j + σZ_j ≤ u_b + σa_b ≤ τ: it is
not strictly above the K-th value of P and cannot be in the top K of all n noisy scores
(ties have probability 0), so the top K of P *is* the top K of the full noisy vector. The
fallback (L = −∞) reveals every member from its exact conditional law; nothing already
drawn is redrawn (redrawing after looking would bias the output). The rule that picks L
and when to fall back depends only on what has been drawn, which changes how Z_R is
sampled, not its law. ∎

The bounds u_b need not be tight for exactness, only certified; tight bounds make the
rounds reveal fewer documents. In high-dimensional embeddings the ball bound
q·c_b + ‖q‖r_b is loose (r_b is large unless the bucket's documents nearly coincide), so at
small σ — where u_b > τ for most buckets — most documents are revealed and the fallback
runs. Measured on clustered 384-d unit vectors with HNSW candidates (benchmarks/README.md,
"Private retrieval"): the fallback runs on nearly every query at small σ and on none at
large σ; the global bound u = 1 costs more than a plain HNSW top-K, and k-means buckets,
whose bounds were no tighter (radii ≈ 1), only added overhead.

Privacy: the output law is the full Gaussian mechanism's, so the guarantee of
:class:`~ragprivacy.dp.GaussianNoisyTopK` applies. **Timing side channel**: the run time
depends on τ and so on the private scores (the number of documents revealed, the rounds,
the fallback); a deployment must pad the response time or treat timing as out of scope.
The retriever's :class:`FallbackMemory`, which picks the path of an account's next query
from that account's earlier outcomes, keeps one memory per account, so that one
account's scores never choose another account's path (queries that share a machine
still share its time: a query that waits behind, or runs beside, another account's lazy
selection waits for a time that depends on that account's scores).

**Simulation only.** The noise comes from numpy (the candidates' noise through
:func:`ragprivacy.dp.gaussian_noise_float`, the binomial counts, the uniform subsets and
the truncated normals from the same ``rng``): this is the float fast path, not the secure
integer sampler. An integer-exact lazy variant needs a truncated discrete Gaussian
sampler, which ``ragprivacy.dp`` does not provide. The other way round —
:meth:`ragprivacy.dp.GaussianNoisyTopK.select_noise_first`, the retrievers' default — draws
the noise of every document with the secure sampler (or the float one) and skips only the
*scoring* of documents whose noise leaves them no chance; its run time depends on the
noise, not on the scores, and its output is the full path's bit for bit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive, check_positive_int, check_probability
from ragprivacy.dp import GaussianEvent, gaussian_noise_float, top_k_indices
from ragprivacy.errors import ConfigError
from ragprivacy.index import VectorIndex
from ragprivacy.retrieval.bucket_bounds import BucketBounds

__all__ = [
    "FallbackMemory",
    "LazySelection",
    "lazy_index_topk",
    "lazy_noisy_topk",
    "truncated_normal_above",
]

_Z_CAP = 60.0  # |Z| > 60 has probability < 1e-780: used only to keep the values finite
_LEVELS = 16  # grid of levels tried when choosing an intermediate level
_REFINE = 3  # refinements of that grid (resolution: span / 16³)
_MAX_ROUNDS = 64
# Fall back at once when L = τ would reveal more than this fraction of the unrevealed
# documents: the bounds are then too loose for the rounds to help (small σ), and the
# rounds before the fallback would only add their cost to the full scan's.
_FALLBACK_AT = 0.5


@dataclass(frozen=True, slots=True)
class LazySelection:
    """The result of one lazy noise-then-select.

    Attributes:
        indices: the K selected positions, best noisy score first.
        noisy_scores: their noisy scores (instrumented evaluation only).
        revealed: how many non-candidates were noised (and scored).
        rounds: how many rounds of step 2 ran.
        fell_back: whether the last round noised every remaining non-candidate.
        event: the privacy event (one Gaussian release of the score vector).
    """

    indices: IntArray
    noisy_scores: FloatArray
    revealed: int
    rounds: int
    fell_back: bool
    event: GaussianEvent


class FallbackMemory:
    """Whether an account's next lazy selection is worth its candidate search, from that
    account's last ones.

    A lazy selection that falls back has paid for a candidate search (an HNSW search)
    before it learns that its bounds are too loose for the rounds (small σ): it then costs
    the full path plus that search (benchmarks/README.md, "Private retrieval"). When most
    of an account's recent selections fell back, its next one likely will too: this
    memory tells the retriever to run the full noise-then-select instead, without the
    search, and to try the lazy path again on every ``probe_every``-th query so that it
    notices when the account's queries change.

    Rule, per account: over the account's last ``window`` lazy outcomes (fell back or
    not), skip the search when the window is full and at least ``skip_at`` of them fell
    back — except on every ``probe_every``-th skipped query, which runs the lazy path and
    records its outcome.

    **One memory per account.** Whether a selection falls back depends on its private
    scores, so a memory shared by every account would let one account's scores choose
    another account's path (and so its latency). Each account — the ``account`` the
    retriever receives; ``None`` is an account of its own — has its own window, streak
    and outcomes, and no account's outcomes enter another's choice. The memories of at
    most ``max_accounts`` accounts (default 4,096; each holds at most ``window`` booleans
    and a counter) are kept; past that the least recently used account's memory is
    forgotten, and that account starts again with an empty window (it searches first
    until its window is full again). Which memory is forgotten depends only on the order
    in which accounts query, never on a score or an outcome.

    **Exactness and privacy.** Both paths output the full mechanism's law, and the choice
    for a query depends only on the same account's earlier outcomes, which are
    independent of this query's noise: the output law is unchanged. The choice is a
    function of that account's earlier private scores, like the lazy path's run time
    already is (the module's timing note).

    ``skipped`` and ``fallback_rate`` sum over every account (instrumentation; no path
    choice reads them); :meth:`fallback_rate_of` is one account's rate.
    """

    __slots__ = (
        "_lock",
        "_memories",
        "_skipped",
        "max_accounts",
        "probe_every",
        "skip_at",
        "window",
    )

    def __init__(
        self,
        *,
        window: int = 16,
        skip_at: float = 0.75,
        probe_every: int = 8,
        max_accounts: int = 4096,
    ) -> None:
        self.window = check_positive_int("window", window)
        self.skip_at = check_probability("skip_at", skip_at)
        self.probe_every = check_positive_int("probe_every", probe_every)
        self.max_accounts = check_positive_int("max_accounts", max_accounts)
        self._memories: OrderedDict[str | None, _AccountMemory] = OrderedDict()
        self._skipped = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many accounts' memories are kept (at most ``max_accounts``)."""
        return len(self._memories)

    def __contains__(self, account: object) -> bool:
        return account in self._memories

    @property
    def skipped(self) -> int:
        """Queries sent to the full path without a search, over every account, in all."""
        return self._skipped

    @property
    def fallback_rate(self) -> float:
        """The fraction of the kept accounts' remembered lazy selections that fell back
        (0 when none)."""
        with self._lock:
            outcomes = [o for m in self._memories.values() for o in m.outcomes]
        return sum(outcomes) / len(outcomes) if outcomes else 0.0

    def fallback_rate_of(self, account: str | None) -> float:
        """The fraction of ``account``'s remembered lazy selections that fell back (0 when
        none, or when its memory was forgotten)."""
        with self._lock:
            memory = self._memories.get(account)
            return 0.0 if memory is None else memory.rate()

    def _memory(self, account: str | None) -> _AccountMemory:
        """``account``'s memory, made (and the least recently used one dropped past
        ``max_accounts``) when missing; now the most recently used. Under ``_lock``."""
        memory = self._memories.get(account)
        if memory is None:
            memory = self._memories[account] = _AccountMemory()
            while len(self._memories) > self.max_accounts:
                self._memories.popitem(last=False)
        else:
            self._memories.move_to_end(account)
        return memory

    def search_first(self, *, account: str | None = None) -> bool:
        """Whether ``account``'s next query should run the lazy path (candidate search
        first)."""
        with self._lock:
            memory = self._memory(account)
            full = len(memory.outcomes) == self.window
            if not (full and memory.rate() >= self.skip_at):
                memory.streak = 0
                return True
            memory.streak += 1
            if memory.streak % self.probe_every == 0:
                return True  # a probe: its outcome is recorded like any lazy selection's
            self._skipped += 1
            return False

    def record(self, fell_back: bool, *, account: str | None = None) -> None:
        """Remember one lazy selection's outcome for ``account``."""
        with self._lock:
            outcomes = self._memory(account).outcomes
            outcomes.append(bool(fell_back))
            del outcomes[: -self.window]


class _AccountMemory:
    """One account's last lazy outcomes and its queries since skipping began."""

    __slots__ = ("outcomes", "streak")

    def __init__(self) -> None:
        self.outcomes: list[bool] = []
        self.streak = 0  # queries since skipping began, probes included

    def rate(self) -> float:
        return sum(self.outcomes) / len(self.outcomes) if self.outcomes else 0.0


def truncated_normal_above(t: float, size: int, *, rng: RngLike = None) -> FloatArray:
    """i.i.d. N(0, 1) conditioned on Z > t, by inversion: Z = Φ̄⁻¹(U·Φ̄(t)).

    Uses Φ̄(x) = Φ(−x) and Φ̄⁻¹(p) = −Φ⁻¹(p), which stays accurate in the far tail.
    """
    from scipy.special import ndtr, ndtri  # on first use: it costs every process

    gen = make_rng(rng)
    tail = float(ndtr(-t))
    if tail <= 0.0:
        raise ConfigError(f"The truncation point t={t!r} is too far in the tail to sample.")
    u = gen.random(size)
    z = -ndtri((1.0 - u) * tail)  # 1 − U ∈ (0, 1]: the argument of ndtri is never 0
    return np.asarray(np.maximum(z, t))


def _truncated_between(a: np.ndarray, b: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Z ~ N(0, 1) truncated to (a, b] by inversion of uniforms ``v`` ∈ [0, 1).

    Inverts the upper tail where a ≥ 0 and the lower tail elsewhere, so the far tails stay
    accurate; values are clipped to ±60 only to stay finite (a probability-zero event).
    """
    from scipy.special import ndtr, ndtri

    z = np.empty_like(a)
    up = a >= 0
    if up.any():
        ta, tb = ndtr(-a[up]), ndtr(-b[up])
        z[up] = -ndtri(ta - (1.0 - v[up]) * (ta - tb))
    lo = ~up
    if lo.any():
        pa, pb = ndtr(a[lo]), ndtr(b[lo])
        z[lo] = ndtri(pa + (1.0 - v[lo]) * (pb - pa))
    return np.asarray(np.clip(z, np.maximum(a, -_Z_CAP), np.minimum(b, _Z_CAP)))


def _prob_above(a: np.ndarray, h: np.ndarray) -> np.ndarray:
    """P(Z > a | Z ≤ h) for Z ~ N(0, 1) (0 where a ≥ h)."""
    from scipy.special import ndtr

    below_h = np.maximum(ndtr(h), 1e-300)
    num = np.where(a >= 0, ndtr(-a) - ndtr(-h), ndtr(h) - ndtr(a))
    p = np.clip(num / below_h, 0.0, 1.0)
    p[a >= h] = 0.0
    return np.asarray(p)


def lazy_noisy_topk(
    candidate_positions: IntArray,
    candidate_scores: FloatArray,
    n: int,
    k: int,
    sigma: float,
    *,
    score_of: Callable[[IntArray], FloatArray] | FloatArray,
    bound: float | FloatArray = 1.0,
    buckets: BucketBounds | None = None,
    sensitivity: float = 1.0,
    max_reveal_fraction: float = 0.1,
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
        bound: without ``buckets``, u: one upper bound on every non-candidate score;
            with ``buckets``, the (B,) per-bucket bounds u_b for this query
            (``buckets.bounds(q)``, clipped like the scores).
        buckets: the partition of the n positions into buckets (``None``: one bucket).
        sensitivity: L2 sensitivity of the score vector (for the event).
        max_reveal_fraction: fall back to full noise (for the rest) when a round would
            reveal more than this fraction of the non-candidates.
        rng: the simulation stream.
    """
    k = check_positive_int("k", k)
    n = check_positive_int("n", n)
    sigma = check_positive("sigma", sigma)
    check_probability("max_reveal_fraction", max_reveal_fraction)
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
        return LazySelection(cand[idx], noisy_c[idx], 0, 0, False, event)
    groups = _Groups.make(cand, n, bound, buckets)
    pool_pos, pool_val = [cand], [noisy_c]
    kk = min(k, cand.size)
    tau = float(np.partition(noisy_c, cand.size - kk)[cand.size - kk])
    budget = max_reveal_fraction * rest
    target = 2.0 * k
    revealed = 0
    fell_back = False
    stalled = False
    rounds = 0
    while rounds < _MAX_ROUNDS:
        rounds += 1
        a, final, fell_back = groups.choose_level(tau, sigma, target, budget, stalled)
        if fell_back:
            revealed += int(groups.unrevealed.sum())
            positions = np.concatenate(pool_pos)
            noisy = _fallback_noisy(
                groups, positions, np.concatenate(pool_val), score_of, n, sigma, buckets, gen
            )
            idx = top_k_indices(noisy, k)
            return LazySelection(idx, noisy[idx], revealed, rounds, True, event)
        tau_before = tau
        pos, z = groups.reveal(a, gen)
        if pos.size:
            revealed += pos.size
            pool_pos.append(pos)
            pool_val.append(_scores(score_of, pos) + sigma * z)
            vals = np.concatenate(pool_val)
            tau = float(np.partition(vals, vals.size - k)[vals.size - k])
        if final or groups.done():
            break
        stalled = tau == tau_before
        target *= 4.0
    else:  # pragma: no cover - the level reaches τ or −∞ long before
        raise ConfigError("The lazy selection did not converge; report this as a bug.")
    positions = np.concatenate(pool_pos)
    values = np.concatenate(pool_val)
    idx = top_k_indices(values, k)
    return LazySelection(positions[idx], values[idx], revealed, rounds, fell_back, event)


def lazy_index_topk(
    index: VectorIndex,
    query: FloatArray,
    k: int,
    sigma: float,
    *,
    candidates: int,
    bound: float | FloatArray = 1.0,
    buckets: BucketBounds | None = None,
    score_range: tuple[float, float] | None = None,
    sensitivity: float = 1.0,
    max_reveal_fraction: float = 0.1,
    rng: RngLike = None,
) -> LazySelection:
    """:func:`lazy_noisy_topk` over any :class:`~ragprivacy.index.VectorIndex`: the
    candidates are the index's (possibly approximate) top-``candidates`` for ``query``,
    chosen without the noise; the other documents are scored exactly by the index where
    they are stored — :meth:`~ragprivacy.index.VectorIndex.scores_at` for a few positions,
    the full scan :meth:`~ragprivacy.index.VectorIndex.scores` when a round (or the
    fallback) reveals more than an eighth of them. For a database index (``pgvector``)
    the candidates come from its HNSW search and the rest from primary-key look-ups or
    one sequential scan; no vector leaves the database.

    Every score — candidates' and revealed ones' — is clipped to ``score_range`` when
    given (clipping is monotone, so the clipped ``bound`` stays certified: pass the
    clipped bound, e.g. 1 for cosine scores of unit vectors, or a per-tenant bound).

    Args:
        index: the index (one tenant's).
        query: one query vector ``[dim]``.
        k: how many to select.
        sigma: the noise standard deviation σ.
        candidates: c, the size of the candidate search (at least ``k``).
        bound: the certified bound u on every non-candidate's (clipped) score, or the
            per-bucket bounds with ``buckets``.
        buckets: the index's bucket partition (``None``: one bucket).
        score_range: public (low, high) every score is clipped into (``None``: none).
        sensitivity: L2 sensitivity of the score vector (for the event).
        max_reveal_fraction: see :func:`lazy_noisy_topk`.
        rng: the simulation stream.
    """
    n = len(index)
    if n == 0:
        raise ConfigError("The index is empty; add documents before retrieving.")
    c = check_positive_int("candidates", candidates)
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    found = index.search(q[None, :], min(max(c, k), n))
    keep = found.indices[0] >= 0
    low, high = score_range if score_range is not None else (-np.inf, np.inf)

    def clip(values: np.ndarray) -> np.ndarray:
        return np.asarray(np.clip(np.asarray(values, dtype=np.float64), low, high))

    def score_of(pos: IntArray) -> FloatArray:
        if pos.size > n // 8:  # many: one full scan is cheaper than look-ups
            return clip(index.scores(q)[0][pos])
        return clip(index.scores_at(q, pos))

    return lazy_noisy_topk(
        found.indices[0][keep],
        clip(found.scores[0][keep]),
        n,
        k,
        sigma,
        score_of=score_of,
        bound=bound,
        buckets=buckets,
        sensitivity=sensitivity,
        max_reveal_fraction=max_reveal_fraction,
        rng=rng,
    )


def _fallback_noisy(
    groups: _Groups,
    pool_positions: np.ndarray,
    pool_values: np.ndarray,
    score_of: Callable[[IntArray], FloatArray] | FloatArray,
    n: int,
    sigma: float,
    buckets: BucketBounds | None,
    gen: np.random.Generator,
) -> np.ndarray:
    """The fallback (L = −∞): the full noisy score vector, keeping what was drawn.

    Every unrevealed member j of bucket b has Z_j ~ N(0, 1) truncated to Z ≤ h_b (the
    module proof's invariant). It is drawn with the plain sampler — one N(0, 1) draw for
    every position, in bulk, as the full mechanism draws it — and a draw above its h_b is
    replaced by a draw from N(0, 1) truncated to (−∞, h_b] (by inversion,
    :func:`_redraw_above`). That is exact: Z' = Z on {Z ≤ h}, T on {Z > h}, with T
    independent of Z and distributed as Z | Z ≤ h, gives P(Z' ∈ A) = Φ(h)·P(T ∈ A) +
    (1 − Φ(h))·P(T ∈ A) = P(T ∈ A). The revealed positions (the candidates and the
    earlier rounds' draws) keep their noisy values: nothing already drawn is redrawn.
    The exact scores of all n documents come from one ``score_of(arange(n))`` call (a
    full scan), so a fallback costs about what the full mechanism does.
    """
    z = gen.standard_normal(n)
    if bool(np.isfinite(groups.h).any()):
        _redraw_above(z, groups.h, buckets, gen)
    z *= sigma
    z += _scores(score_of, np.arange(n))
    z[pool_positions] = pool_values
    return z


def _redraw_above(
    z: np.ndarray, h: np.ndarray, buckets: BucketBounds | None, gen: np.random.Generator
) -> None:
    """Replace (in place) every z_j above its bucket's h_b by N(0, 1) truncated to ≤ h_b.

    Positions that were revealed are redrawn too when above h_b; their values are
    overwritten by the caller, so this changes nothing for them.
    """
    over = np.flatnonzero(z > float(h.min()))
    if over.size == 0:
        return
    h_over = np.full(over.size, float(h[0])) if buckets is None else h[buckets.bucket_of(over)]
    over_h = z[over] > h_over
    over, h_over = over[over_h], h_over[over_h]
    if over.size:
        low = np.full(over.size, -np.inf)
        z[over] = _truncated_between(low, h_over, gen.random(over.size))


class _Groups:
    """The buckets' state during one selection: unrevealed counts U_b, truncation points
    h_b, and the revealed members (as ranks among the non-candidates).

    Rank spaces: ``flat`` indexes ``order`` (positions bucket by bucket); ``g`` ranks the
    non-candidates in flat order; ``h`` ranks the unrevealed non-candidates. Buckets are
    contiguous in all three, and each map is the "rank among the non-excluded" map of
    :func:`_non_excluded_at`.
    """

    def __init__(
        self,
        u: np.ndarray,
        sizes: np.ndarray,
        cand_counts: np.ndarray,
        cand_flat: np.ndarray,
        order: np.ndarray | None,
    ) -> None:
        self.u = u
        self.unrevealed = (sizes - cand_counts).astype(np.int64)
        self.g_start = np.concatenate([[0], np.cumsum(self.unrevealed)[:-1]]).astype(np.int64)
        self.h = np.full(u.size, np.inf)
        self.cand_flat = cand_flat
        self.order = order
        self.revealed_g = np.empty(0, dtype=np.int64)
        self.revealed_per = np.zeros(u.size, dtype=np.int64)

    @classmethod
    def make(
        cls, cand: np.ndarray, n: int, bound: float | FloatArray, buckets: BucketBounds | None
    ) -> _Groups:
        if buckets is None:
            u = np.asarray(bound, dtype=np.float64).reshape(-1)
            if u.size != 1 or not np.isfinite(u).all():
                raise ConfigError(
                    f"Without buckets, 'bound' must be one finite number; got {bound!r}."
                )
            return cls(u, np.array([n]), np.array([cand.size]), np.sort(cand), None)
        if buckets.n != n:
            raise ConfigError(
                f"The buckets partition {buckets.n} positions but n={n}; build them on the "
                f"same index."
            )
        u = np.asarray(bound, dtype=np.float64).reshape(-1)
        if u.size != buckets.count or not np.isfinite(u).all():
            raise ConfigError(
                f"With buckets, 'bound' must hold one finite bound per bucket "
                f"({buckets.count}); got {u.size} value(s). Use buckets.bounds(query)."
            )
        counts = np.bincount(buckets.bucket_of(cand), minlength=buckets.count)
        return cls(u, buckets.sizes, counts, np.sort(buckets.inverse[cand]), buckets.order)

    def done(self) -> bool:
        return not bool(self.unrevealed.any())

    def _expected(self, levels: np.ndarray, sigma: float, mask: np.ndarray) -> np.ndarray:
        """Σ_b U_b P(Z > (L − u_b)/σ | Z ≤ h_b) for each level L (over buckets in mask)."""
        a = (levels[:, None] - self.u[mask][None, :]) / sigma
        p = _prob_above(a, np.repeat(self.h[mask][None, :], levels.size, axis=0))
        return np.asarray(p @ self.unrevealed[mask].astype(np.float64))

    def choose_level(
        self, tau: float, sigma: float, target: float, budget: float, stalled: bool
    ) -> tuple[np.ndarray, bool, bool]:
        """The per-bucket thresholds a_b of this round's level; whether it is final; and
        whether it is the fallback (L = −∞): when the rounds would exceed the budget, or
        when the last round did not raise τ while L = τ would exceed it (small σ with
        loose bounds: the revealed documents score far below their bound), or when L = τ
        would reveal more than half of the unrevealed documents."""
        a_tau = (tau - self.u) / sigma
        mask = (self.unrevealed > 0) & (a_tau < np.minimum(self.h, 9.0))
        if not mask.any():
            return a_tau, True, False
        at_tau = float(_prob_above(a_tau[mask], self.h[mask]) @ self.unrevealed[mask])
        if at_tau <= target:
            return a_tau, True, False
        if (
            target > budget
            or (stalled and at_tau > budget)
            or at_tau > _FALLBACK_AT * float(self.unrevealed.sum())
        ):
            return np.full(self.u.size, -np.inf), True, True
        top = self.u + sigma * np.minimum(self.h, 9.0)
        lo, hi = tau, float(top[mask].max())
        level = hi
        for _ in range(_REFINE):  # bracket E(L) = target on a grid, then refine it
            levels = np.linspace(hi, lo, _LEVELS + 1)
            counts = self._expected(levels, sigma, mask)
            ok = np.flatnonzero(counts <= target)
            if ok.size == 0:
                break
            j = int(ok[-1])  # the lowest level that reveals at most `target`
            level = float(levels[j])
            if j == _LEVELS:
                break
            hi, lo = float(levels[j]), float(levels[j + 1])
        return (level - self.u) / sigma, False, False

    def reveal(self, a: np.ndarray, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Draw which unrevealed members have Z in (a_b, h_b], and their Z."""
        p = _prob_above(a, self.h)
        m = gen.binomial(self.unrevealed, p)
        h_prev = self.h
        self.h = np.minimum(self.h, a)
        total = int(m.sum())
        if total == 0:
            return np.empty(0, dtype=np.int64), np.empty(0)
        h_start = self.g_start - np.concatenate([[0], np.cumsum(self.revealed_per)[:-1]])
        h_ranks, bucket = _distinct_ranks(m, self.unrevealed, h_start, gen)
        g = _non_excluded_at(self.revealed_g, h_ranks)
        flat = _non_excluded_at(self.cand_flat, g)
        pos = flat if self.order is None else self.order[flat]
        z = _truncated_between(a[bucket], h_prev[bucket], gen.random(total))
        self.revealed_g = np.sort(np.concatenate([self.revealed_g, g]))
        self.revealed_per += m
        self.unrevealed -= m
        return pos, z


def _distinct_ranks(
    m: np.ndarray, avail: np.ndarray, start: np.ndarray, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """For each bucket b, m_b distinct uniform ranks in [start_b, start_b + avail_b).

    Sparse buckets draw with replacement and redraw what collided (the procedure is
    invariant under permutations of each bucket's ranks and returns m_b distinct ones: a
    uniform subset); dense ones use ``Generator.choice`` without replacement.
    """
    # Buckets giving more than a quarter of their members draw them directly (no
    # coupon-collector tail); the others draw with replacement and redraw collisions.
    dense = (m > 0) & (4 * m > avail)
    parts = [
        start[b]
        + (
            np.arange(avail[b])
            if m[b] == avail[b]
            else np.sort(gen.choice(avail[b], size=int(m[b]), replace=False))
        )
        for b in np.flatnonzero(dense)
    ]
    chosen = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    need = np.where(dense, 0, m)
    got = np.empty(0, dtype=np.int64)
    while need.any():
        bid = np.repeat(np.flatnonzero(need), need[need > 0])
        draw = start[bid] + (gen.random(bid.size) * avail[bid]).astype(np.int64)
        got = np.unique(np.concatenate([got, draw]))
        have = np.bincount(np.searchsorted(start, got, side="right") - 1, minlength=m.size)
        need = np.where(dense, 0, m - have)
        if (need < 0).any():  # pragma: no cover - draws are capped by need
            raise ConfigError("Internal error: drew more ranks than needed.")
    ranks = np.sort(np.concatenate([chosen, got]))
    bucket = np.searchsorted(start, ranks, side="right") - 1
    return ranks, bucket


def _non_excluded_at(sorted_excluded: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """The indices (in the full index space) of the non-excluded items of the given ranks
    (0-based, in index order), without materialising the non-excluded items."""
    if sorted_excluded.size == 0:
        return ranks
    shifted = sorted_excluded - np.arange(sorted_excluded.size)  # excluded before each gap
    return ranks + np.searchsorted(shifted, ranks, side="right")


def _scores(score_of: object, positions: np.ndarray) -> np.ndarray:
    if callable(score_of):
        return np.asarray(score_of(positions), dtype=np.float64).reshape(-1)
    return np.take(np.asarray(score_of, dtype=np.float64), positions)
