"""Exact discrete Gaussian noise for noisy top-K, drawn only where it can matter.

Noise-first selection (:meth:`~ragprivacy.dp.GaussianNoisyTopK.select_units_noise_first`)
scores only the slots whose noise leaves them a chance, but it draws the noise of every
slot: n exact draws per query. Only the largest noise values can change the output, so
this module draws those alone — the idea of lazy Gumbel sampling for the exponential
mechanism (Mussmann, Levy & Ermon 2017) carried to the discrete Gaussian — and exactly:
the positions and values it returns have the joint law of the slots of n i.i.d.
DG(σ) draws (P(z) ∝ e^{−z²/(2σ²)}) whose noise is at least a threshold T, and every other
slot is known to lie below T.

* **Which slots** (:func:`top_noise`): the slots with noise ≥ T are the successes of n
  independent coins of probability p_T = P(Z ≥ T). They are found by geometric skips —
  the gap G to the next success has P(G ≥ g) = (1 − p_T)^g — decided by inversion of a
  uniform W: G = max{g : W < (1 − p_T)^g}, so the gaps of independent uniforms are
  independent and exactly geometric. The gaps are decided in bulk (:meth:`_Coin.gaps`):
  one 64-bit word per gap (its top 53 bits the prefix of W), a batch at a time; for each
  W the candidate g = ⌊ln W/ln(1 − p_T)⌋ is computed in float64 and kept only where both
  W < (1 − p_T)^g and W ≥ (1 − p_T)^{g+1} hold with a certified margin — with exp,
  log1p and the rounding of p_T each within a few units in the last place, the float
  values of (1 − p_T)^g err by at most (g·|ln(1 − p_T)| + 1)·2^{−49} relative (p_T ≤
  1/2 keeps ln(1 − p_T) well conditioned; otherwise every gap is decided exactly) and
  the margin is 2^9 times that, so a kept candidate is exactly G on every machine. Any
  other W (a fraction about 10^{−11}/p_T of them) is decided exactly, as a lazily
  refined uniform (:class:`~ragprivacy.dp._exact.LazyUniform`): brackets of p_T at
  increasing precision and more bits of W, walking from a start computed in correctly
  rounded decimal. So no float approximation of a probability ever decides an outcome,
  and the fast and exact paths give the same gap from the same bits. A batch holds the
  expected number of successes plus four standard deviations (public parameters only);
  the batches are drawn until the gaps pass the n slots and the rest of the last one is
  discarded, so the words read depend on the bits alone. The extra bits of W come only
  from the exact path, and only where W's 53-bit prefix cannot tell W from a threshold
  — which no certified float test can either — so they are the same on every machine.
* **p_T exactly bracketed** (:class:`TailMass`): p_T = Σ_{z≥T} f(z) / Σ_z f(z) with
  f(z) = e^{−z²/(2σ²)}. The tail is summed term by term in :mod:`decimal` (its exp is
  correctly rounded; each later term is the previous one times a correctly rounded
  ratio) with a geometric bound on the rest; the normaliser is σ√(2π)·θ with θ bracketed
  by Poisson summation (Σ_z f(z) = σ√(2π)·Σ_k e^{−2π²σ²k²}). Every bracket carries a
  margin far above the rounding error it covers (a margin decides speed only: a W inside
  it is refined).
* **Their values**: Z | Z ≥ T by rejection from a geometric envelope, T + G with
  P(G ≥ g) = e^{−gT/σ²} accepted with probability e^{−G²/(2σ²)}, since
  f(T + g) = f(T)·e^{−gT/σ²}·e^{−g²/(2σ²)}; every test is one of the exact samplers'
  comparisons of W with e^{−x} for rational x (:mod:`ragprivacy.dp.samplers`).
  Proposals come in rounds of a quarter more than the values still needed, and the
  first accepted ones are kept (the accepted proposals are i.i.d. from the target).
* **Lower, lazily** (:meth:`TopNoise.lower`): when the slots above T do not settle the
  selection, the band [T′, T) is drawn among the slots not yet drawn, each a success with
  probability P(T′ ≤ Z < T | Z < T), values by the same envelope truncated below T; and
  :meth:`TopNoise.fill` draws every remaining slot from Z | Z < T (rejection from the
  full sampler) when the lazy path would draw more than the full one.

:func:`lazy_noise_first` is noise-first selection on this noise (:func:`first_noise`, then
:func:`lazy_select`): it draws above T, lowers T until the K largest drawn noises beat
every undrawn slot whatever the scores (z_(K) + lo ≥ T + hi, so the top K lie among the
drawn slots), and scores the same candidates the full rule would, so its output has the
law of the full mechanism's. The thresholds depend on public parameters only (n, K, σ,
the score range): T is set one score range below the level that about 3·``min_scored``
slots exceed, then lowered by σ/4 at a time. Whether a query takes this path at all is
:func:`lazy_suits`, a function of public parameters only, chosen so that the lowering
almost never runs and the draw stays a small fraction of the slots.

Deviation: the derivation differs from drawing all n values from the same bits, so an
audited re-execution must run this same derivation (it is deterministic given the bits),
not the full sampler.

Tail masses of a narrow Gaussian (fewer than about 2·10^5 terms to sum) are summed term by
term; wider ones — the audit's calibrations reach σ ≈ 10^8 grid units — by Euler–Maclaurin
(:func:`_euler_maclaurin_tail`) with a certified remainder; both are computed once per σ
and threshold, then cached, as are the coins built on them, the first threshold and
:func:`lazy_suits` (functions of public parameters). The audited provider derives z_q with
this module where its policy says ``noise: lazy`` (:mod:`ragprivacy.audit.noise`): any
change to how the bits are read changes that wire format, which a pinned test in
``tests/dp/test_lazy_gaussian.py`` guards.
"""

