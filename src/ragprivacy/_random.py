"""Normalisation of ``rng`` arguments and per-trial streams (no global seeding)."""

from __future__ import annotations

import numpy as np

from ragprivacy.errors import ConfigError

__all__ = ["RngLike", "make_rng", "spawn_rngs"]

RngLike = np.random.Generator | int | np.random.SeedSequence | None


def make_rng(rng: RngLike = None) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` for ``rng``.

    ``None`` gives fresh OS entropy, an ``int`` or ``SeedSequence`` seeds a new PCG64
    stream, and a ``Generator`` is returned as is (so callers share its state).

    >>> bool(make_rng(7).integers(100) == make_rng(7).integers(100))
    True
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, np.random.SeedSequence):
        return np.random.default_rng(rng)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if rng < 0:
            raise ConfigError(f"The 'rng' seed must be a non-negative integer; got {rng}.")
        return np.random.default_rng(int(rng))
    raise ConfigError(
        f"The 'rng' parameter must be None, an int seed or a numpy Generator; "
        f"got {type(rng).__name__}."
    )


def spawn_rngs(seed: int | np.random.SeedSequence, n: int) -> list[np.random.Generator]:
    """Independent streams for ``n`` trials, from one root seed (``SeedSequence.spawn``)."""
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return [np.random.default_rng(child) for child in root.spawn(n)]
