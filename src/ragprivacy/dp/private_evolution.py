"""Private Evolution (PE): DP synthetic data from API access alone.

Lin et al. 2023, "Differentially Private Synthetic Data via Foundation Model APIs",
Alg. 1 (PE) and Alg. 2 (DP nearest-neighbour histogram); its text variant is Xie et al.
2024, "Aug-PE". The Private-RAG paper (§4, App. E) runs RAG over a PE synthetic datastore
as a baseline. PE never shows the private data to the model: the private set enters only
through a noisy histogram of votes, one per iteration.

Algorithm (Lin et al. Alg. 1)::

    S_0 ← RANDOM_API(N_syn)
    for t = 1..T:
        h_t ← DP_NN_HISTOGRAM(S_priv, S_{t−1}, σ, H)      # Alg. 2
        P_t ← h_t / Σ h_t
        S'_t ← N_syn draws with replacement from P_t
        S_t ← VARIATION_API(S'_t)
    return S_T

DP_NN_HISTOGRAM (Alg. 2): every private sample votes for its nearest synthetic sample
(L2 distance between unit-normalised embeddings, ties to the lower index); N(0, σ²) is
added to every bin; then ``h ← max(h − H, 0)``: counts below the threshold H become 0
and the rest are shifted down by H, as in Alg. 2 and the Aug-PE/DPSDA code
(``clip(count, H) − H``).

**Neighbouring relation and sensitivity.** Add or remove one private document: its one
vote moves one bin by 1, so the vote vector has ℓ2 (and ℓ1) sensitivity 1 whatever the
synthetic set. Each iteration is a Gaussian mechanism with noise multiplier σ; the
resampling and the variation are post-processing (they read only the released histogram
and public APIs). PE is the adaptive composition of T Gaussian mechanisms, which is
μ-GDP with μ = √T/σ (Dong, Roth & Su 2022, Cor. 3.3; Lin et al. §4 account it the same
way, as one Gaussian mechanism of noise multiplier σ/√T). The event is
``SelfComposedEvent(GaussianEvent(σ), T)``, which maps onto ``dp_accounting``'s
``SelfComposedDpEvent(GaussianDpEvent(σ), T)``; :func:`pe_sigma` calibrates σ for a
target (ε, δ) and T.

**Secure and simulated noise** (as every mechanism of :mod:`ragprivacy.dp`). The default
secure path adds exact discrete Gaussian integers (Canonne, Kamath & Steinke 2020) to the
integer votes, from ChaCha20 bits; its event is ``ZCdpEvent(T/(2σ²))`` (CKS Thm 4: each
release is 1/(2σ²)-zCDP), a sound bound that the accountants convert by Rényi DP.
``simulation=True`` adds numpy float noise from ``rng`` (reproducible, not secure) and
reports the continuous Gaussian event.

**Defaults** (where the papers state them). T = 10 iterations, N_syn = 2,000 synthetic
samples, nearest-neighbour count 1, L2 distance, threshold H = 0: Aug-PE's PubMed
unconditional setting (its Table 14 and released script), which Private-RAG App. E adopts
("we adopt the same hyperparameter configuration used for unconditional generation on
the PubMed dataset ... and generate 2000 synthetic samples"). Lin et al. recommend H > 0
to suppress bins that noise alone fills; pass ``threshold`` to use one.

**Deviations.** Aug-PE additionally generates L − 1 variations of every sample and keeps
the best-ranked ones (``select_syn_mode: rank``); here each drawn sample gets one
variation, as in Lin et al. Alg. 1. When the thresholded histogram is all zero (every
bin below H), the next population is drawn uniformly from the current one (a
post-processing choice the papers leave open).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.dp.calibration import check_delta
from ragprivacy.dp.events import GaussianEvent, PrivacyEvent, SelfComposedEvent, ZCdpEvent
from ragprivacy.dp.gaussian_dp import gaussian_mu
from ragprivacy.dp.randomness import ChaCha20Bits, simulation_rng
from ragprivacy.dp.samplers import discrete_gaussian
from ragprivacy.errors import ConfigError

__all__ = [
    "PE_DEFAULT_ITERATIONS",
    "PE_DEFAULT_SAMPLES",
    "NNHistogram",
    "PrivateEvolutionResult",
    "dp_nn_histogram",
    "nearest_neighbor_votes",
    "pe_epsilon",
    "pe_event",
    "pe_sigma",
    "private_evolution",
]

PE_DEFAULT_ITERATIONS = 10
"""T of Aug-PE's PubMed setting (Xie et al. 2024, Table 14), used by Private-RAG App. E."""
PE_DEFAULT_SAMPLES = 2000
"""N_syn of Private-RAG App. E ("generate 2000 synthetic samples")."""

