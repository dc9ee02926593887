"""The sensitivity Δ of a score vector, from the public range its scores are clipped to.

Neighbouring relation: replace the document held by one slot of the index (the score
vector is indexed by slot). Replacing one document moves one coordinate of the score
vector by at most the width of the interval the scores live in, so clipping every score
to a public ``score_range = (low, high)`` (per-coordinate post-processing of each
document's own score) makes Δ = high − low hold for *any* input. Without a range there is
no clipping and Δ is the caller's claim, taken on trust (the collusion paper's "Δ ≤ 1 for
unit-norm embeddings", §2.2, holds only for scores in a unit-width interval).

:func:`score_sensitivity` is the one place that validates the pair (range, Δ) for
:class:`~ragprivacy.dp.mechanisms.GaussianNoisyTopK` and the systems built on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ragprivacy._validation import check_positive
from ragprivacy.errors import ConfigError

__all__ = ["ScoreSensitivity", "score_sensitivity"]


@dataclass(frozen=True, slots=True)
class ScoreSensitivity:
    """A validated ``score_range`` (``None``: no clipping) and the L2 ``sensitivity`` Δ."""

    score_range: tuple[float, float] | None
    sensitivity: float

    @property
    def source(self) -> str:
        """``"score_range"`` when Δ is enforced by clipping, ``"trusted"`` when it is claimed."""
        return "trusted" if self.score_range is None else "score_range"


def score_sensitivity(
    score_range: tuple[float, float] | None,
    sensitivity: float | None = None,
    *,
    default_range: tuple[float, float] | None = None,
) -> ScoreSensitivity:
    """Validate a score range and resolve the sensitivity Δ it implies (replace-one-slot).

    Args:
        score_range: public (low, high) every score is clipped into, or ``None`` for no
            clipping.
        sensitivity: Δ. With a range it defaults to the width high − low and may not be
            smaller; without one it is required and taken on trust.
        default_range: the range used when both ``score_range`` and ``sensitivity`` are
            ``None`` (``None``: refuse, asking for one of them).

    >>> score_sensitivity((0.0, 1.0))
    ScoreSensitivity(score_range=(0.0, 1.0), sensitivity=1.0)
    >>> score_sensitivity(None, 1.0).source
    'trusted'
    """
    if score_range is None:
        if sensitivity is not None:
            return ScoreSensitivity(None, check_positive("sensitivity", sensitivity))
        if default_range is None:
            raise ConfigError(
                "Give 'score_range' (scores are clipped into it and Δ = high − low) or, "
                "without clipping, an explicit 'sensitivity' taken on trust (1.0 is the "
                "collusion paper's statement); got neither."
            )
        score_range = default_range
    try:
        lo, hi = (float(v) for v in score_range)
    except (TypeError, ValueError):
        raise ConfigError(
            f"The 'score_range' parameter must be a pair (low, high); got {score_range!r}."
        ) from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigError(
            f"The 'score_range' parameter must be finite with low < high; got {score_range!r}."
        )
    width = hi - lo
    if sensitivity is None:
        return ScoreSensitivity((lo, hi), check_positive("sensitivity", width))
    delta = check_positive("sensitivity", sensitivity)
    if delta < width * (1 - 1e-12):
        raise ConfigError(
            f"The 'sensitivity' parameter must be at least the width of score_range "
            f"{(lo, hi)} (= {width:g}) for replace-one-slot neighbours; got {sensitivity!r}. "
            f"Narrow score_range (e.g. (0.0, 1.0) for Δ = 1) or raise sensitivity."
        )
    return ScoreSensitivity((lo, hi), delta)
