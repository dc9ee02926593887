"""The exponential mechanism over a histogram (token voting).

Private-RAG Alg. 9 (expoMech): choose j with probability ∝ exp(ε·u_j / (2Δ)), where u_j is
the vote count of token j. Neighbouring relation: add/remove one document, which changes
one voter's vote, so each count moves by at most Δ = 1 (Private-RAG App. F.1). Guarantee:
ε-DP (McSherry & Talwar 2007).

The secure path samples *exactly* from these probabilities: utilities are grouped into
levels, the level is chosen by inverting the cumulative distribution with a uniform W
whose bits come from ChaCha20 and whose comparisons with the (irrational) boundaries are
decided with certified float bounds, refined exactly when needed; the item inside a
level is a uniform integer by rejection. The simulation path uses the Gumbel-max trick
with numpy (``simulation=True``, keyword ``rng``).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.dp._exact import PREFIX_BITS, LazyUniform, exp_neg_bounds
from ragprivacy.dp.randomness import ChaCha20Bits, simulation_rng
from ragprivacy.errors import ConfigError

__all__ = ["exponential_mechanism", "exponential_mechanism_probabilities"]

_S = 2.0**-PREFIX_BITS


def _utilities(utilities: FloatArray) -> np.ndarray:
    u = np.asarray(utilities, dtype=np.float64)
    if u.ndim != 1 or u.size == 0 or not np.all(np.isfinite(u)):
        raise ConfigError(
            f"Utilities must be a non-empty 1-D array of finite numbers; got shape {u.shape}."
        )
    return u


def exponential_mechanism_probabilities(
    utilities: FloatArray, epsilon: float, *, sensitivity: float = 1.0
) -> FloatArray:
    """The exponential mechanism's output distribution, p_j ∝ exp(ε u_j/(2Δ)) (float64)."""
    u = _utilities(utilities)
    epsilon = check_positive("epsilon", epsilon)
    sensitivity = check_positive("sensitivity", sensitivity)
    logits = epsilon * (u - u.max()) / (2 * sensitivity)
    w = np.exp(logits)
    return np.asarray(w / w.sum())


def _boundaries(
    x: list[Fraction], counts: list[int], bits: int
) -> tuple[list[Fraction], list[Fraction]]:
    """Bounds on the cumulative level boundaries B_l = C_l / T with weights c_l·e^{−x_l}."""
    lo_w, hi_w = [], []
    for xl, cl in zip(x, counts):
        a, b = exp_neg_bounds(xl, bits)
        lo_w.append(a * cl)
        hi_w.append(b * cl)
    total_lo, total_hi = sum(lo_w), sum(hi_w)
    b_lo, b_hi = [], []
    c_lo = c_hi = Fraction(0)
    for i in range(len(x)):
        c_lo += lo_w[i]
        c_hi += hi_w[i]
        if i == len(x) - 1:
            b_lo.append(Fraction(1))
            b_hi.append(Fraction(1))
        else:  # B = C/(C + R) is increasing in C and decreasing in R = T − C
            b_lo.append(c_lo / (c_lo + (total_hi - c_hi)))
            b_hi.append(c_hi / (c_hi + (total_lo - c_lo)))
    return b_lo, b_hi


def _level_exact(w: LazyUniform, x: list[Fraction], counts: list[int]) -> int:
    while True:
        b_lo, b_hi = _boundaries(x, counts, w.bits + 8)
        lo, hi = w.interval()
        for level in range(len(x)):
            if hi <= b_lo[level]:
                if level == 0 or lo >= b_hi[level - 1]:
                    return level
                break
        w.refine()