S = TypeVar("S")

_CHUNK = 4096  # private rows per distance block (bounds the [chunk, N_syn] matrix)


def _unit_rows(name: str, x: FloatArray) -> FloatArray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ConfigError(
            f"The '{name}' embeddings must be a non-empty 2-D array [n, dim]; got shape "
            f"{arr.shape}."
        )
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"The '{name}' embeddings hold NaN or infinite values.")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return arr / np.where(norms > 0, norms, 1.0)


def nearest_neighbor_votes(private: FloatArray, synthetic: FloatArray) -> IntArray:
    """How many private samples have each synthetic sample as their nearest neighbour.

    Distances are L2 between unit-normalised rows (so the nearest is the one of largest
    cosine); ties go to the lower synthetic index. The result sums to ``len(private)``
    and is the *clean* histogram of Lin et al. Alg. 2 (never released as such).

    >>> nearest_neighbor_votes(np.eye(2), np.array([[1.0, 0.1], [0.0, 1.0], [0.0, 2.0]]))
    array([1, 1, 0])
    """
    p = _unit_rows("private", private)
    s = _unit_rows("synthetic", synthetic)
    if p.shape[1] != s.shape[1]:
        raise ConfigError(
            f"Private and synthetic embeddings must have the same dimension; got "
            f"{p.shape[1]} and {s.shape[1]}. Embed both with the same embedder."
        )
    votes = np.zeros(s.shape[0], dtype=np.int64)
    for start in range(0, p.shape[0], _CHUNK):
        # ‖p − s‖² = 2 − 2⟨p, s⟩ for unit rows: the nearest is the largest inner product
        nearest = np.argmax(p[start : start + _CHUNK] @ s.T, axis=1)
        votes += np.bincount(nearest, minlength=s.shape[0])
    return votes


@dataclass(frozen=True, slots=True)
class NNHistogram:
    """One released DP nearest-neighbour histogram (Lin et al. Alg. 2).

    Attributes:
        counts: the released counts, ``max(votes + noise − H, 0)`` per synthetic sample.
        sigma: the noise standard deviation σ.
        threshold: H.
        event: what the release cost: ``GaussianEvent(σ)`` (simulation) or
            ``ZCdpEvent(1/(2σ²))`` (secure discrete Gaussian).
    """

    counts: FloatArray
    sigma: float
    threshold: float
    event: GaussianEvent | ZCdpEvent


def dp_nn_histogram(
    private: FloatArray,
    synthetic: FloatArray,
    *,
    sigma: float,
    threshold: float = 0.0,
    simulation: bool = False,
    rng: RngLike = None,
    bits: ChaCha20Bits | None = None,
) -> NNHistogram:
    """DP_NN_HISTOGRAM (Lin et al. 2023, Alg. 2): noisy nearest-neighbour votes.

    Neighbouring relation: add/remove one private sample; the vote vector's ℓ2
    sensitivity is 1. Guarantee: a Gaussian mechanism with noise multiplier σ (μ = 1/σ
    GDP); the threshold is post-processing.

    Args:
        private: private embeddings [n, dim] (normalised here).
        synthetic: synthetic embeddings [N_syn, dim] (normalised here).
        sigma: noise standard deviation (the noise multiplier, sensitivity being 1).
        threshold: H ≥ 0; ``max(h − H, 0)`` is released.
        simulation: float noise from ``rng`` (not secure) instead of discrete Gaussian
            integers from ChaCha20 bits.
        rng: simulation mode only.
        bits: secure mode only: a ChaCha20 source (``None``: fresh OS entropy).
    """
    sigma = check_positive("sigma", sigma)
    threshold = check_positive("threshold", threshold, allow_zero=True)
    stream = simulation_rng(rng, simulation=simulation, bits=bits)
    votes = nearest_neighbor_votes(private, synthetic)
    event: GaussianEvent | ZCdpEvent
    if stream is not None:
        noisy = votes + stream.normal(0.0, sigma, votes.shape)
        event = GaussianEvent(sigma=sigma)
    else:
        noisy = (votes + discrete_gaussian(sigma, votes.shape, bits=bits)).astype(np.float64)
        event = ZCdpEvent(rho=1.0 / (2.0 * sigma * sigma))
    counts = np.maximum(noisy - threshold, 0.0)
    return NNHistogram(counts=counts, sigma=sigma, threshold=threshold, event=event)