from __future__ import annotations

import decimal
import functools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

import numpy as np

from ragprivacy._typing import IntArray
from ragprivacy.dp._exact import PREFIX_BITS, LazyUniform
from ragprivacy.dp.mechanisms import top_k_indices
from ragprivacy.dp.randomness import ChaCha20Bits
from ragprivacy.dp.samplers import (
    _ACC_REL,
    _decide_exp,
    _discrete_gaussian,
    _geometric,
    _prefix_only,
    _split,
    _truncated_geometric,
)
from ragprivacy.errors import ConfigError

__all__ = [
    "TailMass",
    "TopNoise",
    "first_noise",
    "lazy_noise_first",
    "lazy_select",
    "lazy_suits",
    "top_noise",
]

_DIGITS = 40  # first precision of the brackets (decimal digits); doubled on demand
_FLOAT_REL = 2.0**-40  # certified margin of the float test of W < (1 − p)^g
_FLOAT_ABS = 2.0**-1000  # its absolute part (probabilities that underflow)
_BATCH_MAX = 1 << 16  # the most gap words drawn at once
_SUM_TERMS = 2e5  # the longest tail summed term by term; beyond, Euler–Maclaurin
_S = 2.0**-PREFIX_BITS
_SHIFT = np.uint64(64 - PREFIX_BITS)


def _context(digits: int) -> decimal.Context:
    return decimal.Context(
        prec=digits + 12,
        rounding=decimal.ROUND_HALF_EVEN,
        Emin=decimal.MIN_EMIN,
        Emax=decimal.MAX_EMAX,
    )


def _dec(x: Fraction, ctx: decimal.Context) -> decimal.Decimal:
    return ctx.divide(decimal.Decimal(x.numerator), decimal.Decimal(x.denominator))


def _pi(ctx: decimal.Context) -> decimal.Decimal:
    """π to the context's precision (the :mod:`decimal` documentation's series)."""
    with decimal.localcontext(ctx) as c:
        c.prec += 4
        t = s = decimal.Decimal(3)
        lasts = decimal.Decimal(0)
        n, na, d, da = 1, 0, 0, 24
        while s != lasts:
            lasts = s
            n, na = n + na, na + 8
            d, da = d + da, da + 32
            t = (t * n) / d
            s += t
    return ctx.plus(s)


def _bernoulli(count: int) -> list[Fraction]:
    """B_0 … B_{count−1} (B_1 = −1/2), exactly (the classical recurrence)."""
    b = [Fraction(1)]
    for m in range(1, count):
        b.append(-sum((math.comb(m + 1, k) * b[k] for k in range(m)), Fraction(0)) / (m + 1))
    return b


def _erfc(x: decimal.Decimal, digits: int) -> tuple[Fraction, Fraction]:
    """Brackets of erfc(x), x ≥ 0, relative width about 10^{−digits}: 1 − erf(x) with
    erf's Taylor series (alternating; once its terms decrease, the first left out bounds
    the rest) at a precision that covers the cancellation (erfc(x) ≈ e^{−x²})."""
    xf = float(x)
    extra = int(xf * xf / 2.3) + 10  # digits lost to the cancellation
    ctx = _context(digits + 2 * extra)
    pi = _pi(ctx)
    x2 = ctx.multiply(x, x)
    term = x  # (−1)^n x^{2n+1}/n!
    total = decimal.Decimal(0)
    n = 0
    biggest = abs(term)
    limit = decimal.Decimal(10) ** -(digits + extra + 5)
    while True:
        total = ctx.add(total, ctx.divide(term, 2 * n + 1))
        n += 1
        term = ctx.divide(ctx.multiply(ctx.minus(term), x2), n)
        biggest = max(biggest, abs(term))
        if n > xf * xf + 1 and abs(term) < limit:
            break
    # truncation ≤ |next term| (decreasing alternating tail); rounding: each term carries
    # up to 2n rounded steps and each partial sum is below n times the largest term,
    # so 4(n + 4)² ulps of the largest term bound it; √π and the last steps add a few
    # ulps of 1
    ulp = decimal.Decimal(10) ** -(ctx.prec - 1)
    err = Fraction(abs(term)) + Fraction(4 * (n + 4) ** 2) * Fraction(biggest + 1) * Fraction(ulp)
    scale = ctx.divide(2, ctx.sqrt(pi))
    erfc = Fraction(ctx.subtract(1, ctx.multiply(scale, total)))
    err = err * 2 + Fraction(ulp) * 8
    return erfc - err, erfc + err


