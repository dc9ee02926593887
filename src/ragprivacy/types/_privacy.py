"""The base of privacy events, and the two events every layer may need to state.

A privacy event is the immutable description of what one step cost; the mechanisms and
accountants that build and compose the rest live in :mod:`ragprivacy.dp`
(:mod:`ragprivacy.dp.events` re-exports these three). They live here so that a
:class:`~ragprivacy.types.Retrieval` and a :class:`~ragprivacy.types.PrivacyCost` can
carry a typed event without the shared records knowing the DP layer.

- :class:`NoOpEvent`: the step touched no private data (it costs nothing; ε = 0).
- :class:`NonPrivateEvent`: the step touched private data with *no* DP guarantee (plain
  top-K retrieval into a generator, random projection, kNN-LM): ε = ∞ wherever a number is
  shown, and any composition that contains it has no guarantee either. A system says "no
  guarantee" with this event, never with ε = 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragprivacy.errors import ConfigError

if TYPE_CHECKING:  # imported lazily: dp_accounting takes over a second to import
    import dp_accounting

__all__ = ["NoOpEvent", "NonPrivateEvent", "PrivacyEvent"]


@dataclass(frozen=True, slots=True)
class PrivacyEvent:
    """Base class of all privacy events."""

    def to_dp_accounting(self) -> dp_accounting.DpEvent:
        """The equivalent ``dp_accounting`` event (raises ConfigError if there is none)."""
        raise ConfigError(
            f"{type(self).__name__} has no dp_accounting equivalent; use the exact or "
            f"advanced-composition accountant of ragprivacy.dp.accounting instead."
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (``{"type": ..., fields...}``), for ledgers and reports."""
        raise NotImplementedError

    def flatten(self) -> list[tuple[PrivacyEvent, int]]:
        """The leaf events with their repetition counts (composition flattened)."""
        return [(self, 1)]

    @property
    def guaranteed(self) -> bool:
        """False when this event, or any event it composes, has no DP guarantee."""
        return not any(isinstance(leaf, NonPrivateEvent) for leaf, _ in self.flatten())


@dataclass(frozen=True, slots=True)
class NoOpEvent(PrivacyEvent):
    """A step that touched no private data (cost zero)."""

    def to_dp_accounting(self) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.NoOpDpEvent()

    def to_dict(self) -> dict[str, Any]:
        return {"type": "noop"}

    def flatten(self) -> list[tuple[PrivacyEvent, int]]:
        return []


@dataclass(frozen=True, slots=True)
class NonPrivateEvent(PrivacyEvent):
    """A step that used private data with no DP guarantee (ε = ∞).

    >>> NonPrivateEvent().guaranteed, NoOpEvent().guaranteed
    (False, True)
    """

    def to_dp_accounting(self) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.NonPrivateDpEvent()

    def to_dict(self) -> dict[str, Any]:
        return {"type": "non_private"}
