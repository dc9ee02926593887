"""Windows on a schedule: ``serve --rotate-every 1d`` closes the open window once it is a
period old, exports its auditor package and opens the next, by itself.

Without a schedule every account is locked out at the end of its budget until an admin
runs ``window open``. :class:`WindowSchedule` runs in the ``serve`` process (one thread,
beside the workers): it opens a window if none is open, and rotates the open one when its
age reaches the period (:func:`ragprivacy.service.rotate_window`: close, export, open —
the next opens only once the package is written). Its clock is each window's own
``published_at``, so a restart keeps the rhythm, and a refused rotation (another replica
rotated first, a full disk) is logged and tried again a little later; replicas that share
a PostgreSQL state should run the schedule on one of them.

:func:`seconds_until_rotation` is what a 429 for a spent budget puts in ``Retry-After``
when the schedule is known (instead of an hour): the budget renews with the next window.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ragprivacy.errors import ConfigError, RagPrivacyError
from ragprivacy.service.provider import open_window, rotate_window
from ragprivacy.service.state import ServiceState

__all__ = ["WindowSchedule", "parse_period", "seconds_until_rotation"]

_log = logging.getLogger("ragprivacy.service")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PERIOD = re.compile(r"(\d+)([smhd])")
#: the shortest period accepted: a window must hold enough queries to be worth auditing
MIN_PERIOD_S = 60
#: how long a refused rotation waits before it is tried again
RETRY_S = 30.0


def parse_period(text: str) -> int:
    """``"1d"``, ``"6h"``, ``"30m"``, ``"90s"`` → seconds (at least a minute)."""
    m = _PERIOD.fullmatch(str(text).strip())
    if m is None:
        raise ConfigError(
            f"A window period is a whole number and a unit (s, m, h or d), e.g. 1d or 6h; "
            f"got {text!r}."
        )
    seconds = int(m.group(1)) * _UNITS[m.group(2)]
    if seconds < MIN_PERIOD_S:
        raise ConfigError(f"A window period must be at least 1m; got {text!r}.")
    return seconds


def seconds_until_rotation(opened_at_ns: int, period_s: int, now: float | None = None) -> int:
    """Whole seconds until a window opened at ``opened_at_ns`` is a period old (≥ 1)."""
    now = time.time() if now is None else now
    return max(1, int(opened_at_ns / 1e9 + period_s - now + 0.999))


class WindowSchedule:
    """Rotates the state's window every ``period_s`` seconds in a background thread.

    ``state_factory`` opens the state (the thread holds its own connection);
    ``export_to``: where each closed window's auditor package goes (``DIR/<window id>``)."""

    def __init__(
        self,
        state_factory: Callable[[], ServiceState],
        period_s: int,
        export_to: str | Path | None = None,
    ) -> None:
        self.state_factory = state_factory
        self.period_s = int(period_s)
        self.export_to = None if export_to is None else Path(export_to)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rotations = 0

    def step(self) -> float:
        """Open or rotate if due; the seconds to wait before the next step."""
        state = self.state_factory()
        try:
            open_ = state.open_windows()
            if not open_:
                window = open_window(state)
                _log.info("window %s opened (schedule)", window.window_id)
                return float(self.period_s)
            opened = int(open_[0].commitments["published_at"])
            wait = seconds_until_rotation(opened, self.period_s)
            if opened / 1e9 + self.period_s > time.time():
                return float(wait)
            closed, package, window = rotate_window(state, self.export_to)
            self.rotations += 1
            _log.info(
                "window %s closed, %s opened (schedule)%s",
                closed.window_id if closed else None,
                window.window_id,
                f"; auditor package in {package}" if package else "",
            )
            return float(self.period_s)
        finally:
            state.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.step()
            except RagPrivacyError as exc:  # another replica rotated, a refusal: later
                _log.warning("scheduled rotation refused: %s", str(exc).splitlines()[0])
                wait = RETRY_S
            except Exception as exc:  # never the message: it may name paths or data
                _log.error("scheduled rotation failed (%s)", type(exc).__name__)
                wait = RETRY_S
            self._stop.wait(min(wait, 3600.0))

    def start(self) -> WindowSchedule:
        self._thread = threading.Thread(target=self._run, name="window-schedule", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