def _euler_maclaurin_tail(sigma: Fraction, t: int, digits: int) -> tuple[Fraction, Fraction]:
    """Brackets of Σ_{z≥t} f(z), f(x) = e^{−x²/(2σ²)}, by Euler–Maclaurin:

    ∫_t^∞ f + f(t)/2 + Σ_{j≤p} B_{2j}/(2j)!·σ^{1−2j}·He_{2j−1}(t/σ)·f(t) + R_p,

    (f^{(k)}(x) = (−1)^k σ^{−k} He_k(x/σ) f(x), He the probabilists' Hermite
    polynomials), ∫_t^∞ f = σ√(π/2)·erfc(t/(σ√2)), and
    |R_p| ≤ 2ζ(2p)/(2π)^{2p}·∫|f^{(2p)}| ≤ 2ζ(2p)/(2π)^{2p}·σ^{1−2p}·√(2π)·√((2p)!)
    (Cauchy–Schwarz: E|He_k(U)| ≤ √(k!) for U standard normal). p grows until that
    bound is below 10^{−(digits+3)} of the integral."""
    work = digits + 25
    ctx = _context(work)
    sig = _dec(sigma, ctx)
    y = ctx.divide(t, sig)
    pi = _pi(ctx)
    f_t = ctx.exp(ctx.minus(ctx.divide(ctx.multiply(y, y), 2)))
    x = ctx.divide(y, ctx.sqrt(decimal.Decimal(2)))
    e_lo, e_hi = _erfc(x, work)
    half = Fraction(ctx.multiply(sig, ctx.sqrt(ctx.divide(pi, 2))))
    integral = ((e_lo + e_hi) / 2) * half
    target = integral * Fraction(1, 10 ** (digits + 3))
    two_pi_s = 2 * math.pi * float(sigma)
    p = 1
    while True:  # the remainder bound, in logs first (it only chooses p), then exactly
        log_r = (
            math.log(4.0)  # 2ζ(2p) ≤ 2ζ(2) < 4
            - 2 * p * math.log(two_pi_s)
            + math.log(float(sigma) * math.sqrt(2 * math.pi))
            + 0.5 * math.lgamma(2 * p + 1)
        )
        if log_r < math.log(float(target)) - 2 or p > 400:
            break
        p += 1
    bern = _bernoulli(2 * p + 1)
    he_prev, he = decimal.Decimal(1), y  # He_0, He_1
    corr = Fraction(0)
    s_pow = 1 / sigma  # σ^{1−2j}, j = 1
    for j in range(1, p + 1):
        k = 2 * j - 1  # He_k is he
        corr += bern[2 * j] / math.factorial(2 * j) * s_pow * Fraction(he)
        # He_{k+2} from He_k, He_{k+1}
        he_next = ctx.subtract(ctx.multiply(y, he), ctx.multiply(k, he_prev))  # He_{k+1}
        he_prev, he = he_next, ctx.subtract(ctx.multiply(y, he_next), ctx.multiply(k + 1, he))
        s_pow /= sigma * sigma
    corr *= Fraction(f_t)
    rem = Fraction(4) * Fraction(1) / Fraction(two_pi_s) ** (2 * p)
    rem *= Fraction(float(sigma)) * Fraction(math.sqrt(2 * math.pi) * 1.0001)
    rem *= Fraction(math.isqrt(math.factorial(2 * p)) + 1)
    ft = Fraction(f_t)
    mid = integral + ft / 2 + corr
    # the integral's bracket, and rounding of f(t), the Hermite values and σ√(π/2)
    # (each within a few units of 10^{−work}) relative to the sum
    slack = (e_hi - e_lo) * half + mid * Fraction(100, 10**work) + rem
    if not mid > slack:
        raise ConfigError("The Euler–Maclaurin tail failed to bracket a positive mass.")
    return mid - slack, mid + slack


