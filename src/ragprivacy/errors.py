"""The one exception hierarchy of ragprivacy.

::

    RagPrivacyError
    ├── ConfigError            a parameter, config file or registry name is invalid
    │   └── UnknownBackendError  a registry has no backend of that name
    ├── DataError              input data is missing, empty or malformed
    │   └── DataUnavailableError a dataset or model is not available offline
    ├── BackendError           an embedder, index or generator backend failed
    │   ├── GeneratorUnavailableError  the generator was not reached (no prompt left)
    │   └── ChargedFailureError  a request failed after private data was read; charged
    ├── BudgetExhaustedError   a privacy budget would be overspent (nothing was charged)
    ├── ServiceStateError      the request is valid, but the service's state refuses it now
    │   ├── AuthError            a missing, malformed, unknown or revoked API key
    │   ├── TenantAccessError    a query for an index outside the account's tenant
    │   ├── WindowClosedError    no audit window is open for this account
    │   ├── LogSealedError       an append to a sealed ledger (its window closed)
    │   └── BusyError            concurrent writers kept overtaking the request; retry it
    ├── RunInterruptedError    a run was stopped by a signal (finished work was kept)
    └── VerificationError      an audit artefact failed verification

``ConfigError`` and ``DataError`` are input errors: the request itself must change. A
``ServiceStateError`` is not: the same request may succeed at another time or with
another key, and nothing was spent for it. The HTTP service maps each class to one
status code, in one table (:mod:`ragprivacy.service.app`).

Every message says what was wrong, the value received, and what to do about it. The
CLI turns any ``RagPrivacyError`` into one line on stderr and a non-zero exit code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AuthError",
    "BackendError",
    "BudgetExhaustedError",
    "BusyError",
    "ChargedFailureError",
    "ConfigError",
    "DataError",
    "DataUnavailableError",
    "GeneratorUnavailableError",
    "LogSealedError",
    "RagPrivacyError",
    "RunInterruptedError",
    "ServiceStateError",
    "TenantAccessError",
    "UnknownBackendError",
    "VerificationError",
    "WindowClosedError",
]


class RagPrivacyError(Exception):
    """Base class of every error ragprivacy raises on purpose.

    Attributes:
        answered: when a batch of answers stopped partway (``RAGSystem.answer_batch``),
            the answers made before the error, in order: paid for, so they are the
            caller's (nothing is charged twice for asking again).
    """

    answered: tuple[object, ...] = ()


class ConfigError(RagPrivacyError, ValueError):
    """A parameter, configuration file or registry name is invalid."""


class UnknownBackendError(ConfigError, KeyError):
    """A registry was asked for a backend name it does not hold."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DataError(RagPrivacyError, ValueError):
    """Input data is missing, empty or malformed."""


class DataUnavailableError(DataError):
    """A dataset or model is not available on this machine (nothing is downloaded)."""


class BackendError(RagPrivacyError, RuntimeError):
    """An embedder, index or generator backend failed."""


class GeneratorUnavailableError(BackendError):
    """The generator could not be reached: the request failed before any byte of its prompt
    left this process (connection refused, DNS, connect timeout).

    Whether a connection can be opened does not depend on the prompt, so such a failure
    is the one failure after retrieval that carries no information about the retrieved
    documents (see :class:`ChargedFailureError`). A generator raises it for nothing else.
    """


class ChargedFailureError(BackendError):
    """A request failed after private data was read, and was charged like an answer.

    Whether a request fails after retrieval can depend on what was retrieved (a hosted
    model's context-length error depends on the documents' lengths), and the caller sees
    the failure: a free failure would be a free, data-dependent answer. So it costs what
    an answer costs. The backend's own message is withheld (it may quote the documents);
    it stays on ``withheld`` for the operator's debugging and must not be forwarded.
    An audited service's failure also carries the record's signed ``receipt``.
    """

    def __init__(
        self,
        message: str,
        *,
        withheld: BaseException | None = None,
        receipt: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.withheld = withheld
        #: the signed receipt of the record the failed request appended (an audited
        #: service's): the account paid for it and keeps it like an answer's
        self.receipt = dict(receipt) if receipt is not None else None


class BudgetExhaustedError(RagPrivacyError):
    """A privacy charge would overspend a budget; nothing was charged for it."""


class ServiceStateError(RagPrivacyError):
    """The request is valid, but the state of the service refuses it now: a key, an open
    window, a ledger. The same request may succeed later or with another key; nothing
    was spent for it. Not an input error (:class:`ConfigError`)."""


class AuthError(ServiceStateError):
    """A missing, malformed, unknown or revoked API key (the message names no account)."""


class TenantAccessError(ServiceStateError):
    """A query asked for an index outside its account's tenant (shared_backend is off)."""


class WindowClosedError(ServiceStateError):
    """No audit window is open, or the account joined after the open one was committed."""


class LogSealedError(ServiceStateError):
    """An append to a sealed log (its window closed): nothing was written."""


class BusyError(ServiceStateError):
    """Concurrent writers kept overtaking this request's append to the ledger; nothing was
    appended or spent, and the request may simply be sent again."""


class RunInterruptedError(RagPrivacyError):
    """A run was stopped by SIGINT (Ctrl-C) or SIGTERM; what had finished was kept.

    Attributes:
        finished: cells finished (and checkpointed) when the run stopped.
        total: cells of the whole run.
        signum: the signal that stopped it; the CLI exits with ``128 + signum`` (130 for
            Ctrl-C, 143 for SIGTERM), as shells report a process killed by that signal.
    """

    def __init__(self, message: str, *, finished: int, total: int, signum: int) -> None:
        super().__init__(message)
        self.finished, self.total, self.signum = finished, total, signum

    @property
    def exit_code(self) -> int:
        """The exit status a shell gives a process ended by ``signum``."""
        return 128 + self.signum

    def with_resume(self, command: str) -> RunInterruptedError:
        """The same stop, its message ending with the command that resumes the run."""
        return RunInterruptedError(
            f"{self} Resume with: {command}",
            finished=self.finished,
            total=self.total,
            signum=self.signum,
        )


class VerificationError(RagPrivacyError):
    """An audit artefact (proof, receipt, commitment) failed verification."""
