"""The account: its policy, its query counter and its noise-then-select (collusion paper §2.1).

An account a of a RAG service may send at most r queries per audit window and is promised
(ε_acc, δ_acc)-DP retrieval over that window. Everything that promise rests on lives here,
once, for every place that serves or re-executes an account's queries (the
``noisy_topk`` retriever, the multi-tenant ``TenantRetriever``, the audited provider and
the verifier's re-execution):

* :class:`AccountPolicy` — r, (ε_acc, δ_acc), the calibration, the public score range and
  so the sensitivity Δ (one default, :data:`DEFAULT_SCORE_RANGE`), and σ from
  :func:`~ragprivacy.dp.calibrate_account_sigma`, the one calibration entry point;
* :class:`AccountCounter` — the atomic per-account query counter of a window: reserve
  before any document is touched, release only if the request fails before anything was
  read or in a way that provably does not depend on the data (a failure is an answer:
  ``ragprivacy.rag.charged_on_failure``);
* :class:`GaussianNoisyTopK` — the one noise-then-select, eq. (2.1):
  TopK(clip(Score(q, D)) + N(0, σ²I)), integer-exact on a fixed-point grid by default
  (:meth:`GaussianNoisyTopK.select_units` is the integer rule the audit commits to);
* :func:`derived_bits` — with a window seed s_W, the noise of query q is derived,
  z_q = DGS(H(s_W ‖ rec_q); σ) with rec_q = (W, a, t(a), H(q), j, n) (§5.3, claim A2, with the
  query number j for the paper's timestamp: see :func:`query_input`), so
  whoever holds s_W re-derives it exactly.

**Neighbouring relation: replace the document held by one slot** of the index (the score
vector is indexed by slot and the output is slot positions; docs/dp.md). Under add/remove
the mechanism is DP only if the index is padded to a public size with dummy documents that
score the low end of the score range. **Sensitivity**: replacing one document moves one
coordinate of the score vector by at most the width of the interval its scores live in;
every score is clipped to the public ``score_range`` first (per-coordinate
post-processing of each document's own score), so Δ = high − low holds for any input.
The default, :data:`DEFAULT_SCORE_RANGE` = (−1, 1), is the range of cosine scores of unit
vectors, Δ = 2. The collusion paper's Δ = 1 (§2.2) holds honestly with
:data:`PAPER_SCORE_RANGE` = (0, 1) (negative scores clipped to 0), which the paper's
experiments use. ``score_range=None`` with an explicit ``sensitivity`` takes Δ on trust.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.dp.calibration import CALIBRATION_METHODS, calibrate_account_sigma
from ragprivacy.dp.events import GaussianEvent, PrivacyEvent, SelfComposedEvent
from ragprivacy.dp.mechanisms import top_k_indices
from ragprivacy.dp.randomness import ChaCha20Bits, RecordPart, simulation_rng
from ragprivacy.dp.samplers import Grid, discrete_gaussian, standard_normal_float
from ragprivacy.dp.sensitivity import score_sensitivity
from ragprivacy.errors import BudgetExhaustedError, ConfigError

__all__ = [
    "DEFAULT_SCORE_RANGE",
    "NOISE_FIRST_MAX_FRACTION",
    "NOISE_FIRST_MIN_SCORED",
    "PAPER_SCORE_RANGE",
    "AccountCounter",
    "AccountPolicy",
    "GaussianNoisyTopK",
    "NoisySelection",
    "Reservation",
    "derived_bits",
    "noise_first_min_scored",
    "query_input",
]

#: The public interval scores are clipped to unless a policy says otherwise: cosine /
#: inner-product scores of unit vectors, so Δ = 2 under replace-one-slot.
DEFAULT_SCORE_RANGE: Final[tuple[float, float]] = (-1.0, 1.0)
#: The collusion paper's Δ = 1 (§2.2) made true by clipping negative scores to 0.
PAPER_SCORE_RANGE: Final[tuple[float, float]] = (0.0, 1.0)

_REC_LABEL = "rec_q"

#: :meth:`GaussianNoisyTopK.select_noise_first` scores everything at once when more than
#: this fraction of a row's documents are candidates: past about n/16 documents, gathering
#: their scores costs about as much as one scan or more (benchmarks/README.md, "Private
#: retrieval"; docs/dp.md).
NOISE_FIRST_MAX_FRACTION: Final[float] = 0.0625
#: The fewest documents a noise-first selection scores per query (with 8·K, whichever is
#: larger): padding C to a constant keeps the number of rows read from depending on the
#: noise in practice (a count of rows read, seen beside the answer, says more than it).
NOISE_FIRST_MIN_SCORED: Final[int] = 64


def noise_first_min_scored(k: int) -> int:
    """The noise-first floor for top-``k``: max(:data:`NOISE_FIRST_MIN_SCORED`, 8k), the
    ``min_scored`` every noise-first caller passes (and the lazy path's candidate count)."""
    return max(NOISE_FIRST_MIN_SCORED, 8 * int(k))


def query_input(
    window_id: str, account: str, tenant: str, query_hash: str, seq: int, nonce: str = ""
) -> tuple[str, str, str, str, int, str]:
    """rec_q = (W, a, t(a), H(q), j, n): the input of a query's derived noise.

    j is the account's query number in window W (1, 2, …, at most r); n is the nonce the
    account's client sent with the query ("" when it sent none). **Deviation from the
    paper** (§5.3 uses (a, t(a), H(q), ts)): a timestamp is the provider's choice, so
    noise keyed by it could be ground — re-derived for many timestamps until it favours a
    chosen document; j is fixed by the ledger (the verifier checks that the j-th record of
    account a carries j), so nothing in rec_q is left to choose. The client's random n,
    which the provider learns only with the request, keeps it from choosing a seed s_W
    that favours queries it predicts before the window opens.
    """
    return (str(window_id), str(account), str(tenant), str(query_hash), int(seq), str(nonce))


def derived_bits(seed: bytes, rec: RecordPart) -> ChaCha20Bits:
    """The bit source of query record rec_q: ChaCha20 keyed by HMAC-SHA256(s_W, ("rec_q", rec)).

    The one derivation of §5.3 (A2): the service that serves a query, the audited provider
    and the verifier who re-executes it all draw z_q from this source, with rec_q from
    :func:`query_input`.
    """
    parts = tuple(rec) if isinstance(rec, tuple | list) else (rec,)
    return ChaCha20Bits.derived(seed, (_REC_LABEL, *parts))


# --------------------------------------------------------------------------- selection
@dataclass(frozen=True, slots=True)
class NoisySelection:
    """What a noisy top-K returned: ``indices`` (best first) and the ``noisy_scores`` used.

    ``event`` is the cost of the whole call: the per-query :class:`GaussianEvent` for one
    query (1-D scores), ``SelfComposedEvent(per_query, Q)`` for a batch of Q queries (2-D
    scores). ``event_per_query`` is the cost of one row, for callers that attach a cost to
    each query's result. ``noisy_scores`` are for instrumented evaluation only (the
    collusion paper's score channel, §4.5); a deployment shows neither them nor, to an
    attacker, the indices.
    """

    indices: IntArray
    noisy_scores: FloatArray
    event: PrivacyEvent
    event_per_query: GaussianEvent | None = None

    def __post_init__(self) -> None:
        if self.event_per_query is None and isinstance(self.event, GaussianEvent):
            object.__setattr__(self, "event_per_query", self.event)


@dataclass(frozen=True, slots=True, kw_only=True)
class GaussianNoisyTopK:
    """Gaussian noise-then-select: TopK(clip(Score(q, D)) + N(0, σ²I)) (collusion paper eq. 2.1).

    The one noise-then-select of an account (module docstring: neighbouring relation
    replace-one-slot, Δ = width of ``score_range``, default :data:`DEFAULT_SCORE_RANGE`).
    Guarantee: the release of the whole noisy score vector is a Gaussian mechanism with
    μ = Δ/σ (μ-GDP); the top-K indices are post-processing of it. Selecting first and
    noising only the winners breaks this (footnote 1 of the paper).

    **Secure mode** (default) is integer-exact: scores are placed on ``grid`` (resolution
    2^-b), clipped to the grid points inside the range, ⌈lo·2^b⌉ … ⌊hi·2^b⌋, so that a
    clipped score moves by at most (hi − lo)·2^b units and Δ holds exactly; discrete
    Gaussian noise of σ·2^b units is added to every score (:meth:`noise_units`) and the top
    K of the integers are selected, ties to the lower position (:meth:`select_units`, the
    rule the audit commits to). Without clipping (Δ on trust) rounding to the grid moves a
    score by up to half a unit each way, so the event charges one grid unit more.
    **Simulation mode** (``simulation=True``) adds numpy float noise from ``rng``.

    >>> m = GaussianNoisyTopK(sigma=0.5, k=2)
    >>> sel = m.select(np.array([0.9, 0.1, 0.8, 0.2]), bits=ChaCha20Bits.derived(bytes(32), "q1"))
    >>> sel.indices.shape, m.sensitivity, m.event.sensitivity
    ((2,), 2.0, 2.0)
    """

    sigma: float
    k: int
    sensitivity: float | None = None
    simulation: bool = False
    grid: Grid = field(default_factory=Grid)
    score_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(self, "k", check_positive_int("k", self.k))
        resolved = score_sensitivity(
            self.score_range, self.sensitivity, default_range=DEFAULT_SCORE_RANGE
        )
        object.__setattr__(self, "score_range", resolved.score_range)
        object.__setattr__(self, "sensitivity", resolved.sensitivity)
        if not isinstance(self.grid, Grid):
            raise ConfigError(f"The 'grid' parameter must be a Grid; got {self.grid!r}.")
        if not self.simulation:
            self.grid.scale_units(self.sigma)  # validates the range in grid units early

    @property
    def event(self) -> GaussianEvent:
        """The privacy event of one query (one row of scores, whatever the number of documents)."""
        return GaussianEvent(sigma=self.sigma, sensitivity=self.charged_sensitivity)

    @property
    def charged_sensitivity(self) -> float:
        """Δ one query is charged: Δ itself, plus one grid unit when secure scores are
        rounded to the grid without clipping (Δ on trust)."""
        sens = float(self.sensitivity)  # type: ignore[arg-type]  # resolved in __post_init__
        if self.simulation or self.score_range is not None:
            return sens
        return self.grid.rounded_sensitivity(sens)

    # -------------------------------------------------------------- the integer rule
    def bounds_units(self) -> tuple[int, int] | None:
        """The score range in grid units, rounded inwards: (⌈lo·2^b⌉, ⌊hi·2^b⌋), exactly."""
        if self.score_range is None:
            return None
        lo, hi = (Fraction(v) * (1 << self.grid.bits) for v in self.score_range)
        return math.ceil(lo), math.floor(hi)

    def clip_units(self, scores_units: IntArray) -> IntArray:
        """Integer scores clipped to :meth:`bounds_units` (unchanged without a range)."""
        s = np.asarray(scores_units, dtype=np.int64)
        bounds = self.bounds_units()
        return s if bounds is None else np.clip(s, bounds[0], bounds[1])

    def noise_units(
        self, shape: int | tuple[int, ...], *, bits: ChaCha20Bits | None = None
    ) -> IntArray:
        """Discrete Gaussian noise of σ·2^b grid units (``bits``: ``None`` = OS entropy,
        :func:`derived_bits` for noise derived from a window seed)."""
        if self.simulation:
            raise ConfigError("Integer noise is the secure path; this mechanism simulates.")
        return discrete_gaussian(self.grid.scale_units(self.sigma), shape, bits=bits)

    def select_units(self, scores_units: IntArray, noise_units: IntArray) -> IntArray:
        """The integer rule: positions of TopK(clip(s) + z), ties to the lower position.

        ``scores_units`` are the exact scores of every slot in grid units (one row per
        query, or 1-D for one); ``noise_units`` one noise value per score.
        """
        s = np.asarray(scores_units, dtype=np.int64)
        z = np.asarray(noise_units, dtype=np.int64)
        if z.shape != s.shape:
            raise ConfigError(
                f"One noise value per score is required; got {z.shape} noise for {s.shape} scores."
            )
        return top_k_indices(self.clip_units(s) + z, self.k)

    # -------------------------------------------------------------- scores as floats
    def _clipped(self, arr: np.ndarray) -> np.ndarray:
        lo, hi = self.score_range  # type: ignore[misc]  # only called with a range
        return np.asarray(np.clip(arr, lo, hi))

    def _units(self, arr: np.ndarray) -> IntArray:
        """clip_units(to_units(clip(arr))) in one float64 buffer: the scaled scores are
        rounded to integers and clipped to :meth:`bounds_units` as floats (exact: both are
        integers below 2^53 in magnitude), then converted once."""
        bounds = self.bounds_units()
        if bounds is None or max(abs(bounds[0]), abs(bounds[1])) >= 2**53:
            clipped = arr if self.score_range is None else self._clipped(arr)
            return self.clip_units(self.grid.to_units(clipped))
        buf = np.multiply(arr, float(1 << self.grid.bits), dtype=np.float64)
        np.rint(buf, out=buf)
        np.clip(buf, float(bounds[0]), float(bounds[1]), out=buf)
        return np.asarray(buf.astype(np.int64))

    def select(
        self,
        scores: FloatArray,
        *,
        rng: RngLike = None,
        bits: ChaCha20Bits | None = None,
    ) -> NoisySelection:
        """Clip to ``score_range``, noise every score, then take the top K.

        Args:
            scores: shape (N,) for one query, or (Q, N) for Q queries (each row gets its
                own noise; the returned event is then ``SelfComposedEvent(event, Q)``).
            rng: simulation mode only.
            bits: secure mode only: the bit source (``None`` = fresh OS entropy;
                :func:`derived_bits` for audited noise).
        """
        simulation_rng(rng, simulation=self.simulation, bits=bits)
        arr = _score_array(scores)
        # One buffer per call, written in place: the noise, then the (clipped) scores added
        # to it; the top K are read from it without a negated copy.
        noisy = self._draw(arr.shape, rng, bits)
        return self._finish(noisy, arr)

    def _draw(self, shape: tuple[int, ...], rng: RngLike, bits: ChaCha20Bits | None) -> np.ndarray:
        """The noise of every slot, as :meth:`select` draws it: σ·N(0, 1) floats from
        ``rng`` (simulation) or discrete Gaussian grid units from ``bits`` (secure)."""
        if self.simulation:
            noise = standard_normal_float(make_rng(rng), shape)
            noise *= self.sigma
            return noise
        return self.noise_units(shape, bits=bits)

    def _add_scores(self, noise: np.ndarray, arr: np.ndarray) -> None:
        """noise += clip(arr) (simulation) or noise += units of clip(arr) (secure), in
        place, element by element: a subset of slots gets the same values as the whole."""
        if self.simulation:
            noise += arr if self.score_range is None else self._clipped(arr)
        else:
            noise += self._units(arr)  # the noisy integer scores clip(s) + z

    def _picked(self, noisy: np.ndarray, idx: IntArray) -> FloatArray:
        picked = np.take_along_axis(noisy, idx, axis=-1)
        return picked if self.simulation else np.asarray(self.grid.from_units(picked))

    def _finish(self, noisy: np.ndarray, arr: np.ndarray) -> NoisySelection:
        """The rest of the full path: add every score to its noise, take the top K (ties
        to the lower position; for secure units this is :meth:`select_units`)."""
        if noisy.shape != arr.shape:
            raise ConfigError(f"The scores have shape {arr.shape}; {noisy.shape} were expected.")
        self._add_scores(noisy, arr)
        idx = top_k_indices(noisy, self.k)
        return self._selection(idx, self._picked(noisy, idx), arr.ndim == 1, arr.shape[0])

    def _selection(
        self, idx: IntArray, picked: FloatArray, one_row: bool, rows: int
    ) -> NoisySelection:
        one = self.event
        return NoisySelection(
            indices=idx,
            noisy_scores=picked,
            event=one if one_row else SelfComposedEvent(one, rows),
            event_per_query=one,
        )

    # -------------------------------------------------------------- noise first
    def noise_bounds(self) -> tuple[float, float] | tuple[int, int]:
        """Certified bounds [lo, hi] of every clipped score *as the noise is added to it*:
        :meth:`bounds_units` in secure mode; in simulation mode the range widened to cover
        a float32 clip (``np.clip`` of float32 scores rounds the range's ends to
        float32), so that lo ≤ c ≤ hi holds for every clipped score c of either dtype."""
        bounds = self.bounds_units()
        if bounds is None:
            raise ConfigError(
                "The noise-first selection needs the public score_range that certifies "
                "every clipped score; this mechanism takes Δ on trust (score_range=None)."
            )
        if not self.simulation:
            return bounds
        lo, hi = self.score_range  # type: ignore[misc]  # not None: bounds exist
        return (min(float(lo), float(np.float32(lo))), max(float(hi), float(np.float32(hi))))

    def noise_first_positions(self, noise: np.ndarray) -> IntArray:
        """The candidates C of one query: the sorted positions whose noise alone leaves
        them a chance of the top K (:meth:`select_noise_first` has the rule and proof).

        ``noise`` is one row of noise exactly as :meth:`select` adds it: σ-scaled float64
        values (simulation) or integer grid units (secure). C depends on the noise and
        the public bounds only, never on a score.
        """
        z = np.asarray(noise)
        if z.ndim != 1:
            raise ConfigError(f"One row of noise is required; got shape {z.shape}.")
        n, k = z.size, self.k
        lo, hi = self.noise_bounds()
        if n <= k:
            return np.arange(n, dtype=np.int64)
        if self.simulation:
            # fl(· + lo) is non-decreasing, so the K-th largest of fl(z + lo) is
            # fl(z_(K) + lo), z_(K) the K-th largest noise value.
            z_k = np.partition(z, n - k)[n - k]
            t = np.float64(z_k) + np.float64(lo)
            # fl(z_i + hi) >= t needs z_i + hi >= t - |t|·2^-53 (round to nearest), so a
            # looser cut on z alone keeps every candidate (2^-50 covers the rounding of
            # t - hi too); the exact test then runs on those few only.
            slack = (abs(float(t)) + abs(float(hi)) + abs(float(t) - float(hi))) * 2.0**-50
            near = np.flatnonzero(z >= (float(t) - float(hi)) - slack)
            return near[z[near] + np.float64(hi) >= t].astype(np.int64)
        # Integers: T = z_(K) + lo exactly, and z_i + hi >= T  <=>  z_i >= z_(K) - (hi - lo).
        z_k = int(np.partition(z, n - k)[n - k])
        cut = z_k - (int(hi) - int(lo))
        if cut <= np.iinfo(np.int64).min:
            return np.arange(n, dtype=np.int64)
        return np.flatnonzero(z >= cut).astype(np.int64)

    def select_noise_first(
        self,
        shape: int | tuple[int, int],
        score_at: Callable[[int, IntArray], FloatArray],
        *,
        score_all: Callable[[], FloatArray] | None = None,
        rng: RngLike = None,
        bits: ChaCha20Bits | None = None,
        max_fraction: float = NOISE_FIRST_MAX_FRACTION,
        min_scored: int = 0,
    ) -> NoisySelection:
        """:meth:`select` that scores only the documents the noise leaves in the race.

        Returns exactly what ``select(scores, rng=rng, bits=bits)`` returns — the same
        indices and the same noisy scores, bit for bit — when ``score_at(row, p)`` gives
        ``scores[row, p]`` (``scores[p]`` for one query, ``row = 0``) and ``score_all()``
        the whole ``scores`` array.

        **Rule.** Draw the noise z of *all* ``shape`` slots exactly as :meth:`select`
        does (the same generator calls in the same order, so the same values). Every
        clipped score c_i lies in the public [lo, hi] (:meth:`noise_bounds`), so each
        noisy score v_i = c_i + z_i lies in [z_i + lo, z_i + hi]. Let T be the K-th
        largest of z + lo. A slot with z_i + hi < T cannot be in the top K, so only the
        candidates C = {i : z_i + hi ≥ T} are scored (``score_at(row, C)``, C sorted by
        position), their noisy scores formed with the full path's arithmetic, and the
        top K of C taken with ties to the lower position.

        **Proof of exactness.** Let S be K slots with the K largest values of z + lo
        (so z_j + lo ≥ T and v_j ≥ z_j + lo ≥ T for j ∈ S). For i ∉ C, v_i ≤ z_i + hi <
        T ≤ v_j for every j ∈ S, and i ∉ S (z_i + lo ≤ z_i + hi < T): K slots beat i
        strictly, so i is not in the top K whatever the tie rule. S ⊆ C (z_j + hi ≥
        z_j + lo ≥ T), so |C| ≥ K, and the top K of the total order (v descending,
        position ascending) lies in C; restricted to C (kept in position order, so the
        lower index is the lower position) that order is unchanged, hence the same K
        slots in the same order. The values are bit-identical: each v_i is the same
        element-wise operation on the same z_i and score. In secure mode everything is
        in integer grid units (exact). In simulation mode v_i = fl(z_i + c_i), and
        fl(z_i + lo) ≤ fl(z_i + c_i) ≤ fl(z_i + hi) because rounding is monotone, so the
        argument holds with fl(z + lo) and fl(z + hi), which is what is computed (the
        K-th largest of fl(z + lo) is fl(z_(K) + lo), fl(· + lo) being non-decreasing). ∎

        **Privacy.** The output law is the full mechanism's (it *is* the full
        mechanism's output), so the guarantee of eq. (2.1) is unchanged. C depends on
        the noise and the public bounds alone, never on the scores, so the work done on
        its own (which documents are scored, how many, whether the fallback ran) reveals
        nothing about the data (unlike :mod:`ragprivacy.retrieval.lazy_noisy`, whose run
        time depends on the scores). **But C is a function of the noise, and must stay
        as secret as the noise**: together with the output it tells more than the output
        alone. With K = 1 and C = {a, b}, say, the two noises are within Δ of each other,
        so the winner is decided by s_a − s_b against a noise gap of at most Δ, not σ.
        The guarantee covers the output only; a deployment that lets an observer see
        which rows were read (a database's query log) or time the work to the
        microsecond (|C|), or the fallback (a full scan against a few look-ups), must
        hide it or account for it. ``min_scored`` = m makes the number scored constant
        (m) except when |C| > m: at σ = 3,584, Δ = 1, K = 5, n = 10⁶ the noise puts about
        n·φ(z_(K)/σ)/σ·Δ ≈ 0.006 extra slots within Δ of z_(K), so |C| > 64 essentially
        never happens; m does not hide *which* rows were read. The full path has no such
        channel. This is an exact rearrangement of the collusion paper's eq. (2.1), not a
        new mechanism; footnote 1's warning is respected: every slot is noised (z drawn
        for all n), only scoring is skipped where no score could change the result.

        **Fallback.** When a row's C holds more than ``max_fraction`` of its n slots
        (σ small against Δ), scoring everything at once is cheaper: ``score_all()`` (or,
        without it, ``score_at(row, all positions)`` per row) is scored for the whole
        call and the full path finishes with the noise already drawn. The choice depends
        on the noise only. Scores outside C are never read, so a NaN there goes
        unnoticed (:meth:`select` refuses it).

        Args:
            shape: N for one query, (Q, N) for Q queries (one row of noise each).
            score_at: ``(row, positions) -> scores`` of those positions for query row
                ``row``, in the given order.
            score_all: the full score array (shape ``shape``), for the fallback.
            rng: simulation mode only.
            bits: secure mode only (``None`` = fresh OS entropy; :func:`derived_bits`).
            min_scored: score at least this many documents per row: C padded with the
                next largest noises (a superset of C changes nothing in the output), so
                the number scored is the constant ``min_scored`` unless |C| exceeds it.
            max_fraction: the candidate fraction of a row above which everything is
                scored (default 1/16, :data:`NOISE_FIRST_MAX_FRACTION`: a gathered score
                costs about ten scanned ones).
        """
        simulation_rng(rng, simulation=self.simulation, bits=bits)
        if not 0.0 < float(max_fraction) <= 1.0:
            raise ConfigError(f"The 'max_fraction' must be in (0, 1]; got {max_fraction!r}.")
        if isinstance(min_scored, bool) or not isinstance(min_scored, int) or min_scored < 0:
            raise ConfigError(f"The 'min_scored' must be an integer >= 0; got {min_scored!r}.")
        dims = (int(shape),) if isinstance(shape, int | np.integer) else tuple(shape)
        if len(dims) not in (1, 2) or min(dims) < 1:
            raise ConfigError(f"The 'shape' must be N or (Q, N) with Q, N >= 1; got {shape!r}.")
        self.noise_bounds()  # refuse before drawing anything when there are no bounds
        noisy = self._draw(dims, rng, bits)
        rows = np.atleast_2d(noisy)
        n = rows.shape[1]
        cands = [self.noise_first_positions(rows[r]) for r in range(rows.shape[0])]
        if max(c.size for c in cands) > float(max_fraction) * n:
            if score_all is not None:
                arr = _score_array(score_all())
            else:
                every = np.arange(n, dtype=np.int64)
                per_row = [_score_array(score_at(r, every)) for r in range(rows.shape[0])]
                arr = per_row[0] if len(dims) == 1 else np.stack(per_row)
            return self._finish(noisy, arr)
        idx = np.empty((rows.shape[0], min(self.k, n)), dtype=np.int64)
        picked = np.empty(idx.shape, dtype=np.float64)
        for r, cand in enumerate(cands):
            if cand.size < min_scored:
                cand = _padded(rows[r], cand, min_scored)
            got = _score_array(score_at(r, cand))
            if got.shape != cand.shape:
                raise ConfigError(
                    f"score_at returned {got.shape} scores for {cand.size} positions."
                )
            part = rows[r][cand]  # a copy: the noise of the candidates
            self._add_scores(part, got)
            best = top_k_indices(part, self.k)
            idx[r] = cand[best]
            picked[r] = self._picked(part, best)
        if len(dims) == 1:
            return self._selection(idx[0], picked[0], True, 1)
        return self._selection(idx, picked, False, dims[0])

    def select_units_noise_first(
        self,
        noise_units: IntArray,
        units_at: Callable[[IntArray], IntArray],
        *,
        max_fraction: float = NOISE_FIRST_MAX_FRACTION,
        min_scored: int = 0,
    ) -> IntArray:
        """:meth:`select_units` of one query from the scores of its candidates only.

        Returns ``select_units(scores_units, noise_units)`` exactly when
        ``units_at(p)`` gives ``scores_units[p]`` (the rule and proof are
        :meth:`select_noise_first`'s, in integer units); ``units_at`` is called once:
        with :meth:`noise_first_positions` of the noise, padded to ``min_scored``
        positions with the next-largest noises, or with every position when the
        candidates are more than ``max_fraction`` of them. For a re-execution that
        derives z_q from :func:`derived_bits` and scores only what z_q leaves in the race.
        """
        z = np.asarray(noise_units, dtype=np.int64)
        if self.simulation:
            raise ConfigError("Integer noise is the secure path; this mechanism simulates.")
        n = z.shape[0]
        cand = self.noise_first_positions(z)
        if cand.size > float(max_fraction) * n:
            return self.select_units(units_at(np.arange(n, dtype=np.int64)), z)
        if cand.size < min_scored:
            cand = _padded(z, cand, min_scored)
        got = np.asarray(units_at(cand), dtype=np.int64)
        if got.shape != cand.shape:
            raise ConfigError(f"units_at returned {got.shape} scores for {cand.size} positions.")
        return cand[top_k_indices(self.clip_units(got) + z[cand], self.k)]


def _padded(noise: np.ndarray, cand: IntArray, m: int) -> IntArray:
    """C together with the positions of the m largest noise values (sorted; all of them
    when m >= n): a superset of C chosen from the noise alone."""
    n = noise.size
    if m >= n:
        return np.arange(n, dtype=np.int64)
    top = np.argpartition(noise, n - m)[n - m :]
    return np.union1d(cand, top).astype(np.int64)


def _score_array(scores: FloatArray) -> np.ndarray:
    """Scores as :meth:`GaussianNoisyTopK.select` reads them: float32 stays float32
    (no copy), anything else becomes float64; a non-empty 1-D or 2-D array of finite
    values, or a :class:`ConfigError`."""
    arr = np.asarray(scores)
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0:
        raise ConfigError(f"Scores must be a non-empty 1-D or 2-D array; got shape {arr.shape}.")
    if not np.isfinite(arr).all():
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ConfigError(f"Scores must be finite; got {bad} NaN or infinite value(s).")
    return arr


# --------------------------------------------------------------------------- policy
@dataclass(frozen=True, slots=True, kw_only=True)
class AccountPolicy:
    """Per-account policy of §2.1: rate limit r per window and budget (ε_acc, δ_acc).

    σ comes from the budget by ``calibration`` through
    :func:`~ragprivacy.dp.calibrate_account_sigma`: ``"paper"`` is eq. (3.1) + (3.4)
    (advanced composition; what the paper's experiments use), ``"exact"`` the tight
    Gaussian-DP σ, ``"analytic"`` and ``"rdp"`` the others. An explicit ``sigma``
    overrides the calibration (the guarantee is then whatever that σ gives).

    ``score_range`` is the public interval scores are clipped to, Δ = its width
    (``sensitivity`` may state a larger Δ); the default is :data:`DEFAULT_SCORE_RANGE`
    (Δ = 2); :data:`PAPER_SCORE_RANGE` gives the paper's Δ = 1 with clipping;
    ``score_range=None, sensitivity=1.0`` is the paper's statement as printed, Δ on trust.

    >>> round(AccountPolicy(rate_limit=10_000, epsilon=1.0, delta=1e-6).noise_sigma)
    7169
    >>> paper = AccountPolicy(rate_limit=10_000, epsilon=1.0, score_range=None, sensitivity=1.0)
    >>> round(paper.noise_sigma), paper.sensitivity
    (3584, 1.0)
    """

    rate_limit: int
    epsilon: float
    delta: float = 1e-6
    sigma: float | None = None
    calibration: str = "paper"
    score_range: tuple[float, float] | None = DEFAULT_SCORE_RANGE
    sensitivity: float | None = None

    def __post_init__(self) -> None:
        check_positive_int("rate_limit", self.rate_limit)
        check_positive("epsilon", self.epsilon)
        if not 0 < float(self.delta) < 1:
            raise ConfigError(f"The 'delta' parameter must be in (0, 1); got {self.delta!r}.")
        check_choice("calibration", self.calibration, CALIBRATION_METHODS)
        if self.sigma is not None:
            check_positive("sigma", self.sigma)
        resolved = score_sensitivity(self.score_range, self.sensitivity)
        object.__setattr__(self, "score_range", resolved.score_range)
        object.__setattr__(self, "sensitivity", resolved.sensitivity)

    @property
    def sensitivity_source(self) -> str:
        """``"score_range"`` when clipping enforces Δ, ``"trusted"`` when it is claimed."""
        return "trusted" if self.score_range is None else "score_range"

    @property
    def noise_sigma(self) -> float:
        """σ on every score of this account's queries, calibrated with Δ."""
        return self.sigma_for(float(self.sensitivity))  # type: ignore[arg-type]  # resolved

    def sigma_for(self, charged: float) -> float:
        """σ so that ``rate_limit`` queries, each charged sensitivity ``charged``, are
        (ε, δ)-DP (the policy's own ``sigma`` when it fixes one)."""
        if self.sigma is not None:
            return float(self.sigma)
        return calibrate_account_sigma(
            self.epsilon, self.delta, self.rate_limit, sensitivity=charged, method=self.calibration
        )

    def mechanism(
        self, k: int, *, simulation: bool = False, grid: Grid | None = None
    ) -> GaussianNoisyTopK:
        """The account's noise-then-select, σ calibrated for the Δ its events charge (so
        the events, the budget and σ agree)."""
        grid = grid or Grid()
        probe = GaussianNoisyTopK(
            sigma=1.0,
            k=k,
            sensitivity=self.sensitivity,
            score_range=self.score_range,
            simulation=simulation,
            grid=grid,
        )
        return GaussianNoisyTopK(
            sigma=self.sigma_for(probe.charged_sensitivity),
            k=k,
            sensitivity=self.sensitivity,
            score_range=self.score_range,
            simulation=simulation,
            grid=grid,
        )


# --------------------------------------------------------------------------- counter
@dataclass(frozen=True, slots=True)
class Reservation:
    """``count`` queries reserved for ``account`` in window number ``window``; the first
    is the account's query number ``first`` of the window (1-based)."""

    account: str
    count: int
    window: int
    first: int = 1

    @property
    def token(self) -> str:
        """A charge id naming the window, for :attr:`ragprivacy.types.Retrieval.charge_ids`."""
        return f"window:{self.window}"


class AccountCounter:
    """Queries each account has made in the current window, against its limit (thread-safe).

    A request is reserve → compute → keep or release: :meth:`reserve` checks that all
    requested queries fit and records them as one step, or raises
    :class:`~ragprivacy.errors.BudgetExhaustedError` and records nothing; :meth:`release`
    gives a failed request's queries back. :meth:`open_window` starts a new window (every
    count back to 0); a reservation made in an earlier window is released into nothing, so
    a slow failure cannot refund the new window.

    >>> c = AccountCounter(2)
    >>> r = c.reserve("alice", 2)
    >>> c.remaining("alice")
    0
    >>> c.release(r); c.remaining("alice")
    2
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = None if limit is None else check_positive_int("limit", limit)
        self._used: dict[str, int] = {}
        self._window = 0
        self._lock = threading.Lock()

    @property
    def window(self) -> int:
        """The number of the current window (0 for the first)."""
        return self._window

    def used(self, account: str) -> int:
        with self._lock:
            return self._used.get(account, 0)

    def remaining(self, account: str, *, limit: int | None = None) -> int:
        return self._limit(limit) - self.used(account)

    def _limit(self, limit: int | None) -> int:
        if limit is not None:
            return check_positive_int("limit", limit)
        if self.limit is None:
            raise ConfigError("This counter has no default limit; pass the account's limit.")
        return self.limit

    def reserve(self, account: str, count: int = 1, *, limit: int | None = None) -> Reservation:
        """Record ``count`` queries for ``account`` (limit: the account's r, or the
        counter's default); all or nothing."""
        count = check_positive_int("count", count)
        cap = self._limit(limit)
        with self._lock:
            used = self._used.get(account, 0)
            if used + count > cap:
                raise BudgetExhaustedError(
                    f"Account {account!r} has used {used} of its {cap} queries in this window "
                    f"and asked for {count} more; its privacy budget for the window is spent. "
                    f"Wait for the next window or raise the budget."
                )
            self._used[account] = used + count
            return Reservation(account, count, self._window, used + 1)

    def release(self, reservation: Reservation) -> None:
        """Give back a failed request's queries (nothing if its window has closed)."""
        with self._lock:
            if reservation.window != self._window:
                return
            left = self._used.get(reservation.account, 0) - reservation.count
            self._used[reservation.account] = max(left, 0)

    def release_tokens(self, account: str, count: int, tokens: Sequence[str]) -> None:
        """:meth:`release` from the window token a retrieval carried (``charge_ids``)."""
        for token in tokens:
            if token.startswith("window:"):
                self.release(Reservation(account, count, int(token.split(":", 1)[1])))
                return

    def open_window(self) -> None:
        """Start a new window: every account's count resets."""
        with self._lock:
            self._window += 1
            self._used.clear()
