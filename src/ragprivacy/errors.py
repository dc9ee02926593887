"""The one exception hierarchy of ragprivacy.

::

    RagPrivacyError
    ├── ConfigError            a parameter, config file or registry name is invalid
    │   └── UnknownBackendError  a registry has no backend of that name
    ├── DataError              input data is missing, empty or malformed
    │   └── DataUnavailableError a dataset or model is not available offline
    ├── BackendError           an embedder, index or generator backend failed
    ├── BudgetExhaustedError   a privacy budget would be overspent (nothing was charged)
    └── VerificationError      an audit artefact failed verification

Every message says what was wrong, the value received, and what to do about it. The
CLI turns any ``RagPrivacyError`` into one line on stderr and a non-zero exit code.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BudgetExhaustedError",
    "ConfigError",
    "DataError",
    "DataUnavailableError",
    "RagPrivacyError",
    "UnknownBackendError",
    "VerificationError",
]


class RagPrivacyError(Exception):
    """Base class of every error ragprivacy raises on purpose."""


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


class BudgetExhaustedError(RagPrivacyError):
    """A privacy charge would overspend a budget; nothing was charged."""


class VerificationError(RagPrivacyError):
    """An audit artefact (proof, receipt, commitment) failed verification."""
