"""``projection`` and ``dp_projection``: retrieval in a randomly projected space.

Random projection (RP paper §3.1, Alg. 1): draw R ∈ ℝ^{k×d} once, with i.i.d. entries
N(0, 1/k) (Gaussian) or ±1/√k (Rademacher, RP paper App. H, scaled to the same variance;
the paper's unscaled ±1 gives the same cosine ranking), project the index once offline
(e'_i = R e_i), project each query (x' = R x) and rank by the cosine of x' with the e'_i.
An empirical defense: it carries no DP guarantee (``Retrieval.event`` is ``None``).

DP-RP-G (RP paper App. D, Alg. 2; Blocki et al. 2012): project, clip every projected row
to L2 norm ≤ c (line 6), then per query add Z with i.i.d. N(0, σ²) entries to the projected
index, σ = c√(2 ln(1.25/δ))/ε (lines 9–11), and rank by cosine against the noisy rows.
Neighbouring relation: add/remove one document (one row), so the released matrix has L2
sensitivity c; each query is a Gaussian mechanism, ``GaussianEvent(σ, c)``. Note: the
formula is the classic Gaussian mechanism, a theorem only for ε < 1 (Dwork & Roth
Thm A.1); the paper uses it for ε ∈ {1, 5, 10, 20} and so do we by default
(``calibration="paper"``); ``calibration="analytic"`` uses the exact Balle–Wang σ.
``noise="once"`` releases one noisy matrix for all queries (one event in total) instead of
fresh noise per query (the pseudocode). ``clip_only=True`` is the clipping-only ablation
(RP Tables 16–17): no noise, no guarantee.

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
from scipy.special import ndtr

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray
from ragprivacy._validation import check_choice, check_positive, check_positive_int
from ragprivacy.dp import (
    GaussianEvent,
    Grid,
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
    return r.astype(np.float32)


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def _retrieval(kb: KnowledgeBase, scores: np.ndarray, k: int, event: Any) -> Retrieval:
    idx = top_k_indices(scores, k)
    return Retrieval(
        ids=tuple(kb.index.id_at(int(p)) for p in idx),
        indices=tuple(int(p) for p in idx),
        scores=tuple(float(scores[p]) for p in idx),
        event=event,
    )


def _index_vectors(kb: KnowledgeBase) -> np.ndarray:
    vectors = getattr(kb.index, "vectors", None)
    if not callable(vectors):
        raise ConfigError(
            f"The index {kb.index.name!r} does not expose its vectors; projection needs "
            "them to project the index once offline (use 'exact' or a FAISS index)."
        )
    return np.asarray(vectors(), dtype=np.float32)


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

    def _event(self) -> Any:
        return None

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


def dp_rp_sigma(epsilon: float, delta: float, clip: float, *, calibration: str = "paper") -> float:
    """σ of DP-RP-G: c√(2 ln(1.25/δ))/ε (RP Alg. 2 line 9) or the exact analytic σ.

    The paper's σ is the classic Gaussian calibration, which it applies for ε ≥ 1 too
    (ε ∈ {1, 5, 10, 20}), beyond the theorem's ε < 1; it is returned for every ε.

    >>> round(dp_rp_sigma(1.0, 1e-5, 1.0), 4)
    4.8448
    """
    epsilon = check_positive("epsilon", epsilon)
    clip = check_positive("clip", clip)
    check_choice("calibration", calibration, ("paper", "analytic"))
    if calibration == "analytic":
        return gaussian_sigma_analytic(epsilon, delta, clip)
    return gaussian_sigma_classic(epsilon, delta, clip, allow_large_epsilon=True)


class DPProjectionRetriever(ProjectionRetriever):
    """DP-RP-G (RP paper Alg. 2): projection, clipping to ``clip``, Gaussian noise.

    Args:
        kb, k, dim, kind, variance: as :class:`ProjectionRetriever`.
        epsilon, delta: the per-release privacy target.
        clip: c, the clipping bound of projected rows (line 6).
        noise: ``"per_query"`` (fresh Z per query, the pseudocode) or ``"once"``.
        calibration: ``"paper"`` or ``"analytic"`` (see :func:`dp_rp_sigma`).
        clip_only: clip without noise (ablation; no guarantee, no event).
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
        self.sigma = dp_rp_sigma(self.epsilon, self.delta, self.clip, calibration=calibration)
        self.calibration = calibration
        norms = np.linalg.norm(self.projected, axis=1, keepdims=True)
        self.clipped = self.projected * np.minimum(1.0, self.clip / np.maximum(norms, 1e-12))
        self._gen = gen
        self._grid = Grid()
        self._released: np.ndarray | None = None
        self._current: np.ndarray = _unit_rows(self.clipped)

    def _noisy(self) -> np.ndarray:
        shape = self.clipped.shape
        z: Any
        if self.simulation:
            z = gaussian_noise_float(self.sigma, shape, rng=self._gen)
            return self.clipped + z
        units: Any = self._grid.to_units(self.clipped)
        z = discrete_gaussian(self._grid.scale_units(self.sigma), shape)
        return self._grid.from_units(units + z)

    @property
    def event(self) -> GaussianEvent | None:
        """One release's event (``None`` for clipping only)."""
        if self.clip_only:
            return None
        sens = self.clip
        if not self.simulation:
            sens = self._grid.sensitivity_units(self.clip) * self._grid.resolution
        return GaussianEvent(sigma=self.sigma, sensitivity=sens)

    def _event(self) -> Any:
        if self.clip_only:
            self._current = _unit_rows(self.clipped)
            return None
        if self.noise == "once":
            if self._released is None:
                self._released = _unit_rows(self._noisy())
                self._current = self._released
                return self.event  # the single release pays once
            self._current = self._released
            return None
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
            noise=self.noise,
            clip_only=self.clip_only,
            calibration=self.calibration,
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
