"""How many key checks that failed the service pays for: a limit before any hash.

A well-formed key is checked with scrypt (the stored hashes must resist a stolen state
file), so every bad key costs the service tens of milliseconds of a core: a few bad keys
a second saturate a small machine, and valid requests wait behind them. The
:class:`FailedAuthLimit` keeps token buckets of *failed* checks, one per client address
and one over all clients; a check that would need the hash is refused (429, nothing
hashed, nothing spent) while the client's bucket, or the shared one, is empty. Keys this
process verified before are checked from memory without a hash and never refused, so an
attack slows down only new keys, never the requests of accounts already served.

Behind a reverse proxy every client has the proxy's address (uvicorn takes the client's
from the proxy's forwarding headers only for the proxies it is told to trust), so the
per-client bucket then becomes a second shared one.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ragprivacy._validation import check_positive_int
from ragprivacy.errors import ServiceStateError

__all__ = ["AuthThrottledError", "FailedAuthLimit"]


class AuthThrottledError(ServiceStateError):
    """Too many failed key checks lately, from this client or from all: this one was not
    made (no hash), and nothing was spent. ``retry_after``: seconds until it may be."""

    def __init__(self, retry_after: int) -> None:
        super().__init__("Too many failed authentications; retry later.")
        self.retry_after = retry_after


class _Bucket:
    __slots__ = ("level", "stamp")

    def __init__(self, level: float, stamp: float) -> None:
        self.level, self.stamp = level, stamp


class FailedAuthLimit:
    """Token buckets of failed key checks: ``per_client`` failures per minute from one
    address (also its burst) and ``overall`` per minute from all (thread-safe; the
    addresses remembered are bounded, the least recent forgotten first).

    >>> clock = [0.0]
    >>> limit = FailedAuthLimit(per_client=2, overall=10, clock=lambda: clock[0])
    >>> limit.check("a"); limit.failed("a"); limit.failed("a")
    >>> limit.check("a")
    Traceback (most recent call last):
    ...
    ragprivacy.service.throttle.AuthThrottledError: Too many failed authentications; retry later.
    >>> limit.check("b")  # another client is not held back
    >>> clock[0] = 30.0  # half a minute later: one failure's worth is back
    >>> limit.check("a")
    """

    MAX_CLIENTS = 65_536

    def __init__(
        self,
        *,
        per_client: int = 20,
        overall: int = 120,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client = check_positive_int("per_client", per_client)
        self.overall = check_positive_int("overall", overall)
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: OrderedDict[str, _Bucket] = OrderedDict()
        self._all = _Bucket(float(self.overall), clock())

    @staticmethod
    def _refill(bucket: _Bucket, size: int, now: float) -> None:
        bucket.level = min(float(size), bucket.level + (now - bucket.stamp) * size / 60.0)
        bucket.stamp = now

    def _client(self, client: str, now: float) -> _Bucket:
        bucket = self._clients.get(client)
        if bucket is None:
            bucket = self._clients[client] = _Bucket(float(self.per_client), now)
            while len(self._clients) > self.MAX_CLIENTS:
                self._clients.popitem(last=False)
        self._clients.move_to_end(client)
        self._refill(bucket, self.per_client, now)
        return bucket

    def check(self, client: str) -> None:
        """Before a hash: raise :class:`AuthThrottledError` if ``client`` (or everyone
        together) has no failed check left to spend."""
        with self._lock:
            now = self._clock()
            mine = self._client(client, now)
            self._refill(self._all, self.overall, now)
            wait = 0.0
            for bucket, size in ((mine, self.per_client), (self._all, self.overall)):
                if bucket.level < 1.0:
                    wait = max(wait, (1.0 - bucket.level) * 60.0 / size)
            if wait > 0:
                raise AuthThrottledError(max(1, math.ceil(wait)))

    def failed(self, client: str) -> None:
        """A key check of ``client`` failed after its hash: spend one from both buckets."""
        with self._lock:
            now = self._clock()
            mine = self._client(client, now)
            self._refill(self._all, self.overall, now)
            mine.level = max(0.0, mine.level - 1.0)
            self._all.level = max(0.0, self._all.level - 1.0)