def pe_event(sigma: float, iterations: int, *, simulation: bool = False) -> PrivacyEvent:
    """The privacy event of a whole PE run: T releases of a Gaussian mechanism at σ.

    By default (``simulation=False``) the event of the secure path, which adds discrete
    Gaussian integers: ``SelfComposedEvent(ZCdpEvent(1/(2σ²)), T)`` (CKS Thm 4).
    ``simulation=True`` gives the event of the float path, the continuous Gaussian:
    ``SelfComposedEvent(GaussianEvent(σ), T)``. Pass the ``simulation`` the run used
    (:func:`private_evolution` records the matching event in its result).

    >>> pe_event(4.0, 10)
    SelfComposedEvent(event=ZCdpEvent(rho=0.03125), count=10)
    >>> pe_event(4.0, 10, simulation=True)
    SelfComposedEvent(event=GaussianEvent(sigma=4.0, sensitivity=1.0), count=10)
    """
    sigma = check_positive("sigma", sigma)
    iterations = check_positive_int("iterations", iterations)
    one: PrivacyEvent = GaussianEvent(sigma=sigma) if simulation else ZCdpEvent(1 / (2 * sigma**2))
    return SelfComposedEvent(one, iterations)


def pe_epsilon(
    sigma: float,
    iterations: int,
    delta: float,
    *,
    simulation: bool = False,
    method: str | None = None,
) -> float:
    """ε at ``delta`` of a PE run with noise σ and T iterations (the event of
    :func:`pe_event` with the same ``simulation``).

    By default (``simulation=False``) the secure path's zCDP event, accounted by Rényi DP:
    sound, and somewhat above the continuous Gaussian's ε at the same σ. With
    ``simulation=True`` the continuous Gaussian's event, by ``method``, an accountant
    route of :func:`ragprivacy.dp.epsilon_for`: ``exact`` (Gaussian DP, tight), ``pld`` or
    ``rdp`` (``dp_accounting``).

    Args:
        sigma: the noise σ of every histogram.
        iterations: T.
        delta: the δ at which ε is reported.
        simulation: account the float path's continuous Gaussian instead of the secure
            discrete Gaussian.
        method: the accountant route; ``None`` (default): ``exact`` with
            ``simulation=True``, ``rdp`` otherwise. The secure event has only the ``rdp``
            route.

    Raises:
        ConfigError: a ``method`` other than ``rdp`` for the secure event.

    >>> sigma = pe_sigma(10.0, 1e-5, 10)
    >>> round(pe_epsilon(sigma, 10, 1e-5, simulation=True), 6)
    10.0
    >>> 10.0 < pe_epsilon(sigma, 10, 1e-5) < 16.0
    True
    """
    from ragprivacy.dp.accounting import epsilon_for

    if method is None:
        method = "exact" if simulation else "rdp"
    elif not simulation and method != "rdp":
        raise ConfigError(
            f"The secure path's zCDP event is accounted by Rényi DP only: the 'method' "
            f"parameter must be 'rdp' or None; got {method!r}. The 'exact' and 'pld' routes "
            f"describe the continuous Gaussian of simulation=True."
        )
    event = pe_event(sigma, iterations, simulation=simulation)
    return epsilon_for(event, delta, method)


def pe_sigma(epsilon: float, delta: float, iterations: int) -> float:
    """The noise σ at which T PE iterations are exactly (ε, δ)-DP (continuous Gaussian).

    T Gaussian mechanisms of noise multiplier σ compose to μ = √T/σ GDP (Dong, Roth & Su
    2022), which is (ε, δ)-DP iff μ ≤ μ*(ε, δ) (Balle & Wang 2018, Thm 8); so
    σ = √T / μ*(ε, δ). This is Lin et al.'s calibration (one Gaussian mechanism of noise
    multiplier σ/√T). ``dp_accounting``'s PLD accountant agrees (tested).

    >>> round(pe_sigma(1.0, 1e-5, 1), 4)  # one analytic Gaussian mechanism
    3.7306
    """
    epsilon = check_positive("epsilon", epsilon)
    delta = check_delta("delta", delta)
    iterations = check_positive_int("iterations", iterations)
    return math.sqrt(iterations) / gaussian_mu(epsilon, delta)


@dataclass(frozen=True, slots=True)
class PrivateEvolutionResult(Generic[S]):
    """What a PE run releases, and what it cost.

    Attributes:
        samples: the final synthetic population S_T (N_syn samples).
        histograms: the T released histograms, in order (each computed on the
            population before it).
        event: the run's privacy event (:func:`pe_event`).
        sigma: σ.
        threshold: H.
        iterations: T.
    """

    samples: tuple[S, ...]
    histograms: tuple[FloatArray, ...]
    event: PrivacyEvent
    sigma: float
    threshold: float
    iterations: int


