"""Privacy events: the immutable description of what a mechanism cost.

A mechanism reports the event it consumed; accountants and filters own budgets and turn
events into (ε, δ) or Rényi curves. An event's meaning never changes once built.

An event states a cost *for the neighbouring relation its mechanism was analysed under*;
the event itself does not fix the relation. The mechanisms of :mod:`ragprivacy.dp` state
theirs: add/remove one document for counts, prefix thresholds, the exponential mechanism
and sparse vector (Private-RAG §2); replace one document in its slot for the Gaussian
noise-then-select of :class:`~ragprivacy.dp.mechanisms.GaussianNoisyTopK` (its score
vector is indexed by slot; see its docstring). A composition is meaningful for one
relation at a time; a replace-one guarantee implies an add/remove one only when the index
is padded to a public size with dummy documents (Private-RAG Alg. 3).

The base class, :class:`NoOpEvent` and :class:`NonPrivateEvent` (no guarantee: ε = ∞)
live in :mod:`ragprivacy.types` so that retrievals and responses carry typed events; they
are re-exported here. The events map onto ``dp_accounting`` events
(:meth:`PrivacyEvent.to_dp_accounting`) where that library has an equivalent; pure and
approximate DP events have none, and the accountants in :mod:`ragprivacy.dp.accounting`
treat them directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragprivacy._validation import check_positive, check_positive_int, check_probability
from ragprivacy.errors import ConfigError
from ragprivacy.types import NonPrivateEvent, NoOpEvent, PrivacyEvent

if TYPE_CHECKING:  # imported lazily: dp_accounting takes over a second to import
    import dp_accounting

__all__ = [
    "ApproxDpEvent",
    "ComposedEvent",
    "DiscreteLaplaceEvent",
    "GaussianEvent",
    "LaplaceEvent",
    "NoOpEvent",
    "NonPrivateEvent",
    "PrivacyEvent",
    "PureDpEvent",
    "SelfComposedEvent",
    "ZCdpEvent",
    "compose",
    "event_from_dict",
]


@dataclass(frozen=True, slots=True)
class GaussianEvent(PrivacyEvent):
    """One release of a value with L2 ``sensitivity`` plus N(0, ``sigma``²) noise per coordinate.

    Guarantee: μ-GDP with μ = sensitivity/σ; (α, αμ²/2)-RDP (collusion paper App. B, R1).
    Source: collusion paper eq. (2.1) and (3.3).
    """

    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    @property
    def noise_multiplier(self) -> float:
        """σ / sensitivity (what ``dp_accounting`` calls the noise multiplier)."""
        return self.sigma / self.sensitivity

    @property
    def mu(self) -> float:
        """The Gaussian-DP parameter μ = sensitivity / σ."""
        return self.sensitivity / self.sigma

    def to_dp_accounting(self) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.GaussianDpEvent(self.noise_multiplier)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "gaussian", "sigma": self.sigma, "sensitivity": self.sensitivity}


@dataclass(frozen=True, slots=True)
class LaplaceEvent(PrivacyEvent):
    """One release of a value with L1 ``sensitivity`` plus Laplace(``scale``) noise.

    Guarantee: ε-DP with ε = sensitivity/scale (Dwork & Roth 2014, Thm 3.6).
    Source: Private-RAG Alg. 2/6 line 6 (noisy prefix sums), Alg. 4 lines 2 and 11.
    """

    scale: float
    sensitivity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    @property
    def epsilon(self) -> float:
        """The pure-DP parameter sensitivity/scale."""
        return self.sensitivity / self.scale

    def to_dp_accounting(self) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.LaplaceDpEvent(self.scale / self.sensitivity)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "laplace", "scale": self.scale, "sensitivity": self.sensitivity}


@dataclass(frozen=True, slots=True)
class DiscreteLaplaceEvent(PrivacyEvent):
    """Integer discrete Laplace noise, P(x) ∝ e^{−|x|/scale}, on an integer value whose L1
    change is at most the integer ``sensitivity``.

    Guarantee: ε-DP with ε = sensitivity/scale, like the continuous Laplace mechanism, but
    its Rényi and privacy-loss curves are *larger*: with sensitivity 1 the privacy loss is
    ±1/scale exactly (binary randomized response with ε = 1/scale), while the continuous
    curve is smaller at every order. Accountants use the exact discrete curve (the RR
    curve for Δ = 1; ``dp_accounting``'s ``from_discrete_laplace_mechanism`` for PLD).
    Returned by the secure (integer) paths of :func:`~ragprivacy.dp.mechanisms.laplace_counts`
    and :func:`~ragprivacy.dp.mechanisms.noisy_prefix_threshold`. It has the fields and
    ``epsilon`` of :class:`LaplaceEvent` but is *not* a subclass of it, so that code
    dispatching on ``LaplaceEvent`` can never account it with the continuous curves.
    Source: Canonne, Kamath & Steinke 2020, Alg. 2 (sampler); Private-RAG Alg. 2/6 line 6.
    """

    scale: float
    sensitivity: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        sens = self.sensitivity
        if isinstance(sens, bool) or not float(sens).is_integer() or sens < 1:
            raise ConfigError(
                f"A discrete Laplace event needs an integer sensitivity >= 1; got {sens!r}. "
                f"Scale the value to integers first."
            )
        object.__setattr__(self, "sensitivity", int(sens))

    @property
    def epsilon(self) -> float:
        """The pure-DP parameter sensitivity/scale."""
        return self.sensitivity / self.scale

    def to_dp_accounting(self) -> dp_accounting.DpEvent:
        raise ConfigError(
            "dp_accounting has no discrete Laplace event (its LaplaceDpEvent is continuous "
            "and under-counts); use ragprivacy.dp.accounting (rdp_epsilon, pld_epsilon)."
        )

    def to_dict(self) -> dict[str, Any]:
        return {"type": "discrete_laplace", "scale": self.scale, "sensitivity": self.sensitivity}


@dataclass(frozen=True, slots=True)
class PureDpEvent(PrivacyEvent):
    """Any ε-DP mechanism (exponential mechanism, sparse vector, a DP-RAG answer).

    Accountants treat it by its worst case (binary randomized response), which dominates
    every ε-DP mechanism. Source: Private-RAG Alg. 1 line 7 (per-query ε_q).
    """

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive("epsilon", self.epsilon))

    def to_dict(self) -> dict[str, Any]:
        return {"type": "pure", "epsilon": self.epsilon}


@dataclass(frozen=True, slots=True)
class ApproxDpEvent(PrivacyEvent):
    """Any (ε, δ)-DP mechanism, known only by its parameters.

    Source: collusion paper Def. 3.1; the per-query (ε_q, δ_q) of eq. (3.1).
    """

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "epsilon", check_positive("epsilon", self.epsilon, allow_zero=True)
        )
        object.__setattr__(self, "delta", check_probability("delta", self.delta))
        if self.delta >= 1:
            raise ConfigError(f"The 'delta' parameter must be in [0, 1); got {self.delta!r}.")

    def to_dict(self) -> dict[str, Any]:
        return {"type": "approx", "epsilon": self.epsilon, "delta": self.delta}


@dataclass(frozen=True, slots=True)
class ZCdpEvent(PrivacyEvent):
    """A ρ-zCDP mechanism: (α, ρα)-RDP for all α > 1 (Bun & Steinke 2016).

    The discrete Gaussian with integer sensitivity Δ and scale σ is Δ²/(2σ²)-zCDP
    (Canonne, Kamath & Steinke 2020, Thm 4).
    """

    rho: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", check_positive("rho", self.rho))

    def to_dp_accounting(self) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.ZCDpEvent(self.rho)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "zcdp", "rho": self.rho}


@dataclass(frozen=True, slots=True)
class SelfComposedEvent(PrivacyEvent):
    """``count`` adaptive repetitions of ``event``."""

    event: PrivacyEvent
    count: int

    def __post_init__(self) -> None:
        if not isinstance(self.event, PrivacyEvent):
            raise ConfigError(f"The 'event' parameter must be a PrivacyEvent; got {self.event!r}.")
        object.__setattr__(self, "count", check_positive_int("count", self.count, allow_zero=True))

    def to_dp_accounting(self) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.SelfComposedDpEvent(self.event.to_dp_accounting(), self.count)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "self_composed", "event": self.event.to_dict(), "count": self.count}

    def flatten(self) -> list[tuple[PrivacyEvent, int]]:
        return [(e, c * self.count) for e, c in self.event.flatten()] if self.count else []


@dataclass(frozen=True, slots=True)
class ComposedEvent(PrivacyEvent):
    """The adaptive composition of several events, in order."""

    events: tuple[PrivacyEvent, ...]

    def __post_init__(self) -> None:
        events = tuple(self.events)
        for e in events:
            if not isinstance(e, PrivacyEvent):
                raise ConfigError(f"ComposedEvent takes PrivacyEvent items; got {e!r}.")
        object.__setattr__(self, "events", events)

    def to_dp_accounting(self) -> dp_accounting.DpEvent:
        import dp_accounting

        return dp_accounting.ComposedDpEvent([e.to_dp_accounting() for e in self.events])

    def to_dict(self) -> dict[str, Any]:
        return {"type": "composed", "events": [e.to_dict() for e in self.events]}

    def flatten(self) -> list[tuple[PrivacyEvent, int]]:
        merged: dict[PrivacyEvent, int] = {}
        for e in self.events:
            for leaf, c in e.flatten():
                merged[leaf] = merged.get(leaf, 0) + c
        return list(merged.items())


def compose(events: Iterable[PrivacyEvent]) -> PrivacyEvent:
    """Compose events; a single event is returned as is."""
    items = tuple(events)
    return items[0] if len(items) == 1 else ComposedEvent(items)


_FROM_DICT = {
    "noop": lambda d: NoOpEvent(),
    "non_private": lambda d: NonPrivateEvent(),
    "gaussian": lambda d: GaussianEvent(sigma=d["sigma"], sensitivity=d.get("sensitivity", 1.0)),
    "laplace": lambda d: LaplaceEvent(scale=d["scale"], sensitivity=d.get("sensitivity", 1.0)),
    "discrete_laplace": lambda d: DiscreteLaplaceEvent(
        scale=d["scale"], sensitivity=d.get("sensitivity", 1)
    ),
    "pure": lambda d: PureDpEvent(epsilon=d["epsilon"]),
    "approx": lambda d: ApproxDpEvent(epsilon=d["epsilon"], delta=d["delta"]),
    "zcdp": lambda d: ZCdpEvent(rho=d["rho"]),
    "self_composed": lambda d: SelfComposedEvent(event_from_dict(d["event"]), int(d["count"])),
    "composed": lambda d: ComposedEvent(tuple(event_from_dict(e) for e in d["events"])),
}


def event_from_dict(data: Mapping[str, Any]) -> PrivacyEvent:
    """Rebuild an event from :meth:`PrivacyEvent.to_dict` output.

    >>> event_from_dict(GaussianEvent(2.0).to_dict())
    GaussianEvent(sigma=2.0, sensitivity=1.0)
    """
    kind = data.get("type") if isinstance(data, Mapping) else None
    if kind not in _FROM_DICT:
        raise ConfigError(
            f"Unknown privacy event type {kind!r}; expected one of {', '.join(sorted(_FROM_DICT))}."
        )
    return _FROM_DICT[kind](data)  # type: ignore[no-untyped-call]
