"""uvicorn's HTTP/1.1 protocol with a header-read timeout (``serve --header-timeout``).

uvicorn bounds the wait for a keep-alive connection's *next* request
(``timeout_keep_alive``), but not for the first request's head: a client that opens a
connection and sends its headers a byte at a time holds it for as long as it likes, and
a few hundred such clients hold every connection a worker will take. This protocol
closes a connection whose first request head is not complete within
:attr:`HeaderTimeoutH11.header_timeout` seconds (nothing was read by the app, so nothing
is spent); later requests on the connection are bounded by uvicorn's keep-alive timer.

It subclasses uvicorn's own ``H11Protocol`` and uses two of its attributes (``loop`` and
``cycle``, the request in progress), present from the oldest uvicorn the lock allows to
the newest.
"""

from __future__ import annotations

import asyncio
import os

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HeaderTimeoutH11"]


class HeaderTimeoutH11(H11Protocol):
    """H11Protocol that closes a connection whose first request head is late."""

    #: seconds a new connection has to send its first request head (the worker reads
    #: ``RAGPRIVACY_HEADER_TIMEOUT``, which ``serve`` sets)
    header_timeout = float(os.environ.get("RAGPRIVACY_HEADER_TIMEOUT", "10"))
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_late)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self.cycle is not None:  # the head is in
            self._head_timer.cancel()
            self._head_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _head_late(self) -> None:
        self._head_timer = None
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()