class TailMass:
    """Brackets of the discrete Gaussian's tail probabilities for one σ (grid units).

    ``tail(t, digits)`` brackets Σ_{z≥t} e^{−z²/(2σ²)} (t ≥ 1) and ``normaliser(digits)``
    Σ_z e^{−z²/(2σ²)}, each with relative width about 10^{−digits}; results are cached
    (they depend on public parameters only). Thread-safe."""

    def __init__(self, sigma: Fraction) -> None:
        if sigma < 1:
            raise ConfigError(f"The lazy sampler needs σ ≥ 1 grid unit; got {float(sigma)}.")
        self.sigma = Fraction(sigma)
        self.s2 = self.sigma * self.sigma
        self._cache: dict[tuple[str, int, int], tuple[Fraction, Fraction]] = {}
        self._coins: dict[tuple[int, int | None], _Coin] = {}
        self._lock = threading.Lock()

    def _cached(
        self, key: tuple[str, int, int], make: Callable[[], tuple[Fraction, Fraction]]
    ) -> tuple[Fraction, Fraction]:
        with self._lock:
            got = self._cache.get(key)
        if got is None:
            got = make()
            with self._lock:
                self._cache[key] = got
        return got

    def normaliser(self, digits: int = _DIGITS) -> tuple[Fraction, Fraction]:
        return self._cached(("S", 0, digits), lambda: self._normaliser(digits))

    def _normaliser(self, digits: int) -> tuple[Fraction, Fraction]:
        ctx = _context(digits)
        pi = _pi(ctx)
        sigma = _dec(self.sigma, ctx)
        base = ctx.multiply(sigma, ctx.sqrt(ctx.multiply(2, pi)))
        a = ctx.multiply(ctx.multiply(2, ctx.multiply(pi, pi)), _dec(self.s2, ctx))
        m = Fraction(1, 10**digits)
        b = Fraction(base)
        if a > (digits + 20) * 2.31:  # e^{−a} < 10^{−(digits+20)}: θ ∈ [1, 1 + 3e^{−a}]
            return b * (1 - m), b * (1 + m)
        e = Fraction(ctx.exp(ctx.minus(a)))  # θ ∈ [1 + 2e^{−a}, 1 + 2e^{−a}/(1 − e^{−3a})]
        return b * (1 + 2 * e) * (1 - m), b * (1 + 2 * e / (1 - e**3)) * (1 + m)

    def tail(self, t: int, digits: int = _DIGITS) -> tuple[Fraction, Fraction]:
        if t < 1:
            raise ConfigError(f"Tail masses are bracketed from t ≥ 1; got {t}.")
        return self._cached(("G", int(t), digits), lambda: self._tail(int(t), digits))

    def _tail(self, t: int, digits: int) -> tuple[Fraction, Fraction]:
        # the terms shrink by about e^{−t/σ²} each (and faster further out): summing to
        # a relative 10^{−digits} takes about min(digits·ln 10·σ²/t, σ·√(2·digits·ln 10))
        # of them; beyond _SUM_TERMS the Euler–Maclaurin form is used instead
        s2 = float(self.s2)
        need = min(digits * 2.31 * s2 / t, math.sqrt(s2 * 4.61 * digits))
        if need > _SUM_TERMS:
            return _euler_maclaurin_tail(self.sigma, t, digits)
        ctx = _context(digits)
        two_s2 = _dec(2 * self.s2, ctx)
        term = ctx.exp(ctx.minus(ctx.divide(t * t, two_s2)))
        ratio = ctx.exp(ctx.minus(ctx.divide(2 * t + 1, two_s2)))  # f(z + 1)/f(z) at z = t
        q = ctx.exp(ctx.minus(_dec(1 / self.s2, ctx)))  # the ratio's own ratio
        stop = decimal.Decimal(10) ** -(digits + 3)
        total = decimal.Decimal(0)
        steps = 0
        while True:
            total = ctx.add(total, term)
            term = ctx.multiply(term, ratio)
            ratio = ctx.multiply(ratio, q)
            steps += 1
            # every later ratio is below this one: the rest is at most term/(1 − ratio)
            rest = ctx.divide(term, ctx.subtract(1, ratio))
            if rest <= ctx.multiply(total, stop):
                break
        # 3 correctly rounded operations per step, each within 10^{−(digits+11)}: the
        # relative error stays below 10^{−digits}/10 for fewer than 10^8 steps
        if steps >= 10**8:
            raise ConfigError("The tail of this discrete Gaussian is too wide to bracket.")
        m = Fraction(1, 10**digits)
        return Fraction(total) * (1 - m), (Fraction(total) + Fraction(rest)) * (1 + m)

    def band(self, low: int, high: int | None, digits: int = _DIGITS) -> tuple[Fraction, Fraction]:
        """P(low ≤ Z < high | Z < high) (``high`` None: P(Z ≥ low)), bracketed."""
        key = ("B" if high is None else f"B{high}", int(low), digits)
        return self._cached(key, lambda: self._band(low, high, digits))

    def coin(self, low: int, high: int | None) -> _Coin:
        """The coin of probability :meth:`band` (``low``, ``high``), built once."""
        key = (int(low), None if high is None else int(high))
        with self._lock:
            got = self._coins.get(key)
        if got is None:
            got = _Coin(lambda digits: self.band(key[0], key[1], digits))
            with self._lock:
                got = self._coins.setdefault(key, got)
        return got

    def _band(self, low: int, high: int | None, digits: int) -> tuple[Fraction, Fraction]:
        s_lo, s_hi = self.normaliser(digits)
        g_lo, g_hi = self.tail(low, digits)
        if high is None:
            return g_lo / s_hi, min(Fraction(1), g_hi / s_lo)
        h_lo, h_hi = self.tail(high, digits)
        num_lo, num_hi = max(Fraction(0), g_lo - h_hi), g_hi - h_lo
        return num_lo / (s_hi - h_lo), min(Fraction(1), num_hi / (s_lo - h_hi))


_MASSES: dict[Fraction, TailMass] = {}
_MASSES_LOCK = threading.Lock()


def tail_mass(sigma: Fraction) -> TailMass:
    """The shared :class:`TailMass` of σ (its brackets are computed once per process)."""
    with _MASSES_LOCK:
        got = _MASSES.get(sigma)
        if got is None:
            got = _MASSES[sigma] = TailMass(sigma)
        return got