def _uniform_below(bits: ChaCha20Bits, n: np.ndarray) -> np.ndarray:
    """Exact uniform integers in [0, n_i) for each entry (rejection on 64-bit words)."""
    out = np.zeros(n.shape, dtype=np.int64)
    todo = np.flatnonzero(n > 1)
    while todo.size:
        m = n[todo].astype(np.uint64)
        words = bits.uint64(todo.size)
        limit = (np.uint64(2**64 - 1) // m) * m  # accept words < limit (unbiased)
        ok = words < limit
        out[todo[ok]] = (words[ok] % m[ok]).astype(np.int64)
        todo = todo[~ok]
    return out


def _secure(
    u: np.ndarray, epsilon: float, sensitivity: float, size: int, bits: ChaCha20Bits
) -> IntArray:
    levels, inverse, counts = np.unique(u, return_inverse=True, return_counts=True)
    levels, counts = levels[::-1], counts[::-1]  # highest utility first
    inverse = len(levels) - 1 - inverse
    top = Fraction(float(levels[0]))
    scale = Fraction(epsilon) / (2 * Fraction(sensitivity))
    x = [scale * (top - Fraction(float(v))) for v in levels]
    cnt = [int(c) for c in counts]
    b_lo, b_hi = _boundaries(x, cnt, PREFIX_BITS + 16)
    # Conservative float copies of the bounds (one ulp outward).
    lo_f = np.nextafter(np.array([float(b) for b in b_lo]), -np.inf)
    hi_f = np.nextafter(np.array([float(b) for b in b_hi]), np.inf)
    lo_f[-1] = hi_f[-1] = 1.0
    prefix = (bits.uint64(size) >> np.uint64(64 - PREFIX_BITS)).astype(np.float64)
    w_lo = prefix * _S
    w_hi = w_lo + _S
    level = np.searchsorted(lo_f, w_hi, side="left")
    prev_hi = np.where(level > 0, hi_f[np.maximum(level - 1, 0)], 0.0)
    decided = (level < len(levels)) & (w_lo >= prev_hi)
    level = np.minimum(level, len(levels) - 1)
    extra = bits.fork("extra")
    for i in np.flatnonzero(~decided):
        level[i] = _level_exact(LazyUniform(int(prefix[i]), extra), x, cnt)
    members = [np.flatnonzero(inverse == lv) for lv in range(len(levels))]
    within = _uniform_below(bits, counts[level].astype(np.int64))
    return np.array([members[lv][j] for lv, j in zip(level, within)], dtype=np.int64)


def exponential_mechanism(
    utilities: FloatArray,
    epsilon: float,
    *,
    sensitivity: float = 1.0,
    size: int | None = None,
    simulation: bool = False,
    rng: RngLike = None,
    bits: ChaCha20Bits | None = None,
) -> int | IntArray:
    """Sample an index j with probability ∝ exp(ε u_j / (2Δ)) (Private-RAG Alg. 9).

    Neighbouring relation: add/remove one document; ``sensitivity`` Δ bounds the change of
    every utility (1 for vote counts). Guarantee: ε-DP per draw (``PureDpEvent(ε)``).

    Args:
        utilities: one utility per candidate (e.g. the vote histogram).
        epsilon: ε_Expo.
        sensitivity: Δ.
        size: ``None`` for one draw (returns an int) or a number of independent draws.
        simulation: use numpy's Gumbel-max (not secure); takes ``rng``.
        rng: simulation mode only.
        bits: secure mode only (``None`` = fresh OS entropy).

    >>> exponential_mechanism([0, 5, 1], 50.0, bits=ChaCha20Bits.derived(bytes(32), "em"))
    1
    """
    u = _utilities(utilities)
    epsilon = check_positive("epsilon", epsilon)
    sensitivity = check_positive("sensitivity", sensitivity)
    n = 1 if size is None else check_positive_int("size", size)
    if simulation:
        if bits is not None:
            raise ConfigError("Simulation mode draws from 'rng'; do not pass 'bits'.")
        logits = epsilon * u / (2 * sensitivity)
        g = make_rng(rng).gumbel(size=(n, u.size))
        out = np.argmax(logits + g, axis=1).astype(np.int64)
    else:
        simulation_rng(rng, simulation=False)  # refuses a seed
        if bits is not None and not isinstance(bits, ChaCha20Bits):
            raise ConfigError(f"'bits' must be a ChaCha20Bits; got {type(bits).__name__}.")
        out = _secure(u, epsilon, sensitivity, n, bits or ChaCha20Bits.from_entropy())
    return int(out[0]) if size is None else out
