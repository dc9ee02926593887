"""AboveThreshold / the sparse vector technique with at most c discoveries.

Private-RAG Alg. 4 (lines 2 and 11) is an instance: a threshold noised once with
Lap(2Δ/ε), each query noised with Lap(4Δ/ε), a *discovery* when the noisy query crosses
the noisy threshold, and a halt after c discoveries (Dwork & Roth 2014, Alg. 1;
Private-RAG App. F.1, Lemma 1). Alg. 4 counts a discovery when the noisy count is *below*
the threshold (``below=True``).

Neighbouring relation: add/remove one document; every query has sensitivity Δ.
Guarantee: the whole transcript (which queries were discoveries) is (c·ε)-DP as
Private-RAG's Lemma 1 accounts it; the sharper analysis of Lyu, Su & Li 2017 (Alg. 1 with
ε₁ = ε/2, ε₂ = cε/2) gives ε(1 + c)/2, which :attr:`AboveThreshold.epsilon_tight` reports.
By default the threshold is *not* re-noised after a discovery (as in Alg. 4 line 2); both
analyses cover it, but neither makes the run a composition of c independent ε-DP steps.

``resample_threshold=True`` re-draws the noisy threshold after every discovery: the run is
then Dwork & Roth 2014 Alg. 2 ("Sparse"), c independent AboveThreshold instances with one
discovery each, each ε-DP (D&R Thm 3.23), adaptively composed. Its event is
``SelfComposedEvent(PureDpEvent(ε), c)``, which an (ε, δ) accountant may compose tightly
(:func:`~ragprivacy.dp.event_epsilon`, exact by Kairouz, Oh & Viswanath 2015); its pure
total is c·ε (the Lyu et al. bound does not apply to it). The noise of the queries is
unchanged; only one extra threshold draw is made per discovery, so runs without it draw
exactly the same noise as before.

Secure mode (default) needs integer queries and threshold (counts) and adds exact
discrete Laplace noise (the shifting argument of the proof holds on ℤ for integer Δ);
``simulation=True`` adds numpy float Laplace noise.
"""

from __future__ import annotations

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import IntArray
from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.dp.events import PrivacyEvent, PureDpEvent, SelfComposedEvent
from ragprivacy.dp.randomness import ChaCha20Bits, simulation_rng
from ragprivacy.dp.samplers import discrete_laplace
from ragprivacy.errors import BudgetExhaustedError, ConfigError

__all__ = ["AboveThreshold", "above_threshold"]


def _is_integral(x: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(x)) and np.all(np.floor(x) == x))


class _Noise:
    """Laplace noise of one mode: exact discrete (secure) or numpy floats (simulation)."""

    def __init__(self, simulation: bool, rng: RngLike, bits: ChaCha20Bits | None) -> None:
        simulation_rng(rng, simulation=simulation, bits=bits)
        if not simulation and bits is not None and not isinstance(bits, ChaCha20Bits):
            raise ConfigError(f"'bits' must be a ChaCha20Bits; got {type(bits).__name__}.")
        self.simulation = simulation
        self._rng = make_rng(rng) if simulation else None
        self._bits = None if simulation else (bits or ChaCha20Bits.from_entropy())

    def __call__(self, scale: float, shape: int | tuple[int, ...]) -> np.ndarray:
        if self._rng is not None:
            return self._rng.laplace(0.0, scale, shape)
        return discrete_laplace(scale, shape, bits=self._bits)


