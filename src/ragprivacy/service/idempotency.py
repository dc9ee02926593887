"""Idempotency keys: a request sent again with the same ``Idempotency-Key`` (and the same
body) gets the first answer again, and is charged once.

A client that times out does not know whether its request was answered — and charged.
Retrying it blind pays again for an answer it may never see (the official OpenAI client
retries twice by default). With a key, the service keeps each answered request's
response under (account, key) in the state, shared by every worker and replica:

* the first request with a key is answered as usual, its response stored with a
  fingerprint of its route and body;
* the same key and body again — from any worker, for :data:`TTL_S` seconds — gets that
  response back, nothing spent; a charged failure (502, its receipt with it) is replayed
  too: it was paid for once;
* the same key with another body is refused (400): a key names one request;
* while the first is still running, the same key is refused with 409 and
  ``Retry-After: 1`` (nothing spent), so two copies never both run;
* a request refused or failed before anything was spent (4xx, 429, a 503 of a generator
  never reached) keeps nothing, so its retry runs afresh.

A request whose worker died mid-way leaves its key pending; after
:data:`PENDING_S` the key may run again (and, if the first had appended its record,
be charged again). Without a key every request is a new one and is charged as such —
a plain retry pays again. The response stored under a key holds what the account was
sent (documents included); it lives in the state, never in a log.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from ragprivacy.errors import ChargedFailureError, ConfigError, ServiceStateError

__all__ = [
    "PENDING_S",
    "TTL_S",
    "Idempotency",
    "IdempotencyInProgressError",
    "IdempotencyKeyReusedError",
    "check_key",
    "fingerprint",
]

#: how long an answered key is kept (seconds)
TTL_S = 24 * 3600
#: how long a key may stay pending before another request may take it over (seconds)
PENDING_S = 600
#: printable ASCII without spaces, 1–255 characters (what clients send: UUIDs, tokens)
_KEY = re.compile(r"[\x21-\x7e]{1,255}")

T = TypeVar("T")


class IdempotencyInProgressError(ServiceStateError):
    """A request with this key is still being answered; nothing was spent."""


class IdempotencyKeyReusedError(ConfigError):
    """The key was used before with another request body."""


def check_key(key: str) -> str:
    """``key`` if it is 1–255 printable ASCII characters without spaces, else a
    :class:`~ragprivacy.errors.ConfigError` saying so."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ConfigError(
            "The Idempotency-Key header must be 1-255 printable ASCII characters without "
            "spaces (a UUID, for example)."
        )
    return key


def fingerprint(route: str, body: Mapping[str, Any]) -> str:
    """SHA-256 over the route and the request body as parsed (canonical JSON)."""
    text = json.dumps([route, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _Store(Protocol):
    """What :class:`Idempotency` needs of the state (``ServiceState`` provides it)."""

    def begin_idempotent(
        self, account: str, key: str, fingerprint: str, now: float
    ) -> tuple[str, str | None]: ...

    def finish_idempotent(self, account: str, key: str, response: str) -> None: ...

    def abandon_idempotent(self, account: str, key: str) -> None: ...


class Idempotency:
    """Runs requests under their idempotency keys over a state (module docstring)."""

    def __init__(self, store: _Store) -> None:
        self.store = store

    def run(
        self,
        account: str,
        key: str | None,
        route: str,
        body: Mapping[str, Any],
        compute: Callable[[], T],
        dump: Callable[[T], Any],
        load: Callable[[Any], T],
    ) -> T:
        """``compute()`` once per (account, key); the stored response (``load`` of what
        ``dump`` kept) for a repeat. Without a key: ``compute()``."""
        if key is None:
            return compute()
        key = check_key(key)
        status, stored = self.store.begin_idempotent(
            account, key, fingerprint(route, body), time.time()
        )
        if status == "reused":
            raise IdempotencyKeyReusedError(
                "This Idempotency-Key was used with another request; send a new key for a "
                "new request."
            )
        if status == "pending":
            raise IdempotencyInProgressError(
                "A request with this Idempotency-Key is still being answered; nothing was "
                "spent. Retry shortly to get its answer."
            )
        if status == "done":
            assert stored is not None
            kept = json.loads(stored)
            if "failed" in kept:  # paid for once: the same failure, with its receipt
                raise ChargedFailureError(kept["failed"], receipt=kept.get("receipt"))
            return load(kept["ok"])
        try:
            out = compute()
        except ChargedFailureError as exc:
            failed = {"failed": str(exc).splitlines()[0], "receipt": exc.receipt}
            self.store.finish_idempotent(account, key, json.dumps(failed))
            raise
        except BaseException:
            self.store.abandon_idempotent(account, key)  # nothing spent: run it again
            raise
        self.store.finish_idempotent(account, key, json.dumps({"ok": dump(out)}))
        return out
