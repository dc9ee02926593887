"""Resource guards: estimate the memory and time of a job's big knobs before it starts,
and refuse (unless forced) one this machine cannot finish.

Without them ``collusion sweep --trials 1000000000`` is killed by the kernel after a
minute with no message, and a corpus of 10⁸ synthetic documents runs for days. Estimates
are linear cost models whose constants were measured on a 2-core machine (docs/scale.md,
"The resource guards' cost models"); they are meant to be right within a small factor,
which is all a refusal needs.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from ragprivacy.errors import ConfigError

__all__ = ["MAX_SECONDS", "ResourceEstimate", "available_memory", "check_resources"]

MAX_SECONDS = 3600.0
"""Jobs estimated to run longer than this (one hour) ask for ``--force``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceEstimate:
    """About how much a job needs.

    Attributes:
        memory: peak resident memory, bytes.
        seconds: wall time on this kind of machine.
    """

    memory: float
    seconds: float

    def __post_init__(self) -> None:
        if not (self.memory >= 0 and self.seconds >= 0):
            raise ConfigError(
                f"A resource estimate must be non-negative; got memory={self.memory!r}, "
                f"seconds={self.seconds!r}."
            )

    def then(self, other: ResourceEstimate) -> ResourceEstimate:
        """The two jobs one after the other: the larger peak, the summed time."""
        return ResourceEstimate(
            memory=max(self.memory, other.memory), seconds=self.seconds + other.seconds
        )


def available_memory() -> int | None:
    """Bytes of memory available to a new job (``MemAvailable``), or None if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{max(n, 0) / 1e3:.3g} kB"


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.3g} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.3g} h"
    if seconds >= 60:
        return f"{seconds / 60:.3g} min"
    return f"{math.ceil(seconds)} s"


def check_resources(
    estimate: ResourceEstimate,
    *,
    what: str,
    knob: str,
    force: bool = False,
    memory_available: int | None = None,
) -> None:
    """Refuse a job that would not fit in memory or would run over :data:`MAX_SECONDS`.

    Args:
        estimate: what the job needs.
        what: the job, for the message ("collusion sweep of 15 cells x 10^9 trials").
        knob: the setting to lower, for the message ("--trials").
        force: run anyway (the caller's ``--force``).
        memory_available: bytes available (default: :func:`available_memory`).

    Raises:
        ConfigError: the job needs more memory than is available, or more than an hour;
            the message gives both estimates and says how to go on.
    """
    if force:
        return
    free = available_memory() if memory_available is None else memory_available
    too_big = free is not None and estimate.memory > free
    if not (too_big or estimate.seconds > MAX_SECONDS):
        return
    have = f" ({_bytes(free)} available)" if free is not None else ""
    raise ConfigError(
        f"{what} would need about {_bytes(estimate.memory)} of memory{have} and about "
        f"{_duration(estimate.seconds)}; lower {knob}, or pass --force to run it anyway."
    )
