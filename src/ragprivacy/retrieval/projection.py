"""``projection`` and ``dp_projection``: retrieval in a randomly projected space.

Random projection (RP paper §3.1, Alg. 1): draw R ∈ ℝ^{k×d} once, with i.i.d. entries
N(0, 1/k) (Gaussian) or ±1/√k (Rademacher, RP paper App. H, scaled to the same variance;
the paper's unscaled ±1 gives the same cosine ranking), project the index once offline
(e'_i = R e_i), project each query (x' = R x) and rank by the cosine of x' with the e'_i.
An empirical defense: it carries no DP guarantee (``Retrieval.event`` is ``NonPrivateEvent``).

DP-RP-G (RP paper App. D, Alg. 2; Blocki et al. 2012): project, clip every projected row
to L2 norm ≤ c (line 6), then per query add Z with i.i.d. N(0, σ²) entries to the projected
index (lines 9–11), and rank by cosine against the noisy rows.

Neighbouring relation: **replace the document held by one slot** (one row of the
projected index is replaced by another row of norm ≤ c; the index keeps its size and its
row order). Sensitivity: the two rows differ by at most ‖r − r'‖ ≤ 2c (attained by
r' = −r), so the released noisy matrix has L2 sensitivity Δ = 2c, σ is calibrated for
Δ = 2c (:func:`dp_rp_sigma`) and each release is charged ``GaussianEvent(σ, 2c)``.
Guarantee: each release is μ-GDP with μ = 2c/σ, i.e. (ε, δ)-DP at the target under the
chosen calibration; the cosine ranking and the returned positions are post-processing.
``GaussianEvent`` has no field for the relation: the event means replace-one here.

**This deviates from the paper's accounting.** The paper (Alg. 2 line 9) calibrates
σ = c√(2 ln(1.25/δ))/ε, i.e. sensitivity c for adding or removing one row. But the
retriever returns the positions (and the documents at them) of the top-K: removing a row
shifts the positions and removes a candidate that could be returned, so under add/remove
a release is not a Gaussian mechanism and top-K is not DP without padding (docs/dp.md,
"Neighbouring relations"; noisy top-K is in the same case). Under replace-one, the
relation in which the output is defined, Δ = 2c, and the paper's σ gives μ = 2c/σ, twice
the μ = c/σ it claims. So σ here is twice the paper's for the same (ε, δ). (Padding the
index to a public size with zero rows would turn add/remove into replacing a zero row,
Δ = c; that is not implemented.)

Calibration: ``calibration="paper"`` uses the formula of line 9 with Δ = 2c, the classic
Gaussian mechanism, a theorem only for ε < 1 (Dwork & Roth Thm A.1); the paper uses it for
ε ∈ {1, 5, 10, 20} and so do we by default. ``calibration="analytic"`` uses the exact
Balle–Wang σ for Δ = 2c. In secure mode the rows are rounded to a 2^-b grid, which moves
a row by at most √dim/2 grid units, so the event's Δ is ⌈2c·2^b⌉ + ⌈√dim⌉ grid units and
σ is calibrated with that Δ, so that σ and the event agree. ``noise="once"`` releases one
noisy matrix for all queries (one event in total; later queries report ``NoOpEvent``)
instead of fresh noise per query (the pseudocode). ``clip_only=True`` is the
clipping-only ablation (RP Tables 16–17): no noise, no guarantee.

Sanity checks (RP App. B, C): :func:`projection_sanity` (L2 distance ratio and cosine
error vs k, with the JL band 1 ± √(log d / k)), :func:`expected_projected_cosine` (E[ρ'],
RP eq. 1) and :func:`top1_flip_bound` (RP eq. 18) with :func:`simulate_top1_flip`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray
from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.dp import (
    GaussianEvent,
    Grid,
    NonPrivateEvent,
    NoOpEvent,
    PrivacyEvent,
    discrete_gaussian,
    gaussian_noise_float,
    gaussian_sigma_analytic,
    gaussian_sigma_classic,
    top_k_indices,
)
from ragprivacy.errors import ConfigError
from ragprivacy.retrieval.base import Retriever, register_retriever
from ragprivacy.retrieval.knowledge_base import KnowledgeBase
from ragprivacy.types import Retrieval

__all__ = [
    "DPProjectionRetriever",
    "ProjectionRetriever",
    "SanityRow",
    "dp_rp_sigma",
    "expected_projected_cosine",
    "projection_matrix",
    "projection_sanity",
    "simulate_top1_flip",
    "top1_flip_bound",
]

KINDS = ("gaussian", "rademacher")


def projection_matrix(
    dim: int,
    k: int,
    *,
    kind: str = "gaussian",
    variance: float | None = None,
    rng: RngLike = None,
) -> FloatArray:
    """R ∈ ℝ^{k×dim}: i.i.d. N(0, v) or ±√v entries, v = ``variance`` (default 1/k).

    >>> projection_matrix(384, 100, rng=0).shape
    (100, 384)
    """
    dim = check_positive_int("dim", dim)
    k = check_positive_int("k", k)
    check_choice("kind", kind, KINDS)
    v = 1.0 / k if variance is None else check_positive("variance", variance)
    gen = make_rng(rng)
    r: Any
    if kind == "gaussian":
        r = gen.standard_normal((k, dim)) * math.sqrt(v)
    else:
        r = (gen.integers(0, 2, (k, dim)) * 2 - 1) * math.sqrt(v)
    return np.asarray(r.astype(np.float32))


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.asarray(x / np.maximum(norms, 1e-12))


def _retrieval(kb: KnowledgeBase, scores: np.ndarray, k: int, event: PrivacyEvent) -> Retrieval:
    idx = top_k_indices(scores, k)
    return Retrieval(
        ids=tuple(kb.index.id_at(int(p)) for p in idx),
        indices=tuple(int(p) for p in idx),
        scores=tuple(float(scores[p]) for p in idx),
        event=event,
    )


def _index_vectors(kb: KnowledgeBase) -> np.ndarray:
    return np.asarray(kb.index.vectors(), dtype=np.float32)


class ProjectionRetriever(Retriever):
    """Random-projection retrieval (RP paper Alg. 1): the index is projected once.

    Args:
        kb: the knowledge base.
        k: documents per query.
        dim: the projection dimension (the paper's k; 100 by default, §4.1).
        kind: ``"gaussian"`` or ``"rademacher"``.
        variance: entry variance (default 1/dim; RP §4.3 ablates others).
        rng: the seed of R (R is public; the defense relies on it not being chosen after
            seeing the queries).
    """

    name = "projection"

    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        k: int = 5,
        dim: int = 100,
        kind: str = "gaussian",
        variance: float | None = None,
        rng: RngLike = None,
    ) -> None:
        super().__init__(kb, k=k)
        self.dim = check_positive_int("dim", dim)
        self.kind = check_choice("kind", kind, KINDS)
        self.variance = variance
        self.matrix = projection_matrix(
            kb.embedder.dim, self.dim, kind=kind, variance=variance, rng=rng
        )
        self.projected = _index_vectors(kb) @ self.matrix.T  # offline, once (Alg. 1 l. 4)
        self._unit = _unit_rows(self.projected)

    def _event(self) -> PrivacyEvent:
        return NonPrivateEvent()  # an empirical defense: no DP guarantee

    def _rows(self) -> np.ndarray:
        return self._unit

    def retrieve(self, query: str, *, account: str | None = None) -> Retrieval:
        return self.retrieve_batch([query], account=account)[0]

    def retrieve_batch(
        self, queries: Sequence[str], *, account: str | None = None
    ) -> list[Retrieval]:
        if not queries:
            return []
        q = _unit_rows(self.kb.embedder.encode(list(queries)) @ self.matrix.T)
        out = []
        for row in q:
            event = self._event()
            scores = self._rows() @ row
            out.append(_retrieval(self.kb, scores, self.k, event))
        return out

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "k": self.k,
            "dim": self.dim,
            "kind": self.kind,
            "variance": self.variance if self.variance is not None else 1.0 / self.dim,
        }


CALIBRATIONS = ("paper", "analytic")


def _replace_one_sensitivity(clip: float) -> float:
    """Δ = 2c: the largest L2 distance between two rows of norm ≤ c (r' = −r)."""
    return 2.0 * clip


def _calibrate(epsilon: float, delta: float, sensitivity: float, calibration: str) -> float:
    check_choice("calibration", calibration, CALIBRATIONS)
    if calibration == "analytic":
        return gaussian_sigma_analytic(epsilon, delta, sensitivity)
    return gaussian_sigma_classic(epsilon, delta, sensitivity, allow_large_epsilon=True)


def dp_rp_sigma(epsilon: float, delta: float, clip: float, *, calibration: str = "paper") -> float:
    """σ of DP-RP-G for one (ε, δ) release under replace-one neighbours, Δ = 2c.

    ``calibration="paper"``: the formula of RP Alg. 2 line 9 with Δ = 2c,
    σ = 2c√(2 ln(1.25/δ))/ε (the classic Gaussian calibration, which the paper applies for
    ε ≥ 1 too, ε ∈ {1, 5, 10, 20}, beyond the theorem's ε < 1; it is returned for every ε).
    ``calibration="analytic"``: the exact Balle–Wang σ for Δ = 2c.

    The paper prints σ = c√(2 ln(1.25/δ))/ε (sensitivity c, add/remove one row); this σ is
    twice that, because the retriever is DP only under replace-one neighbours, where two
    rows of norm ≤ c differ by up to 2c (see the module docstring).

    >>> round(dp_rp_sigma(1.0, 1e-5, 1.0), 4)
    9.6896
    >>> round(dp_rp_sigma(10.0, 1e-4, 1.0), 4)  # the retriever's defaults
    0.8687
    """
    epsilon = check_positive("epsilon", epsilon)
    clip = check_positive("clip", clip)
    return _calibrate(epsilon, delta, _replace_one_sensitivity(clip), calibration)


class DPProjectionRetriever(ProjectionRetriever):
    """DP-RP-G (RP paper App. D, Alg. 2): projection, clipping to ``clip``, Gaussian noise.

    Neighbouring relation: replace the document held by one slot (one row of norm ≤ c
    replaced by another; positions fixed). Sensitivity: Δ = 2c (:attr:`sensitivity`; in
    secure mode plus the grid rounding of a row). Guarantee: each release of the noisy
    matrix is μ-GDP with μ = Δ/σ, σ calibrated so that it is (ε, δ)-DP
    (:func:`dp_rp_sigma`); it is charged ``GaussianEvent(σ, Δ)``. Under add/remove the
    retriever is not DP without padding (positions shift and candidates disappear), so,
    unlike the paper, which charges sensitivity c for add/remove, σ is calibrated for 2c:
    twice the paper's σ for the same (ε, δ). Source: RP paper App. D, Alg. 2 (with
    Δ = 2c instead of line 9's c); module docstring.

    Args:
        kb, k, dim, kind, variance: as :class:`ProjectionRetriever`.
        epsilon, delta: the per-release privacy target.
        clip: c, the clipping bound of projected rows (line 6).
        noise: ``"per_query"`` (fresh Z per query, the pseudocode) or ``"once"``.
        calibration: ``"paper"`` (line 9's formula with Δ = 2c) or ``"analytic"`` (see
            :func:`dp_rp_sigma`).
        clip_only: clip without noise (ablation; no guarantee: ``NonPrivateEvent``).
        simulation: float noise from ``rng``; otherwise the exact discrete Gaussian on a
            fixed-point grid (slow for large indices: n·dim draws per release).
        rng: seeds R and, in simulation, the noise.
    """

    name = "dp_projection"

    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        k: int = 5,
        dim: int = 100,
        kind: str = "gaussian",
        variance: float | None = None,
        epsilon: float = 10.0,
        delta: float = 1e-4,
        clip: float = 1.0,
        noise: str = "per_query",
        calibration: str = "paper",
        clip_only: bool = False,
        simulation: bool = False,
        rng: RngLike = None,
    ) -> None:
        gen = make_rng(rng)
        super().__init__(kb, k=k, dim=dim, kind=kind, variance=variance, rng=gen)
        self.epsilon = check_positive("epsilon", epsilon)
        self.delta = float(delta)
        self.clip = check_positive("clip", clip)
        self.noise = check_choice("noise", noise, ("per_query", "once"))
        self.clip_only = bool(clip_only)
        self.simulation = bool(simulation)
        self._grid = Grid()
        #: Δ of one release under replace-one neighbours: 2c, plus the grid rounding of a
        #: row in secure mode. σ is calibrated with it, so σ and the event agree.
        self.sensitivity = self._release_sensitivity()
        self.sigma = _calibrate(self.epsilon, self.delta, self.sensitivity, calibration)
        self.calibration = calibration
        # Clipped in float64 so that no row exceeds c by more than a float64 rounding.
        projected = self.projected.astype(np.float64)
        norms = np.linalg.norm(projected, axis=1, keepdims=True)
        self.clipped = projected * np.minimum(1.0, self.clip / np.maximum(norms, 1e-12))
        self._gen = gen
        self._released: np.ndarray | None = None
        self._current: np.ndarray = _unit_rows(self.clipped)

    def _noisy(self) -> np.ndarray:
        shape = self.clipped.shape
        z: Any
        if self.simulation:
            z = gaussian_noise_float(self.sigma, shape, rng=self._gen)
            return np.asarray(self.clipped + z)
        units: Any = self._grid.to_units(self.clipped)
        z = discrete_gaussian(self._grid.scale_units(self.sigma), shape)
        return self._grid.from_units(units + z)

    def _release_sensitivity(self) -> float:
        base = _replace_one_sensitivity(self.clip)
        if self.simulation:
            return base
        # Rounding each of the dim coordinates moves a row by ≤ √dim/2 grid units (L2),
        # so two rounded rows differ by ≤ 2c + √dim units: ⌈2c·2^b⌉ + ⌈√dim⌉ units.
        # (sensitivity_units gives ⌈2c·2^b⌉ + 1; isqrt(dim − 1) + 1 = ⌈√dim⌉.)
        units = self._grid.sensitivity_units(base) + math.isqrt(self.dim - 1)
        return units * self._grid.resolution

    @property
    def event(self) -> PrivacyEvent:
        """One release's event, ``GaussianEvent(σ, Δ)`` with Δ = :attr:`sensitivity`
        (2c) under replace-one neighbours (``NonPrivateEvent`` for clipping only)."""
        if self.clip_only:
            return NonPrivateEvent()
        return GaussianEvent(sigma=self.sigma, sensitivity=self.sensitivity)

    def _event(self) -> PrivacyEvent:
        if self.clip_only:
            self._current = _unit_rows(self.clipped)
            return NonPrivateEvent()
        if self.noise == "once":
            if self._released is None:
                self._released = _unit_rows(self._noisy())
                self._current = self._released
                return self.event  # the single release pays once
            self._current = self._released
            return NoOpEvent()  # post-processing of the release already paid for
        self._current = _unit_rows(self._noisy())
        return self.event

    def _rows(self) -> np.ndarray:
        return self._current

    def config(self) -> dict[str, Any]:
        out = super().config()
        out.update(
            name=self.name,
            epsilon=self.epsilon,
            delta=self.delta,
            clip=self.clip,
            sigma=self.sigma,
            sensitivity=self.sensitivity,
            neighbouring="replace_one",
            noise=self.noise,
            clip_only=self.clip_only,
            calibration=self.calibration,
            simulation=self.simulation,
        )
        return out


# --------------------------------------------------------------------------- sanity checks


@dataclass(frozen=True, slots=True)
class SanityRow:
    """RP App. B.2 at one projection dimension k: mean and s.d. of ‖Rx − Re‖/‖x − e‖, mean
    |ρ − ρ'|, and the JL band 1 ± √(log d / k)."""

    k: int
    l2_ratio_mean: float
    l2_ratio_std: float
    cosine_error: float
    jl_low: float
    jl_high: float


def projection_sanity(
    queries: FloatArray,
    data: FloatArray,
    ks: Sequence[int],
    *,
    kind: str = "gaussian",
    trials: int = 20,
    rng: RngLike = None,
) -> list[SanityRow]:
    """RP App. B.2: for each k, average over ``trials`` random R of the L2 distance ratio
    and the cosine error between every query and every data vector."""
    x = np.asarray(queries, dtype=np.float64)
    e = np.asarray(data, dtype=np.float64)
    if x.ndim != 2 or e.ndim != 2 or x.shape[1] != e.shape[1]:
        raise ConfigError("queries and data must be 2-D arrays with the same width.")
    gen = make_rng(rng)
    d = x.shape[1]
    diff = np.linalg.norm(x[:, None, :] - e[None, :, :], axis=-1)
    rho = _unit_rows(x) @ _unit_rows(e).T
    rows = []
    for k in ks:
        ratios, errs = [], []
        for _ in range(check_positive_int("trials", trials)):
            r = projection_matrix(d, k, kind=kind, rng=gen).astype(np.float64)
            px, pe = x @ r.T, e @ r.T
            pdiff = np.linalg.norm(px[:, None, :] - pe[None, :, :], axis=-1)
            ok = diff > 0
            ratios.append(float(np.mean(pdiff[ok] / diff[ok])))
            errs.append(float(np.mean(np.abs(_unit_rows(px) @ _unit_rows(pe).T - rho))))
        band = math.sqrt(math.log(d) / k)
        row = SanityRow(
            k=k,
            l2_ratio_mean=float(np.mean(ratios)),
            l2_ratio_std=float(np.std(ratios)),
            cosine_error=float(np.mean(errs)),
            jl_low=1 - band,
            jl_high=1 + band,
        )
        rows.append(row)
    return rows


def expected_projected_cosine(rho: float, k: int, *, form: str = "paper") -> float:
    """E[ρ'] after a Gaussian projection to k dimensions.

    ``form="paper"``: RP eq. (1)/(8), ρ(1 − (1 − ρ)/(2k)). ``form="classical"``: the
    sample correlation of k bivariate normals without centring, ρ(1 − (1 − ρ²)/(2k))
    (Hotelling 1953, to O(1/k²)); the paper's own Isserlis terms (eq. 13–16) give the
    classical form, and the simulation test shows which one the projection follows.
    """
    k = check_positive_int("k", k)
    check_choice("form", form, ("paper", "classical"))
    if not -1 <= rho <= 1:
        raise ConfigError(f"The 'rho' parameter must be in [-1, 1]; got {rho!r}.")
    if form == "paper":
        return rho * (1 - (1 - rho) / (2 * k))
    return rho * (1 - (1 - rho**2) / (2 * k))


def top1_flip_bound(delta: float, rho1: float, k: int, eta_max: float = 0.0) -> float:
    """RP eq. (18): P(ρ'_j > ρ'_1) ≳ 1 − Φ(Δ / ((1 − ρ₁²)√(2(1 − η_max)/(k − 3)))).

    Args:
        delta: Δ ≥ ‖v₁ − v_j‖ (unit vectors).
        rho1: ρ₁, the top document's cosine with the query.
        k: projection dimension (> 3).
        eta_max: bound on the correlation of the Fisher-transformed similarities.
    """
    from scipy.special import ndtr  # on first use: it costs every process

    if k <= 3:
        raise ConfigError(f"The flip bound needs k > 3; got {k!r}.")
    if not -1 < rho1 < 1:
        raise ConfigError(f"The 'rho1' parameter must be in (-1, 1); got {rho1!r}.")
    if not 0 <= eta_max < 1:
        raise ConfigError(f"The 'eta_max' parameter must be in [0, 1); got {eta_max!r}.")
    scale = (1 - rho1**2) * math.sqrt(2 * (1 - eta_max) / (k - 3))
    return float(1 - ndtr(check_positive("delta", delta, allow_zero=True) / scale))


def simulate_top1_flip(
    u: FloatArray,
    v1: FloatArray,
    vj: FloatArray,
    k: int,
    *,
    trials: int = 2000,
    kind: str = "gaussian",
    rng: RngLike = None,
) -> float:
    """Monte Carlo P(ρ'_j > ρ'_1) over random projections to k dimensions."""
    gen = make_rng(rng)
    uu, a, b = (np.asarray(x, dtype=np.float64) for x in (u, v1, vj))
    d = uu.size
    wins = 0
    for _ in range(check_positive_int("trials", trials)):
        r = projection_matrix(d, k, kind=kind, rng=gen).astype(np.float64)
        pu, pa, pb = _unit_rows(r @ uu), _unit_rows(r @ a), _unit_rows(r @ b)
        wins += int(pu @ pb > pu @ pa)
    return wins / trials


register_retriever("projection", ProjectionRetriever)
register_retriever("dp_projection", DPProjectionRetriever)
