"""Noise samplers: integer-exact secure samplers and a float fast path for simulation.

Secure path (protects real data): :func:`discrete_laplace` and :func:`discrete_gaussian`
draw integers whose distribution is *exactly*

    discrete Laplace  P(x) ∝ exp(−|x|/t),         x ∈ ℤ,
    discrete Gaussian P(x) ∝ exp(−x²/(2σ²)),       x ∈ ℤ,

for a rational t or σ (any float is an exact rational), following Canonne, Kamath &
Steinke 2020 (CKS, Alg. 2 and 3): a discrete Gaussian is a discrete Laplace proposal with
t = ⌊σ⌋ + 1 accepted with probability exp(−(|Y| − σ²/t)²/(2σ²)). Every random choice is a
comparison "W < e^{−x}" of a uniform W with an exact rational x; the bits of W come from
the ChaCha20 keystream (:class:`~ragprivacy.dp.randomness.ChaCha20Bits`), never from a
seeded PCG. Comparisons are decided in bulk in float64 where a certified error margin
makes the answer certain, and exactly with :mod:`decimal` and extra random bits otherwise
(about one draw in 10^8), so the output
distribution is exact and the same key always gives the same output. Working on integers
removes the floating-point attack on the Laplace mechanism (Mironov 2012). A fixed-point
:class:`Grid` maps scores to integers of a stated resolution 2^-b and back.

Fast path (simulation only, says so in its name): :func:`gaussian_noise_float` and
:func:`laplace_noise_float` use numpy's generator (keyword ``rng``).

Discrete Gaussian noise with integer sensitivity Δ is Δ²/(2σ²)-zCDP, the same Rényi
curve as the continuous Gaussian (CKS Thm 4); its (ε, δ) curve is at least as good up
to a negligible term (CKS Thm 7).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive
from ragprivacy.dp._exact import ABS_TOL, PREFIX_BITS, LazyUniform
from ragprivacy.dp.randomness import ChaCha20Bits
from ragprivacy.errors import ConfigError

__all__ = [
    "Grid",
    "discrete_gaussian",
    "discrete_laplace",
    "gaussian_noise_float",
    "laplace_noise_float",
    "standard_normal_float",
]

_MIN_PARAM = Fraction(1, 64)
_MAX_PARAM = Fraction(2**40)
_SHIFT = np.uint64(64 - PREFIX_BITS)


def _exact_param(name: str, value: float | int | Fraction) -> Fraction:
    if isinstance(value, bool):
        raise ConfigError(f"The '{name}' parameter must be a number; got {value!r}.")
    if isinstance(value, Fraction):
        frac = value
    else:
        v = check_positive(name, value)
        frac = Fraction(v)
    if not _MIN_PARAM <= frac <= _MAX_PARAM:
        raise ConfigError(
            f"The '{name}' parameter must be in [1/64, 2^40] grid units; got {float(frac)!r}. "
            f"Choose a grid resolution that puts it in range."
        )
    return frac


def _source(bits: ChaCha20Bits | None) -> ChaCha20Bits:
    if bits is None:
        return ChaCha20Bits.from_entropy()
    if not isinstance(bits, ChaCha20Bits):
        raise ConfigError(
            f"Secure samplers take bits=ChaCha20Bits (or None for OS entropy); got "
            f"{type(bits).__name__}. Seeds are refused: derive audited noise with "
            f"ChaCha20Bits.derived(seed, record), or use the *_float samplers to simulate."
        )
    return bits


def _size(size: int | tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    shape = (size,) if isinstance(size, int | np.integer) else tuple(int(s) for s in size)
    if any(s < 0 for s in shape):
        raise ConfigError(f"The 'size' parameter must be non-negative; got {size!r}.")
    return int(np.prod(shape, dtype=np.int64)), shape


_S = 2.0**-PREFIX_BITS
# Relative error margins of the float fast path (float64 unit round-off u = 2^-53):
# - geometric thresholds e^{−g/t}, e^{−(g+1)/t} with g/t ≤ 37.5: error ≤ ~90u < 2^-46;
# - CKS acceptance e^{−γ} for γ ≤ 745 (beyond it p < 2^-1074 and ABS_TOL decides):
#   error ≤ u(8 + 4γ + 4(σ²/t + |Y|)(2|a| + 1)/(2σ²)) ≤ 2^-35.5 for σ ≥ 1/64.
# The margins below exceed those bounds by 2^10 or more; comparisons inside a margin go
# to the exact path, so the margins affect speed only, never the distribution.
_GEO_REL = 2.0**-36
_ACC_REL = 2.0**-26
# Geometric draws with scale t ≥ 2^21 are split as m·A + B so that A's scale t/m is in
# [2^20, 2^21): the float test then fails for about 2^-14 of the draws whatever t is.
_SPLIT_BITS = 20


def _prefixes(bits: ChaCha20Bits, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n uniform 53-bit prefixes (as exact float64) and n sign bits from n words."""
    w = bits.uint64(n)
    neg = (w & np.uint64(1)).astype(bool)
    w >>= _SHIFT
    return w.astype(np.float64), neg


