"""An audit window's query counter: an account's queries are its records in the ledger.

The collusion paper's rate limit r (§2.1) is enforced on what was *appended*: a query
spends only if its record r_q is in the ledger, and every record spends. So the counter
is not a second store that could disagree with the ledger — it is a scan of the ledger's
committed records (by any process that appends to the same ledger), kept incrementally.
An in-memory window counts over an in-memory :class:`~ragprivacy.audit.MerkleLog`; there
is no separate in-memory counter because a count that is not the ledger's could drift
from what the verifier counts (check ``account_policy``: at most r records an account).

:meth:`LedgerCounter.guard` is the check that runs inside the append, on the caught-up
ledger, so two writers (threads or processes) cannot both spend an account's last query.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from ragprivacy.audit.merkle import MerkleLog
from ragprivacy.audit.records import QueryRecord
from ragprivacy.errors import ConfigError

__all__ = ["LedgerCounter", "StaleCount"]


class StaleCount(Exception):
    """Another writer appended a record of the same account meanwhile: derive again."""


class LedgerCounter:
    """Records per account of one window's ledger, counted as the ledger is read.

    Only committed records are counted: a batch whose commit fails is never in the
    counts. Thread-safe.
    """

    def __init__(
        self, ledger: MerkleLog, accounts: Iterable[str], tenants: Iterable[str] = ()
    ) -> None:
        self.ledger = ledger
        self._count: dict[str, int] = dict.fromkeys(accounts, 0)
        # the positions of the records of ``tenants`` (the filtered ones, whose state is
        # a replay of their records: ragprivacy.audit.filters)
        self._positions: dict[str, list[int]] = {t: [] for t in tenants}
        self._scanned = 0
        self._last_ts = 0
        self._lock = threading.Lock()  # _count, _scanned, _last_ts

    def used(self, account: str, *, wait: bool = True) -> int:
        """Committed records of ``account``; ``wait=False`` does not wait for a commit in
        flight to catch up with other processes (the guard counts again on the caught-up
        ledger)."""
        self.refresh(wait=wait)
        with self._lock:
            return self._count.get(account, 0)

    def refresh(self, *, wait: bool = True) -> None:
        """Count what other writers committed to the ledger meanwhile."""
        self.ledger.refresh(wait=wait)  # outside the lock: a guard takes it inside
        with self._lock:
            self._scan_to(self.ledger.durable_size)

    @property
    def last_ts(self) -> int:
        """The timestamp of the last committed record counted (0 before any)."""
        with self._lock:
            return self._last_ts

    def _scan_to(self, size: int) -> None:
        """Count the committed records [scanned, size); under ``_lock``."""
        for i in range(self._scanned, size):
            rec = QueryRecord.from_bytes(self.ledger.leaf(i))
            self._count[rec.account] = self._count.get(rec.account, 0) + 1
            self._last_ts = rec.ts
            if rec.tenant in self._positions:
                self._positions[rec.tenant].append(i)
        self._scanned = max(self._scanned, size)

    def positions(self, tenant: str, start: int = 0) -> tuple[list[int], int]:
        """The committed records of a tracked ``tenant`` from its ``start``-th on, by
        ledger position, and how many it has in all, as far as the last :meth:`refresh`
        read the ledger (only the new ones are copied: this runs on every answer)."""
        with self._lock:
            held = self._positions[tenant]
            return held[start:], len(held)

    def guard(
        self,
        account: str,
        expected: int,
        ts: int,
        *,
        restamp: bool,
        check_limit: Callable[[str, int], None],
        tenant: tuple[str, int] | None = None,
    ) -> Callable[[MerkleLog], None]:
        """The check run inside the append, on the caught-up ledger: ``account`` has
        exactly the ``expected`` records its query number was derived from, is under its
        rate limit (``check_limit``), and ``ts`` is not before the last record's. A stale count,
        or a provider-stamped ts (``restamp``) that another writer overtook, raises
        :class:`StaleCount`: the caller derives the query again. ``tenant`` = (a tracked
        tenant, its record count the answer was screened on): another record of that
        tenant appended meanwhile (its charges not in the screening) is stale too."""

        def check(log: MerkleLog) -> None:
            # the append just caught the log up: count what is committed, then the
            # earlier appends of this batch (not yet committed, so not in the counts)
            with self._lock:
                self._scan_to(log.durable_size)
                count, last_ts = self._count.get(account, 0), self._last_ts
                screened = len(self._positions[tenant[0]]) if tenant is not None else 0
            for i in range(log.durable_size, log.size):
                rec = QueryRecord.from_bytes(log.leaf(i))
                count += rec.account == account
                screened += tenant is not None and rec.tenant == tenant[0]
                last_ts = rec.ts
            if count != expected or (tenant is not None and screened != tenant[1]):
                raise StaleCount
            check_limit(account, expected)
            if log.size and ts < last_ts:
                if restamp:
                    raise StaleCount
                raise ConfigError(
                    f"Timestamps must not decrease along the ledger: {ts} follows {last_ts}."
                )

        return check
