"""How busy the machine is, for the few tests that bound how long something takes."""

from __future__ import annotations

import os


def slowdown() -> float:
    """How many times slower than on an idle machine work may run now: the last minute's
    load average per core, at least 1 (1 where the platform does not report it).

    A test that bounds a duration measured on an idle machine multiplies the bound by
    this, read after the timed work: the bound still catches a regression of the code,
    and a machine busy with other work (other test processes, pytest-xdist's workers)
    does not fail it.
    """
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))