def _pow_bounds(p: tuple[Fraction, Fraction], g: int, digits: int) -> tuple[Fraction, Fraction]:
    """Brackets of (1 − p)^g for p in the bracket ``p``: e^{g·ln(1 − p)} in decimal
    (correctly rounded ln and exp; the margin is 10^3 times their rounding and the
    rounding of p), lower bound from the bracket's upper end."""
    ctx = _context(digits)

    def power(v: Fraction) -> tuple[Fraction, Fraction]:
        if v >= 1:
            return Fraction(0), Fraction(0)
        y = ctx.multiply(g, ctx.ln(ctx.subtract(1, _dec(v, ctx))))
        return Fraction(ctx.exp(y)), Fraction(int(-y) + 4, 10 ** (digits + 8))

    low, m_low = power(p[1])
    high, m_high = power(p[0])
    return low * (1 - m_low), high * (1 + m_high)


class _Coin:
    """Geometric skips over a population: the gaps between successes of coins of one
    probability p known only through brackets (module docstring)."""

    def __init__(self, bracket: Callable[[int], tuple[Fraction, Fraction]]) -> None:
        self.bracket = bracket
        lo, hi = bracket(_DIGITS)
        self.mid = (lo + hi) / 2
        self.one = lo >= 1  # p = 1 exactly (brackets never exceed 1)
        self.p = float(self.mid)
        self.log1mp = math.log1p(-self.p) if self.p < 1 else -math.inf
        # the float tests' error bound needs p away from 1 (callers: p ≤ 1/2)
        self.fast = 0 < self.p <= 0.5

    def _below(self, w: LazyUniform, g: int) -> bool:
        """Exactly decide W < (1 − p)^g."""
        if g == 0:
            return True
        if self.one:
            return False
        if self.fast:
            lo, hi = w.interval()
            v = math.exp(g * self.log1mp)
            rel = (g * -self.log1mp + 4) * _FLOAT_REL
            if float(hi) <= v * (1 - rel) - _FLOAT_ABS:
                return True
            if float(lo) >= v * (1 + rel) + _FLOAT_ABS:
                return False
        digits = _DIGITS
        while True:
            b_lo, b_hi = _pow_bounds(self.bracket(digits), g, digits)
            lo, hi = w.interval()
            if hi <= b_lo:
                return True
            if lo >= b_hi:
                return False
            if w.bits >= digits * 3:  # W is finer than the bracket: refine the bracket
                digits *= 2
            else:
                w.refine()

    def exact_gap(self, prefix: int, extra: ChaCha20Bits, limit: int) -> int:
        """min(G, ``limit``) for the uniform W with 53-bit ``prefix`` (refined from
        ``extra``), G = max{g : W < (1 − p)^g}, decided exactly: a walk from a start
        computed in correctly rounded decimal (the same on every machine)."""
        w = LazyUniform(prefix, extra)
        if self.one:
            return 0
        ctx = _context(18)
        ln_1mp = ctx.ln(ctx.subtract(1, _dec(self.mid, ctx)))
        if ln_1mp == 0:
            g = limit
        else:
            ln_w = ctx.ln(ctx.divide(2 * prefix + 1, 1 << (PREFIX_BITS + 1)))
            g = min(limit, int(ctx.divide(ln_w, ln_1mp)))
        while g > 0 and not self._below(w, g):
            g -= 1
        while g < limit and self._below(w, g + 1):
            g += 1
        return g

    def gaps(self, prefix: np.ndarray, extra: ChaCha20Bits, limit: int) -> IntArray:
        """min(G_i, ``limit``) for the uniforms W_i with 53-bit prefixes ``prefix``
        (uint64): the candidate ⌊ln W/ln(1 − p)⌋ of each is certified in float64 —
        W < (1 − p)^g and W ≥ (1 − p)^{g+1}, each with :meth:`_below`'s margin — and the
        uncertified ones are decided by :meth:`exact_gap`, in order."""
        k = prefix.size
        if not self.fast:
            g = np.empty(k, dtype=np.int64)
            slow = np.arange(k)
        else:
            lo = prefix.astype(np.float64)
            lo *= _S
            hi = lo + _S
            neg_log = -self.log1mp
            gf = lo + _S / 2
            np.log(gf, out=gf)
            gf /= self.log1mp
            np.floor(gf, out=gf)
            np.minimum(gf, float(limit), out=gf)  # ≥ 0: ln W < 0
            # W < (1 − p)^g surely (or g = 0)
            e = gf * neg_log
            bound = np.exp(-e)
            e += 4
            e *= _FLOAT_REL
            np.subtract(1, e, out=e)
            bound *= e
            bound -= _FLOAT_ABS
            ok = hi <= bound
            ok |= gf == 0
            # W ≥ (1 − p)^{g+1} surely (or g = limit)
            e = gf + 1
            e *= neg_log
            np.exp(-e, out=bound)
            e += 4
            e *= _FLOAT_REL
            e += 1
            bound *= e
            bound += _FLOAT_ABS
            low_ok = lo >= bound
            low_ok |= gf >= limit
            ok &= low_ok
            g = gf.astype(np.int64)
            slow = np.flatnonzero(~ok)
        for i in slow.tolist():
            g[i] = self.exact_gap(int(prefix[i]), extra, limit)
        return g

    def batch(self, population: int) -> int:
        """How many uniforms to draw at once: the expected number of successes in
        ``population`` plus four standard deviations (from public parameters only)."""
        m = population * min(self.p, 1.0)
        return min(_BATCH_MAX, int(m + 4 * math.sqrt(m)) + 16)

    def successes(self, population: int, bits: ChaCha20Bits, extra: ChaCha20Bits) -> IntArray:
        """The successes among ``population`` coins (offsets, increasing): each gap from
        one word of ``bits``, drawn :meth:`batch` words at a time; the words of the last
        batch left over once the population is passed are discarded, so the number of
        words read depends on the bits alone."""
        if self.p <= 0 or population <= 0:
            return np.empty(0, dtype=np.int64)
        size = self.batch(population)
        found = []
        cur = 0
        while True:
            prefix = bits.uint64(size)
            prefix >>= _SHIFT
            pos = self.gaps(prefix, extra, population)
            pos += 1
            np.cumsum(pos, out=pos)
            pos += cur - 1
            stop = int(np.searchsorted(pos, population))
            found.append(pos[:stop])
            if stop < size:
                break
            cur = int(pos[-1]) + 1
        return found[0] if len(found) == 1 else np.concatenate(found)


