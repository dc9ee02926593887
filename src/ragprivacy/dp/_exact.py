"""Exact comparisons of a lazily drawn uniform W ∈ (0, 1) against e^{−x} for rational x.

The secure samplers decide every random choice as "is W < e^{−x}?" where x is an exact
rational. A vectorised fast path decides almost all comparisons in float64 with a
certified error margin; the rare remaining ones come here, where
e^{−x} is bracketed with :mod:`decimal` (its ``exp`` is correctly rounded) and W is refined
with further random bits until the comparison is decided. The outcome is exactly that of
an infinitely precise uniform, so the samplers' distributions are exact.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

from ragprivacy.dp.randomness import ChaCha20Bits

__all__ = ["ABS_TOL", "PREFIX_BITS", "LazyUniform", "exp_neg_bounds"]

PREFIX_BITS = 53
# Absolute slack of the float fast path: covers every probability that underflows or is
# subnormal in float64 (relative slacks are in samplers.py).
ABS_TOL = 2.0**-1020


def exp_neg_bounds(x: Fraction, bits: int) -> tuple[Fraction, Fraction]:
    """Rationals lo ≤ e^{−x} ≤ hi with hi − lo < 2^{−bits}·e^{−x}·4 (x ≥ 0)."""
    digits = int(bits * 0.30103 + math.log10(4 * (math.ceil(x) + 1))) + 12
    with decimal.localcontext() as ctx:
        ctx.prec = digits
        ctx.Emin = decimal.MIN_EMIN
        ctx.Emax = decimal.MAX_EMAX
        ctx.rounding = decimal.ROUND_HALF_EVEN
        xd = decimal.Decimal(x.numerator) / decimal.Decimal(x.denominator)
        e = (-xd).exp()
    ef = Fraction(e)
    # |xd − x| ≤ x·10^{1−prec}; e^{−xd} is correctly rounded (relative error ≤ 10^{1−prec}).
    # Together the relative error is below (2x + 2)·10^{1−prec}; double it for safety.
    rel = Fraction(4 * (math.ceil(x) + 1), 10 ** (digits - 1))
    return ef * (1 - rel), ef * (1 + rel)


class LazyUniform:
    """A uniform W ∈ (0, 1) known through a binary prefix, refined on demand.

    Starts from the ``PREFIX_BITS``-bit prefix the fast path drew; extra bits come 64 at a
    time from ``extra`` (a separate stream, so that the fast path's bulk draws do not
    depend on how many comparisons needed refining).
    """

    __slots__ = ("bits", "extra", "prefix")

    def __init__(self, prefix: int, extra: ChaCha20Bits) -> None:
        self.prefix = int(prefix)
        self.bits = PREFIX_BITS
        self.extra = extra

    def interval(self) -> tuple[Fraction, Fraction]:
        """The current bracket [lo, hi) known to contain W."""
        return Fraction(self.prefix, 1 << self.bits), Fraction(self.prefix + 1, 1 << self.bits)

    def refine(self) -> None:
        """Append 64 more random bits to W's prefix."""
        word = int(self.extra.uint64(1)[0])
        self.prefix = (self.prefix << 64) | word
        self.bits += 64

    def less_than_exp(self, x: Fraction) -> bool:
        """Exactly decide W < e^{−x} (x ≥ 0), refining W as needed."""
        if x <= 0:
            return True
        while True:
            lo, hi = self.interval()
            p_lo, p_hi = exp_neg_bounds(x, self.bits + 8)
            if hi <= p_lo:
                return True
            if lo >= p_hi:
                return False
            self.refine()