def _prefix_only(bits: ChaCha20Bits, n: int) -> np.ndarray:
    """The prefixes of :func:`_prefixes` (the same n words), without the sign bits."""
    w = bits.uint64(n)
    w >>= _SHIFT
    return w.astype(np.float64)


def _decide_exp(
    prefix: np.ndarray,
    p: np.ndarray,
    rel: float,
    exact_x: Callable[[int], Fraction],
    extra: ChaCha20Bits,
    fast: bool,
) -> np.ndarray:
    """Exactly decide W_i < e^{−x_i} for uniforms W_i known by their 53-bit ``prefix``.

    ``p`` is a float approximation of e^{−x_i} with relative error below ``rel`` (and
    absolute error below ABS_TOL); comparisons inside that margin, and all of them when
    ``fast`` is false, are decided exactly with ``exact_x(i)`` (the exact rational x_i)
    and further bits from ``extra``.
    """
    if fast:
        lo = prefix * _S
        bound = p * (1 - rel)
        bound -= ABS_TOL
        hi = lo + _S
        yes = hi <= bound
        bound = np.multiply(p, 1 + rel, out=bound)
        bound += ABS_TOL
        undecided = lo < bound
        undecided &= ~yes
        slow = np.flatnonzero(undecided)
    else:
        yes = np.zeros(prefix.size, dtype=bool)
        slow = np.arange(prefix.size)
    for i in slow:
        yes[i] = LazyUniform(int(prefix[i]), extra).less_than_exp(exact_x(int(i)))
    return yes


def _geometric(prefix: np.ndarray, t: Fraction, extra: ChaCha20Bits, fast: bool) -> np.ndarray:
    """G = max{g ≥ 0 : W < e^{−g/t}}, so P(G ≥ g) = e^{−g/t} exactly (inversion).

    ``prefix`` holds W's first 53 bits: W ∈ [prefix, prefix + 1)·2^-53. Callers keep
    t < 2^21 (see :func:`_split`), where consecutive thresholds are ≥ 2^-21 apart relative
    to each other, far wider than the float margin 2^-36, so the exact path is rare
    (≈ 5·10^-5 comparisons per draw, measured).
    """
    t_f = float(t)
    lo = prefix * _S
    buf = lo + _S / 2
    np.log(buf, out=buf)
    buf *= -t_f
    np.floor(buf, out=buf)  # buf = g0 (as float, exact: g0 < 2^53)
    g0 = buf.astype(np.int64)
    if fast:
        p1 = buf
        p1 *= -1.0 / t_f
        np.exp(p1, out=p1)  # p1 ≈ e^{−g0/t}
        # W < e^{−g0/t} surely:  hi = lo + 2^-53 ≤ p1(1 − m) − A
        tmp = p1 * (1 - _GEO_REL)
        tmp -= ABS_TOL
        hi = lo + _S
        done = hi <= tmp
        # W ≥ e^{−(g0+1)/t} surely: lo ≥ p1·e^{−1/t}(1 + m) + A
        np.multiply(p1, math.exp(-1.0 / t_f) * (1 + _GEO_REL), out=tmp)
        tmp += ABS_TOL
        done &= lo >= tmp
        slow = np.flatnonzero(~done)
    else:
        slow = np.arange(prefix.size)
    for i in slow:
        w = LazyUniform(int(prefix[i]), extra)
        g = max(int(g0[i]), 0)
        while not w.less_than_exp(Fraction(g) / t):
            g -= 1
        while w.less_than_exp(Fraction(g + 1) / t):
            g += 1
        g0[i] = g
    return g0