def private_evolution(
    private_embeddings: FloatArray,
    *,
    random_api: Callable[[int, np.random.Generator], Sequence[S]],
    variation_api: Callable[[Sequence[S], np.random.Generator], Sequence[S]],
    embed: Callable[[Sequence[S]], FloatArray],
    sigma: float,
    iterations: int = PE_DEFAULT_ITERATIONS,
    n_synthetic: int = PE_DEFAULT_SAMPLES,
    threshold: float = 0.0,
    simulation: bool = False,
    rng: RngLike = None,
    api_rng: RngLike = None,
    bits: ChaCha20Bits | None = None,
    on_iteration: Callable[[int, FloatArray], None] | None = None,
) -> PrivateEvolutionResult[S]:
    """Run PE (Lin et al. 2023, Alg. 1; see the module docstring).

    The private data enter only through :func:`dp_nn_histogram`; the APIs and ``embed``
    see only synthetic samples. They must be public (a model and data that hold no
    private document): PE's guarantee covers the histograms, and so everything computed
    from them and public inputs.

    Args:
        private_embeddings: the private documents' embeddings [n, dim], one row per
            document (the unit of privacy).
        random_api: ``random_api(n, rng)`` returns n initial samples (RANDOM_API).
        variation_api: ``variation_api(samples, rng)`` returns one variation of each
            (VARIATION_API), in order.
        embed: embeds samples with the embedder of ``private_embeddings``.
        sigma: noise of every histogram (:func:`pe_sigma` for a target ε).
        iterations: T (default 10, Aug-PE's PubMed setting).
        n_synthetic: N_syn (default 2,000, Private-RAG App. E).
        threshold: H (default 0, Aug-PE's setting).
        simulation: float noise from ``rng`` instead of secure discrete Gaussian noise.
        rng: simulation mode only: the noise stream (and the APIs' when ``api_rng`` is
            not given).
        api_rng: the stream of the resampling and the APIs (post-processing; need not be
            secret). Default: ``rng``'s stream in simulation, fresh OS entropy otherwise.
        bits: secure mode only: a ChaCha20 source for the noise (``None``: OS entropy).
        on_iteration: called as ``on_iteration(t, released_histogram)`` after each
            iteration (progress, logging).

    >>> import numpy as np
    >>> priv = np.repeat(np.eye(3)[:1], 50, axis=0)   # every private point at e_0
    >>> out = private_evolution(
    ...     priv,
    ...     random_api=lambda n, g: [int(i) for i in g.integers(0, 3, n)],
    ...     variation_api=lambda xs, g: list(xs),
    ...     embed=lambda xs: np.eye(3)[list(xs)],
    ...     sigma=1.0, iterations=3, n_synthetic=20, simulation=True, rng=0)
    >>> set(out.samples)
    {0}
    """
    sigma = check_positive("sigma", sigma)
    iterations = check_positive_int("iterations", iterations)
    n_synthetic = check_positive_int("n_synthetic", n_synthetic)
    threshold = check_positive("threshold", threshold, allow_zero=True)
    noise = simulation_rng(rng, simulation=simulation, bits=bits)
    # secure mode: one ChaCha20 source for all T histograms (fresh OS entropy by default)
    source = None if simulation or bits is not None else ChaCha20Bits.from_entropy()
    bits_or_none = bits if source is None else source
    post = noise if api_rng is None and noise is not None else make_rng(api_rng)
    private = _unit_rows("private_embeddings", private_embeddings)

    population = list(random_api(n_synthetic, post))
    _check_population("random_api", population, n_synthetic)
    released: list[FloatArray] = []
    for t in range(iterations):
        synthetic = np.asarray(embed(population), dtype=np.float64)
        if synthetic.shape[0] != len(population):
            raise ConfigError(
                f"'embed' returned {synthetic.shape[0]} rows for {len(population)} samples."
            )
        hist = dp_nn_histogram(
            private,
            synthetic,
            sigma=sigma,
            threshold=threshold,
            simulation=simulation,
            rng=noise,
            bits=bits_or_none,
        )
        released.append(hist.counts)
        if on_iteration is not None:
            on_iteration(t, hist.counts)
        total = float(hist.counts.sum())
        probs = hist.counts / total if total > 0 else None  # all below H: uniform
        drawn = post.choice(len(population), size=n_synthetic, replace=True, p=probs)
        population = list(variation_api([population[i] for i in drawn], post))
        _check_population("variation_api", population, n_synthetic)
    return PrivateEvolutionResult(
        samples=tuple(population),
        histograms=tuple(released),
        event=pe_event(sigma, iterations, simulation=simulation),
        sigma=sigma,
        threshold=threshold,
        iterations=iterations,
    )


def _check_population(api: str, population: Sequence[object], n: int) -> None:
    if len(population) != n:
        raise ConfigError(f"The '{api}' returned {len(population)} samples; {n} were asked for.")