class AboveThreshold:
    """Streaming sparse vector: call :meth:`test` per query; halts after c discoveries.

    Args:
        threshold: the public threshold T (an integer in secure mode).
        epsilon: ε of one discovery: threshold noise Lap(2Δ/ε), query noise Lap(4Δ/ε).
        max_discoveries: c.
        sensitivity: Δ of every query.
        below: a discovery is a noisy value at or below the noisy threshold (Alg. 4).
        resample_threshold: re-draw the noisy threshold after each discovery (D&R Alg. 2:
            c independent ε-DP steps; see the module docstring).
        simulation, rng, bits: float noise from ``rng``, or exact noise from ``bits``.

    >>> sv = AboveThreshold(5, 1.0, max_discoveries=1, bits=ChaCha20Bits.derived(bytes(32), "d"))
    >>> sv.test(100), sv.halted
    (True, True)
    """

    def __init__(
        self,
        threshold: float,
        epsilon: float,
        *,
        max_discoveries: int = 1,
        sensitivity: float = 1.0,
        below: bool = False,
        resample_threshold: bool = False,
        simulation: bool = False,
        rng: RngLike = None,
        bits: ChaCha20Bits | None = None,
    ) -> None:
        self.epsilon = check_positive("epsilon", epsilon)
        self.max_discoveries = check_positive_int("max_discoveries", max_discoveries)
        self.sensitivity = check_positive("sensitivity", sensitivity)
        self.below = bool(below)
        self.resample_threshold = bool(resample_threshold)
        self._threshold = float(threshold)
        self._noise = _Noise(simulation, rng, bits)
        if not simulation and not _is_integral(np.array([threshold, sensitivity])):
            raise ConfigError(
                "Secure AboveThreshold works on integers: threshold and sensitivity must be "
                f"whole numbers; got {threshold!r}, {sensitivity!r}. Scale to counts or "
                f"use simulation=True."
            )
        self._noisy_threshold = self._draw_threshold()
        self.discoveries = 0
        self.queries = 0

    def _draw_threshold(self) -> float:
        """T + Lap(2Δ/ε) (Alg. 4 line 2; after each discovery too when resampling)."""
        return float(self._threshold + self._noise(2 * self.sensitivity / self.epsilon, 1)[0])

    @property
    def halted(self) -> bool:
        """True once c discoveries were made; further queries are refused."""
        return self.discoveries >= self.max_discoveries

    @property
    def event(self) -> PrivacyEvent:
        """The whole run's cost: c·ε as Private-RAG Lemma 1 accounts it
        (``PureDpEvent(c·ε)``); with ``resample_threshold`` the composition of the c
        independent ε-DP steps, ``SelfComposedEvent(PureDpEvent(ε), c)``."""
        if self.resample_threshold:
            return SelfComposedEvent(PureDpEvent(self.epsilon), self.max_discoveries)
        return PureDpEvent(self.max_discoveries * self.epsilon)

    @property
    def epsilon_tight(self) -> float:
        """The sharpest pure total: ε(1 + c)/2 with one threshold (Lyu, Su & Li 2017,
        Thm 2 with ε₁ = ε/2, ε₂ = cε/2); c·ε with ``resample_threshold`` (c steps of ε)."""
        if self.resample_threshold:
            return self.epsilon * self.max_discoveries
        return self.epsilon * (1 + self.max_discoveries) / 2

    def test(self, value: float) -> bool:
        """One query: True on a discovery. Raises BudgetExhaustedError once halted."""
        if self.halted:
            raise BudgetExhaustedError(
                f"AboveThreshold halted after {self.max_discoveries} discoveries; start a new "
                f"instance (and pay for it) to continue."
            )
        if not self._noise.simulation and not _is_integral(np.array([value])):
            raise ConfigError(f"Secure AboveThreshold needs integer queries; got {value!r}.")
        self.queries += 1
        noisy = value + float(self._noise(4 * self.sensitivity / self.epsilon, 1)[0])
        hit = noisy <= self._noisy_threshold if self.below else noisy >= self._noisy_threshold
        if hit:
            self.discoveries += 1
            if self.resample_threshold and not self.halted:  # the next step's threshold
                self._noisy_threshold = self._draw_threshold()
        return bool(hit)


def above_threshold(
    values: np.ndarray,
    threshold: float,
    epsilon: float,
    *,
    max_discoveries: int = 1,
    sensitivity: float = 1.0,
    below: bool = False,
    resample_threshold: bool = False,
    runs: int | None = None,
    simulation: bool = False,
    rng: RngLike = None,
    bits: ChaCha20Bits | None = None,
) -> IntArray:
    """Run AboveThreshold over a fixed sequence of query values, ``runs`` times independently.

    Same noise and decisions as :class:`AboveThreshold` (the queries are fixed in advance,
    so all noise can be drawn at once; with ``resample_threshold`` the c thresholds of a
    run are drawn first, as (runs, c), then the queries' noise). Returns the positions of
    the first c discoveries, padded with −1: shape (c,) or (runs, c).
    """
    vals = np.asarray(values, dtype=np.float64)
    if vals.ndim != 1 or vals.size == 0:
        raise ConfigError(f"values must be a non-empty 1-D array; got shape {vals.shape}.")
    epsilon = check_positive("epsilon", epsilon)
    c = check_positive_int("max_discoveries", max_discoveries)
    sensitivity = check_positive("sensitivity", sensitivity)
    r = 1 if runs is None else check_positive_int("runs", runs)
    noise = _Noise(simulation, rng, bits)
    if not simulation and not _is_integral(np.append(vals, [threshold, sensitivity])):
        raise ConfigError(
            "Secure AboveThreshold works on integers (counts); got non-integer values. "
            "Use simulation=True for real-valued queries."
        )
    if resample_threshold:
        return _above_resampled(vals, threshold, epsilon, c, sensitivity, below, runs, noise)
    rho = noise(2 * sensitivity / epsilon, r)
    nu = noise(4 * sensitivity / epsilon, (r, vals.size))
    noisy = vals[None, :] + nu
    limit = threshold + rho[:, None]
    hit = noisy <= limit if below else noisy >= limit
    keep = hit & (np.cumsum(hit, axis=1) <= c)
    q = vals.size
    pos = np.sort(np.where(keep, np.arange(q)[None, :], q), axis=1)
    if q < c:
        pos = np.concatenate([pos, np.full((r, c - q), q)], axis=1)
    pos = pos[:, :c]
    pos[pos == q] = -1
    return pos[0] if runs is None else pos


def _above_resampled(
    vals: np.ndarray,
    threshold: float,
    epsilon: float,
    c: int,
    sensitivity: float,
    below: bool,
    runs: int | None,
    noise: _Noise,
) -> IntArray:
    """:func:`above_threshold` with a fresh noisy threshold after each discovery."""
    r = 1 if runs is None else runs
    rho = noise(2 * sensitivity / epsilon, (r, c))
    noisy = vals[None, :] + noise(4 * sensitivity / epsilon, (r, vals.size))
    pos = np.full((r, c), -1, dtype=np.int64)
    for i in range(r):
        found = 0
        for j in range(vals.size):
            limit = threshold + rho[i, found]
            if noisy[i, j] <= limit if below else noisy[i, j] >= limit:
                pos[i, found] = j
                found += 1
                if found == c:
                    break
    return pos[0] if runs is None else pos
