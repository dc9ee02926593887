"""The service: a multi-tenant private RAG provider that an auditor verifies from outside.

Importable without HTTP: :class:`ServiceState` (the durable state: a directory, or a
PostgreSQL database that replicas share, behind a :class:`StateBackend`),
:class:`ServiceProvider` (the open window's private answers, built on the one audited
provider core of :mod:`ragprivacy.audit`), :func:`open_window` / :func:`close_window` /
:func:`export_auditor` (the admin's window steps), :class:`Client` (an account's HTTP client
that keeps its receipts) and :func:`fetch_window` (a verifier's view of a running
service); voting tenants (DP-voted answers only) are :class:`VotingTenants`. The HTTP
app is :func:`ragprivacy.service.app.create_app` (the ``service`` extra): thin routes over
:class:`ragprivacy.service.serving.Serving`, which holds what each route does, with a
request and a response model per route in :mod:`ragprivacy.service.protocol`. A valid
request that the service's state refuses (:class:`AuthError`, :class:`WindowClosedError`,
…) raises a :class:`ragprivacy.errors.ServiceStateError`, not an input error. See
docs/service.md.
"""

from __future__ import annotations

from typing import Any

from ragprivacy.service.backend import (
    PgvectorTenantVectors,
    PostgresBackend,
    SqliteBackend,
    StateBackend,
)
from ragprivacy.service.canary import run_canary_audit, setup_canary_audit
from ragprivacy.service.client import Client, load_receipts, load_unanswered
from ragprivacy.service.demo import run_service_demo
from ragprivacy.service.idempotency import (
    Idempotency,
    IdempotencyInProgressError,
    IdempotencyKeyReusedError,
)
from ragprivacy.service.keys import ApiKey, new_key, parse_key
from ragprivacy.service.provider import (
    ServedAnswer,
    ServiceProvider,
    WindowClosedError,
    audit_window,
    close_window,
    export_auditor,
    open_window,
    rotate_window,
    window_status,
)
from ragprivacy.service.remote import fetch_window
from ragprivacy.service.schedule import WindowSchedule, parse_period, seconds_until_rotation
from ragprivacy.service.state import (
    MODES,
    VOTING_MODES,
    AuthError,
    ServiceState,
    StateWitnessStore,
    Window,
)
from ragprivacy.service.throttle import (
    AccountBusyError,
    AuthThrottledError,
    FailedAuthLimit,
    InFlightLimit,
)
from ragprivacy.service.voting import VotedAnswer, VotingTenants

__all__ = [
    "AccountBusyError",
    "ApiKey",
    "AuthError",
    "AuthThrottledError",
    "Client",
    "FailedAuthLimit",
    "HeaderTimeoutH11",
    "Idempotency",
    "IdempotencyInProgressError",
    "IdempotencyKeyReusedError",
    "InFlightLimit",
    "MODES",
    "PgvectorTenantVectors",
    "PostgresBackend",
    "ServedAnswer",
    "ServiceProvider",
    "ServiceState",
    "SqliteBackend",
    "StateBackend",
    "StateWitnessStore",
    "VOTING_MODES",
    "VotedAnswer",
    "VotingTenants",
    "Window",
    "WindowClosedError",
    "WindowSchedule",
    "audit_window",
    "close_window",
    "export_auditor",
    "fetch_window",
    "load_receipts",
    "load_unanswered",
    "new_key",
    "open_window",
    "parse_key",
    "parse_period",
    "rotate_window",
    "run_canary_audit",
    "run_service_demo",
    "seconds_until_rotation",
    "setup_canary_audit",
    "window_status",
]


def __getattr__(name: str) -> Any:
    """``HeaderTimeoutH11`` needs uvicorn (the ``service`` extra): imported on first use."""
    if name == "HeaderTimeoutH11":
        from ragprivacy.service.http_protocol import HeaderTimeoutH11

        return HeaderTimeoutH11
    raise AttributeError(f"module 'ragprivacy.service' has no attribute {name!r}")