def _split(t: Fraction) -> int:
    """The power of two m with t/m in [2^20, 2^21) (1 when t < 2^21)."""
    e = (t.numerator // t.denominator).bit_length() - 1
    return 1 << max(0, e - _SPLIT_BITS)


def _truncated_geometric(
    t: Fraction, m: int, n: int, bits: ChaCha20Bits, extra: ChaCha20Bits, fast: bool
) -> np.ndarray:
    """n draws of B ∈ {0, …, m−1} with P(B = b) ∝ e^{−b/t} (m a power of two, m ≤ t/2^20).

    Rejection from the uniform: B is m-bit uniform (one word each), kept with probability
    e^{−B/t} ≥ e^{−2^-20} (a second word); rejected positions are redrawn in order.
    """
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    t_f = float(t)
    # Every acceptance probability is ≥ e^{−m/t}: a W below it is accepted without exp().
    sure = math.exp(-m / t_f) * (1 - _GEO_REL) - ABS_TOL - _S
    sure_prefix = sure / _S  # prefix·2^-53 ≤ sure ⇔ prefix ≤ sure·2^53 (exact scaling)
    first = True
    while todo.size:
        w = bits.uint64(todo.size)
        w &= np.uint64(m - 1)
        b = w.view(np.int64)  # values below m ≤ 2^63: the same integers
        prefix = _prefix_only(bits, todo.size)
        keep = prefix <= sure_prefix if fast else np.zeros(todo.size, dtype=bool)
        rest = np.flatnonzero(~keep)
        if rest.size:
            b_rest = b[rest]

            def exact_x(i: int, vals: np.ndarray = b_rest) -> Fraction:
                return Fraction(int(vals[i])) / t

            keep[rest] = _decide_exp(
                prefix[rest],
                np.exp(-(b_rest.astype(np.float64) / t_f)),
                _GEO_REL,
                exact_x,
                extra,
                fast,
            )
        if first:  # todo is every position: no index arrays needed
            np.copyto(out, b, where=keep)
            todo = np.flatnonzero(~keep)
            first = False
        else:
            out[todo[keep]] = b[keep]
            todo = todo[~keep]
    return out


def _laplace_round(
    t: Fraction, n: int, bits: ChaCha20Bits, extra: ChaCha20Bits, fast: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One round of CKS Alg. 2 (sign–magnitude form): values ±G and the rejected mask (−, 0).

    G is geometric with P(G ≥ g) = e^{−g/t}. For large t it is drawn as G = m·A + B
    (the CKS split): A geometric with P(A ≥ a) = e^{−am/t}, B on {0, …, m−1} with
    P(B = b) ∝ e^{−b/t}, independent — exactly geometric, and every float test works with
    a scale below 2^21 whatever t is.
    """
    prefix, neg = _prefixes(bits, n)
    m = _split(t)
    g = _geometric(prefix, t / m, extra, fast)
    if m > 1:
        g *= m
        g += _truncated_geometric(t, m, n, bits, extra, fast)
    reject = neg & (g == 0)
    np.negative(g, out=g, where=neg)
    return g, reject


def _discrete_laplace(
    t: Fraction, n: int, bits: ChaCha20Bits, extra: ChaCha20Bits, fast: bool
) -> np.ndarray:
    """Exact discrete Laplace draws, redrawing rejected positions in order."""
    out, reject = _laplace_round(t, n, bits, extra, fast)
    todo = np.flatnonzero(reject)
    while todo.size:
        vals, reject = _laplace_round(t, todo.size, bits, extra, fast)
        out[todo] = vals
        todo = todo[reject]
    return out


def _gaussian_round(
    sigma: Fraction, n: int, bits: ChaCha20Bits, extra: ChaCha20Bits, fast: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One round of CKS Alg. 3: proposals Y and the accepted mask."""
    t = Fraction(math.floor(sigma) + 1)
    s2 = sigma * sigma
    s_over_t = s2 / t
    y = _discrete_laplace(t, n, bits, extra, fast)
    prefix = _prefix_only(bits, n)
    a = np.abs(y).astype(np.float64)
    a -= float(s_over_t)
    np.square(a, out=a)
    a *= -1.0 / (2 * float(s2))
    p = np.exp(a, out=a)  # p ≈ exp(−(|Y| − σ²/t)²/(2σ²))

    def exact_x(i: int) -> Fraction:
        return (Fraction(abs(int(y[i]))) - s_over_t) ** 2 / (2 * s2)

    return y, _decide_exp(prefix, p, _ACC_REL, exact_x, extra, fast)


def _discrete_gaussian(
    sigma: Fraction, n: int, bits: ChaCha20Bits, extra: ChaCha20Bits, fast: bool
) -> np.ndarray:
    """CKS Alg. 3: discrete Laplace proposal with t = ⌊σ⌋ + 1, exact acceptance test."""
    out, accept = _gaussian_round(sigma, n, bits, extra, fast)
    todo = np.flatnonzero(~accept)
    while todo.size:
        vals, accept = _gaussian_round(sigma, todo.size, bits, extra, fast)
        out[todo] = vals
        todo = todo[~accept]
    return out


def discrete_laplace(
    scale: float | Fraction,
    size: int | tuple[int, ...],
    *,
    bits: ChaCha20Bits | None = None,
) -> IntArray:
    """Exact discrete Laplace integers: P(x) ∝ exp(−|x|/scale), x ∈ ℤ (CKS 2020, Alg. 2).

    Guarantee: added to an integer value of L1 sensitivity Δ (add/remove one document),
    it is (Δ/scale)-DP. Private-RAG Alg. 2/6 line 6 uses it with scale 1/ε_thr on counts.

    Args:
        scale: t in grid units (any positive float, read as its exact rational value, or
            a ``Fraction``), in [1/64, 2^40].
        size: number of draws or a shape.
        bits: the cryptographic bit source; ``None`` keys a fresh one from OS entropy.
            Seeds are refused (use ``ChaCha20Bits.derived`` for audited noise).

    >>> src = ChaCha20Bits.derived(bytes(32), "example")
    >>> discrete_laplace(2.0, 5, bits=src).dtype
    dtype('int64')
    """
    t = _exact_param("scale", scale)
    n, shape = _size(size)
    src = _source(bits)
    return _discrete_laplace(t, n, src, src.fork("extra"), True).reshape(shape)


def discrete_gaussian(
    sigma: float | Fraction,
    size: int | tuple[int, ...],
    *,
    bits: ChaCha20Bits | None = None,
) -> IntArray:
    """Exact discrete Gaussian integers: P(x) ∝ exp(−x²/(2σ²)), x ∈ ℤ (CKS 2020, Alg. 3).

    Guarantee: added to an integer vector of L2 sensitivity Δ, it is Δ²/(2σ²)-zCDP (CKS
    Thm 4). This is the DGS of the collusion paper's audited noise (§5.3, claim A2) when
    ``bits = ChaCha20Bits.derived(s_W, rec_q)``.

    Args:
        sigma: σ in grid units (exact rational of the given float, or a ``Fraction``), in
            [1/64, 2^40].
        size: number of draws or a shape.
        bits: the cryptographic bit source; ``None`` keys a fresh one from OS entropy.

    >>> a = discrete_gaussian(3.0, 4, bits=ChaCha20Bits.derived(bytes(32), "q"))
    >>> b = discrete_gaussian(3.0, 4, bits=ChaCha20Bits.derived(bytes(32), "q"))
    >>> bool((a == b).all())
    True
    """
    s = _exact_param("sigma", sigma)
    n, shape = _size(size)
    src = _source(bits)
    return _discrete_gaussian(s, n, src, src.fork("extra"), True).reshape(shape)


@dataclass(frozen=True, slots=True)
class Grid:
    """A fixed-point grid of resolution 2^-``bits``: values ↔ integers in grid units.

    Rounding a score to the grid moves it by at most half a unit, so a sensitivity Δ in
    score units becomes at most Δ + 2^-bits (one unit) after rounding.
    """

    bits: int = 20

    def __post_init__(self) -> None:
        if (
            isinstance(self.bits, bool)
            or not isinstance(self.bits, int)
            or not 0 <= self.bits <= 40
        ):
            raise ConfigError(
                f"The 'bits' parameter must be an integer in [0, 40]; got {self.bits!r}."
            )

    @property
    def resolution(self) -> float:
        """The grid step 2^-bits."""
        return 2.0**-self.bits

    def to_units(self, values: FloatArray) -> IntArray:
        """Round values to the nearest grid point (ties to even), as integers."""
        arr = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
            raise ConfigError(
                f"Scores must be finite to be placed on the grid; got {bad} NaN or "
                f"infinite value(s)."
            )
        return np.rint(arr * 2.0**self.bits).astype(np.int64)

    def from_units(self, units: IntArray) -> FloatArray:
        """Integers in grid units back to values (exact for |units| < 2^53)."""
        return np.asarray(units, dtype=np.float64) * self.resolution

    def scale_units(self, value: float) -> Fraction:
        """A noise scale in score units expressed exactly in grid units (range-checked)."""
        return _exact_param("scale", Fraction(check_positive("scale", value)) * (1 << self.bits))

    def sensitivity_units(self, sensitivity: float) -> int:
        """The integer sensitivity in grid units after rounding: ⌈Δ·2^b⌉ + 1."""
        return (
            math.ceil(Fraction(check_positive("sensitivity", sensitivity)) * (1 << self.bits)) + 1
        )

    def rounded_sensitivity(self, sensitivity: float) -> float:
        """The sensitivity after rounding to the grid, in score units: (⌈Δ·2^b⌉ + 1)·2^-b."""
        return self.sensitivity_units(sensitivity) * self.resolution


def gaussian_noise_float(
    sigma: float, size: int | tuple[int, ...], *, rng: RngLike = None
) -> FloatArray:
    """N(0, σ²) floats from numpy — the fast path, for simulations only (not secure)."""
    sigma = check_positive("sigma", sigma)
    return make_rng(rng).normal(0.0, sigma, size)


def laplace_noise_float(
    scale: float, size: int | tuple[int, ...], *, rng: RngLike = None
) -> FloatArray:
    """Laplace(0, scale) floats from numpy — the fast path, for simulations only."""
    scale = check_positive("scale", scale)
    return make_rng(rng).laplace(0.0, scale, size)


# Chunks of a large simulation fill; fixed, so a seed gives the same values whatever the
# number of threads.
_FILL_CHUNK = 1 << 18
_POOL_LOCK = threading.Lock()
_POOL: list[ThreadPoolExecutor] = []


def _fill_pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(2, thread_name_prefix="ragprivacy-noise"))
        return _POOL[0]


def standard_normal_float(
    gen: np.random.Generator, shape: int | tuple[int, ...], *, threads: int | None = None
) -> FloatArray:
    """N(0, 1) float64 values from numpy — the fast path, for simulations only (not secure).

    Arrays of at least 2·2^18 values are filled in chunks of 2^18, chunk i from the i-th
    child of ``gen`` (``Generator.spawn``, independent streams), on ``threads`` threads
    (default: two when the machine has two cores or more; numpy releases the GIL while
    it fills). The chunks do not depend on the thread count, so one seed gives the same
    values on one thread or two. Smaller arrays come from ``gen`` itself.
    """
    out = np.empty(shape, dtype=np.float64)
    flat = out.reshape(-1)
    chunks = -(-flat.size // _FILL_CHUNK)
    if chunks < 2:
        gen.standard_normal(out=flat)
        return out
    try:
        kids = gen.spawn(chunks)
    except (TypeError, ValueError):  # a generator without a seed sequence cannot spawn
        gen.standard_normal(out=flat)
        return out
    workers = min(2, os.cpu_count() or 1) if threads is None else int(threads)

    def fill(i: int) -> None:
        kids[i].standard_normal(out=flat[i * _FILL_CHUNK : (i + 1) * _FILL_CHUNK])

    if workers <= 1:
        for i in range(chunks):
            fill(i)
    else:
        list(_fill_pool().map(fill, range(chunks)))
    return out