def _uniform_below(bits: ChaCha20Bits, width: int, k: int) -> IntArray:
    """k exactly uniform integers in [0, width) (64-bit words, those at or above the
    largest multiple of ``width`` redrawn)."""
    limit = np.uint64(((1 << 64) // width) * width - 1)  # the largest word kept
    out = np.empty(k, dtype=np.int64)
    todo = np.arange(k)
    while todo.size:
        w = bits.uint64(todo.size)
        ok = w <= limit
        out[todo[ok]] = (w[ok] % np.uint64(width)).astype(np.int64)
        todo = todo[~ok]
    return out


def _band_values(
    mass: TailMass, low: int, high: int | None, m: int, bits: ChaCha20Bits, extra: ChaCha20Bits
) -> IntArray:
    """m draws of Z | low ≤ Z < high (module docstring: a geometric envelope from
    ``low``, accepted with probability e^{−G²/(2σ²)}, redrawn when at or above ``high``).

    Each round proposes a quarter more than the draws still needed (and 8) and keeps the
    first accepted ones in order: the accepted proposals of a rejection sampler are
    i.i.d. from its target whatever their number, so stopping at m of them is exact."""
    s2 = mass.s2
    parts: list[IntArray] = []
    need = m
    if high is not None and (high - low) * low < s2:
        # a band narrower than the geometric envelope's scale σ²/low: a uniform envelope
        # on it, accepted with probability f(z)/f(low) = e^{−u(u + 2·low)/(2σ²)}, u = z − low
        width, s2f = high - low, float(s2)
        while need > 0:
            k = need + need // 4 + 8
            u = _uniform_below(bits, width, k)
            prefix = _prefix_only(bits, k)
            uf = u.astype(np.float64)
            p = np.exp(-(uf * (uf + 2 * low)) / (2 * s2f))

            def exact_u(i: int, vals: np.ndarray = u) -> Fraction:
                return Fraction(int(vals[i]) * (int(vals[i]) + 2 * low)) / (2 * s2)

            keep = _decide_exp(prefix, p, _ACC_REL, exact_u, extra, True)
            got = low + u[keep][:need]
            parts.append(got)
            need -= got.size
    else:
        t = s2 / low  # the envelope's scale: P(G ≥ g) = e^{−g·low/σ²}
        split = _split(t)
        t_part = t / split
        two_s2 = 2 * float(s2)
        while need > 0:
            k = need + need // 4 + 8
            g = _geometric(_prefix_only(bits, k), t_part, extra, True)
            if split > 1:
                g *= split
                g += _truncated_geometric(t, split, k, bits, extra, True)
            prefix = _prefix_only(bits, k)
            gf = g.astype(np.float64)
            p = np.exp(-(gf * gf) / two_s2)

            def exact_x(i: int, vals: np.ndarray = g) -> Fraction:
                return Fraction(int(vals[i]) ** 2) / (2 * s2)

            keep = _decide_exp(prefix, p, _ACC_REL, exact_x, extra, True)
            g += low
            if high is not None:
                keep &= g < high
            got = g[keep][:need]
            parts.append(got)
            need -= got.size
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


@dataclass
class TopNoise:
    """The drawn part of n slots' noise: every slot with noise ≥ :attr:`threshold` (its
    position and value), the others known to lie below it (``complete`` once all are
    drawn)."""

    n: int
    sigma: Fraction
    threshold: int
    positions: IntArray
    values: IntArray
    bits: ChaCha20Bits = field(repr=False)
    extra: ChaCha20Bits = field(repr=False)
    complete: bool = False

    def lower(self, to: int) -> None:
        """Draw the band [``to``, threshold) among the slots not drawn yet."""
        if self.complete or to >= self.threshold:
            return
        mass = tail_mass(self.sigma)
        high = self.threshold
        coin = mass.coin(to, high)
        drawn = np.sort(self.positions)
        offsets = coin.successes(self.n - drawn.size, self.bits, self.extra)
        found = _nth_free(drawn, offsets)
        vals = _band_values(mass, to, high, found.size, self.bits, self.extra)
        self._add(found, vals, to)

    def fill(self) -> None:
        """Draw every remaining slot from Z | Z < threshold (rejection from the full
        sampler): the noise of all n slots."""
        if self.complete:
            return
        drawn = np.zeros(self.n, dtype=bool)
        drawn[self.positions] = True
        rest = np.flatnonzero(~drawn)
        vals = np.empty(rest.size, dtype=np.int64)
        todo = np.arange(rest.size)
        while todo.size:
            got = _discrete_gaussian(self.sigma, todo.size, self.bits, self.extra, True)
            ok = got < self.threshold
            vals[todo[ok]] = got[ok]
            todo = todo[~ok]
        self._add(rest, vals, None)
        self.complete = True

    def _add(self, positions: IntArray, values: IntArray, threshold: int | None) -> None:
        self.positions = np.concatenate([self.positions, positions]).astype(np.int64)
        self.values = np.concatenate([self.values, values]).astype(np.int64)
        if threshold is not None:
            self.threshold = threshold

    def dense(self) -> IntArray:
        """Every slot's noise (only once :meth:`fill` ran)."""
        if not self.complete:
            raise ConfigError("Only the slots above the threshold are drawn; fill() first.")
        z = np.empty(self.n, dtype=np.int64)
        z[self.positions] = self.values
        return z


def _nth_free(taken: IntArray, offsets: IntArray) -> IntArray:
    """The positions of the ``offsets``-th (0-based, increasing) slots not in ``taken``
    (sorted)."""
    # the o-th free slot is o + j, j the number of taken slots before it: those t_j with
    # t_j − j ≤ o (t_j − j, the free slots before t_j, does not decrease)
    free_before = taken - np.arange(taken.size, dtype=np.int64)
    return offsets + np.searchsorted(free_before, offsets, side="right")


def top_noise(n: int, sigma: Fraction, threshold: int, bits: ChaCha20Bits) -> TopNoise:
    """The slots of n i.i.d. DG(σ) draws whose noise is ≥ ``threshold`` (≥ 1), exactly in
    law (module docstring), from ``bits`` (e.g. :func:`~ragprivacy.dp.derived_bits`)."""
    if threshold < 1:
        raise ConfigError(f"The lazy threshold must be ≥ 1 grid unit; got {threshold}.")
    mass = tail_mass(Fraction(sigma))
    extra = bits.fork("lazy-extra")
    pos = mass.coin(threshold, None).successes(n, bits, extra)
    vals = _band_values(mass, threshold, None, pos.size, bits, extra)
    return TopNoise(n, Fraction(sigma), threshold, pos, vals, bits, extra)


def first_threshold(n: int, sigma: Fraction, target: int) -> int:
    """T with at least about ``target`` of n DG(σ) slots above it: ⌊σ·x⌋ with x solving
    n·φ(x)·x/(x² + 1) = target, where φ(x)·x/(x² + 1) is the classical lower bound of the
    normal tail P(N(0, 1) ≥ x) (so the expected count is at least the target, up to the
    grid); a few fixed-point steps in correctly rounded decimal arithmetic (a function of
    public parameters only, the same on every machine, cached); at least 1."""
    return _first_threshold(int(n), Fraction(sigma), int(target))


@functools.lru_cache(maxsize=256)
def _first_threshold(n: int, sigma: Fraction, target: int) -> int:
    if n <= target:
        return 1
    ctx = _context(20)
    root_2pi = ctx.sqrt(ctx.multiply(2, _pi(ctx)))
    x = ctx.sqrt(ctx.multiply(2, ctx.ln(ctx.divide(n, target))))
    for _ in range(8):
        ratio = ctx.divide(ctx.multiply(n, x), ctx.multiply(target * root_2pi, x * x + 1))
        if ratio <= 1:
            break
        x = ctx.sqrt(ctx.multiply(2, ctx.ln(ratio)))
    return max(1, int(ctx.multiply(_dec(Fraction(sigma), ctx), x)))


def _certified(drawn: TopNoise, k: int, width: int, min_scored: int) -> bool:
    """Whether the K largest drawn noises beat every undrawn slot whatever the scores
    (z_(K) + lo ≥ T + hi), with at least ``min_scored`` slots drawn to pad the candidates."""
    m = drawn.positions.size
    if m < min(max(min_scored, k), drawn.n) or m < k:
        return False
    return int(np.partition(drawn.values, m - k)[m - k]) - width >= drawn.threshold


def first_noise(
    n: int, k: int, sigma: Fraction, bits: ChaCha20Bits, *, min_scored: int, width: int = 0
) -> TopNoise:
    """The first draw of :func:`lazy_noise_first`: the slots above T₀ = T₁ − ``width``,
    where T₁ is the threshold that about c = 3·max(``min_scored``, K) of n slots exceed
    (:func:`first_threshold`) — a function of public parameters only (at least 1). About
    c slots clear T₀ + width, so the draw certifies the selection at once where
    :func:`lazy_suits` admits the parameters; ``width`` is the score range in grid units
    (0: T₀ = T₁). Everything after it reads the same bits on."""
    t0 = _first_draw_threshold(n, k, sigma, width, min_scored)
    return top_noise(n, sigma, max(1, t0), bits)


def _first_count(n: int, k: int, min_scored: int) -> int:
    return 3 * max(min_scored, min(k, n))


def _first_draw_threshold(n: int, k: int, sigma: Fraction, width: int, min_scored: int) -> int:
    return first_threshold(n, sigma, _first_count(n, k, min_scored)) - int(width)


#: the lazy path draws at most about this fraction of the slots in expectation; past it
#: drawing the slots one band at a time costs about what drawing every slot costs
LAZY_MAX_FRACTION: Final[Fraction] = Fraction(1, 32)


def lazy_suits(n: int, k: int, sigma: Fraction, width: int, *, min_scored: int) -> bool:
    """Whether lazy noise serves n slots at σ, top-``k``, score range ``width`` (grid
    units): a function of public parameters only, so the path a query takes says nothing
    about its data or its noise.

    With c = 3·max(``min_scored``, K), T₁ = :func:`first_threshold` (n, σ, c) and
    T₀ = T₁ − width (:func:`first_noise` draws the slots above T₀): lazy when n ≥ 8c,
    T₀ ≥ 1 and the expected number of slots drawn, n·P(Z ≥ T₀) (bracketed exactly by
    :class:`TailMass`), is at most :data:`LAZY_MAX_FRACTION` of n. The slots that clear
    T₁ = T₀ + width are a Poisson number of mean at least about c; the draw certifies
    unless fewer than K of them, or fewer than ``min_scored`` = c/3 slots in all, are
    drawn, and Chernoff bounds put each below e^{−30} (c ≥ 192, K ≤ c/24). Only then
    does :func:`lazy_select` lower its threshold — the one time its work depends on the
    noise beyond the number of slots drawn. A wide range against σ costs more slots
    drawn (about c·e^{width·T₁/σ²}), not a noise-dependent path; past the fraction (σ
    small against the range, or few slots) the full derivation draws every slot."""
    return _lazy_suits(int(n), int(k), Fraction(sigma), int(width), int(min_scored))


@functools.lru_cache(maxsize=256)
def _lazy_suits(n: int, k: int, sigma: Fraction, width: int, min_scored: int) -> bool:
    c = _first_count(n, k, min_scored)
    if n < 8 * c:
        return False
    t0 = _first_draw_threshold(n, k, sigma, width, min_scored)
    if t0 < 1:
        return False
    return n * tail_mass(sigma).band(t0, None)[1] <= LAZY_MAX_FRACTION * n


def lazy_select(
    drawn: TopNoise,
    k: int,
    bounds: tuple[int, int],
    units_at: Callable[[IntArray], IntArray],
    *,
    min_scored: int,
) -> IntArray:
    """TopK(clip(s) + z) over ``drawn.n`` slots, continuing the lazy draw ``drawn``
    (module docstring): lowers the threshold by σ/4 until the K largest drawn noises beat
    every undrawn slot whatever the scores, or draws every slot (threshold at 1, or more
    than half of them drawn); then scores the candidates the full noise-first rule would.

    ``bounds`` = (lo, hi), the clip range in grid units; ``units_at(p)`` the exact
    scores of positions ``p``. Returns the K positions, best first, ties to the lower
    position; ``drawn`` holds the noise drawn."""
    lo, hi = int(bounds[0]), int(bounds[1])
    width = hi - lo
    n = drawn.n
    kk = min(k, n)
    step = max(1, int(drawn.sigma / 4))
    while not drawn.complete and not _certified(drawn, kk, width, min_scored):
        if 2 * drawn.positions.size > n or drawn.threshold - step < 1:
            drawn.fill()
        else:
            drawn.lower(drawn.threshold - step)
    z, pos = drawn.values, drawn.positions
    z_k = int(np.partition(z, z.size - kk)[z.size - kk])
    near = z >= z_k - width  # the candidates: z_i + hi ≥ z_(K) + lo
    if near.sum() < min_scored:  # padded with the next-largest noises (rows read: constant)
        order = np.lexsort((pos, -z))[: min(min_scored, z.size)]
        near[order] = True
    cand_pos, cand_z = pos[near], z[near]
    order = np.argsort(cand_pos, kind="stable")
    cand_pos, cand_z = cand_pos[order], cand_z[order]
    scores = np.clip(np.asarray(units_at(cand_pos), dtype=np.int64), lo, hi)
    best = top_k_indices(scores + cand_z, kk)
    return cand_pos[best]


def lazy_noise_first(
    n: int,
    k: int,
    sigma: Fraction,
    bounds: tuple[int, int],
    units_at: Callable[[IntArray], IntArray],
    bits: ChaCha20Bits,
    *,
    min_scored: int,
) -> tuple[IntArray, TopNoise]:
    """TopK(clip(s) + z) over n slots with z drawn lazily: :func:`first_noise`, then
    :func:`lazy_select`. Returns the K positions (best first, ties to the lower position)
    and the drawn noise."""
    drawn = first_noise(n, k, sigma, bits, min_scored=min_scored, width=bounds[1] - bounds[0])
    return lazy_select(drawn, k, bounds, units_at, min_scored=min_scored), drawn
