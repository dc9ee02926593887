"""What one client may take of a worker: failed key checks, and requests at once.

**Failed key checks.**
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

**Requests at once.** Answers run on the worker's thread pool; an account that sends a
few dozen slow requests at once (long generations) would hold every thread, and every
other account's requests and the public audit endpoints would wait behind them.
:class:`InFlightLimit` admits at most ``limit`` requests of one account at a time per
worker; one more is refused at once (429, before it reads anything, so it spends
nothing) and the account may send it again when one of its own has finished. Several
accounts together have at most ``total`` private requests in progress; the others wait
their turn in arrival order on the event loop, holding no thread (the app's queue), and
the worker's thread pool is sized ``total`` + :data:`RESERVED_THREADS`, so the public
audit endpoints and the health checks always find a thread however many accounts are
busy.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ragprivacy._validation import check_positive_int
from ragprivacy.errors import ServiceStateError

__all__ = [
    "RESERVED_THREADS",
    "AccountBusyError",
    "AuthThrottledError",
    "FailedAuthLimit",
    "InFlightLimit",
]


class AuthThrottledError(ServiceStateError):
    """Too many failed key checks lately, from this client or from all: this one was not
    made (no hash), and nothing was spent. ``retry_after``: seconds until it may be."""

    def __init__(self, retry_after: int) -> None:
        super().__init__("Too many failed authentications; retry later.")
        self.retry_after = retry_after


class AccountBusyError(ServiceStateError):
    """The account has as many requests in progress on this worker as it may; this one
    was refused before it read anything (nothing spent)."""


#: worker threads kept free of private requests, for the public and operations routes
RESERVED_THREADS = 8


class InFlightLimit:
    """At most ``limit`` requests of one account in progress at a time (thread-safe);
    ``total``: how many private requests of all accounts the app lets run at once (its
    queue, :func:`ragprivacy.service.app.create_app`).

    >>> limit = InFlightLimit(1)
    >>> with limit.slot("a"):
    ...     with limit.slot("b"):  # another account is not held back
    ...         pass
    ...     limit.slot("a").__enter__()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ragprivacy.service.throttle.AccountBusyError: This account has 1 request(s) in ...
    >>> with limit.slot("a"):  # the first one finished
    ...     pass
    """

    def __init__(self, limit: int = 8, total: int = 32) -> None:
        self.limit = check_positive_int("limit", limit)
        self.total = check_positive_int("total", total)
        self._lock = threading.Lock()
        self._busy: dict[str, int] = {}

    @contextmanager
    def slot(self, account: str) -> Iterator[None]:
        """Hold one of ``account``'s slots for the ``with`` block, or raise
        :class:`AccountBusyError` when it has none free."""
        with self._lock:
            if self._busy.get(account, 0) >= self.limit:
                raise AccountBusyError(
                    f"This account has {self.limit} request(s) in progress (the most it "
                    "may); send this one when one has finished."
                )
            self._busy[account] = self._busy.get(account, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._busy[account] - 1
                if left:
                    self._busy[account] = left
                else:
                    del self._busy[account]

    def in_progress(self, account: str) -> int:
        """The account's requests in progress now."""
        with self._lock:
            return self._busy.get(account, 0)


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
