"""Secure noise is the default: no public callable of the ``dp``, ``retrieval`` and ``rag``
layers defaults to simulated (float, seedable) noise.

The walk covers every name in the layers' ``__all__``: functions, classes (their
``__init__``, dataclass fields included, and their bases' ``__init__``, which a ``**kw``
constructor forwards to) and the public methods of public classes, with what they
inherit from the project. A parameter ``simulation`` whose default is true (or
``secure`` whose default is false) is an offender; ``simulation=True`` must be a visible
opt-in at the call site.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import ragprivacy.dp
import ragprivacy.rag
import ragprivacy.retrieval
from ragprivacy.dp import SelfComposedEvent, ZCdpEvent, pe_epsilon, pe_event
from ragprivacy.errors import ConfigError
from ragprivacy.retrieval import adaptive_screen, score_bins

LAYERS = (ragprivacy.dp, ragprivacy.retrieval, ragprivacy.rag)
# Dunder methods that are public API (construction and calling).
_PUBLIC_DUNDERS = ("__init__", "__call__")
# The walk must see at least this many callables with a ``simulation`` parameter (26
# today), so that it cannot pass by finding none.
_MIN_WITH_SIMULATION = 20


def _is_public_method(name: str) -> bool:
    return not name.startswith("_") or name in _PUBLIC_DUNDERS


def _methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """Public methods of ``cls``, its own and those it inherits from the project (not
    from ``object`` or other builtins)."""
    for name in sorted(dir(cls)):
        if not _is_public_method(name):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or owner.__module__ == "builtins":
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, staticmethod | classmethod):
            attr = attr.__func__
        if inspect.isfunction(attr):
            yield name, attr


def public_callables(module: ModuleType) -> Iterator[tuple[str, Callable[..., Any]]]:
    """(qualified name, callable) for every public callable reachable from
    ``module.__all__``."""
    for name in module.__all__:
        obj = getattr(module, name)
        qual = f"{module.__name__}.{name}"
        if inspect.isclass(obj):
            for method, func in _methods(obj):
                yield f"{qual}.{method}", func
            # a constructor that passes ``**kw`` on hides its bases' parameters
            for base in obj.__mro__[1:]:
                init = vars(base).get("__init__")
                if base.__module__ != "builtins" and inspect.isfunction(init):
                    yield f"{qual}.__init__ (from {base.__name__})", init
        elif callable(obj):
            yield qual, obj


def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):  # builtins without a signature
        return None


def _is_true(value: object) -> bool:
    return isinstance(value, bool | np.bool_) and bool(value)


def _is_false(value: object) -> bool:
    return isinstance(value, bool | np.bool_) and not bool(value)


def insecure_defaults(
    callables: list[tuple[str, Callable[..., Any]]],
) -> tuple[list[str], set[str]]:
    """The offenders (``name(param=default)``) among ``callables``, and the names of those
    that take a ``simulation`` parameter at all."""
    offenders: list[str] = []
    with_simulation: set[str] = set()
    for qual, func in callables:
        sig = _signature(func)
        if sig is None:
            continue
        for param in sig.parameters.values():
            default = param.default
            if param.name == "simulation":
                with_simulation.add(qual)
                if _is_true(default):
                    offenders.append(f"{qual}(simulation={default!r})")
            elif param.name == "secure" and _is_false(default):
                offenders.append(f"{qual}(secure={default!r})")
    return offenders, with_simulation


def _walk() -> list[tuple[str, Callable[..., Any]]]:
    return [item for module in LAYERS for item in public_callables(module)]


def test_no_public_callable_defaults_to_simulated_noise() -> None:
    offenders, _ = insecure_defaults(_walk())
    assert not offenders, (
        "These public callables default to simulated noise; make the secure path the "
        "default (simulation=False) or require the argument: " + ", ".join(offenders)
    )


def test_the_walk_finds_the_simulation_switches() -> None:
    walked = _walk()
    _, with_simulation = insecure_defaults(walked)
    assert len(walked) > 150
    assert len(with_simulation) >= _MIN_WITH_SIMULATION, sorted(with_simulation)
    assert {
        "ragprivacy.dp.pe_event",
        "ragprivacy.dp.pe_epsilon",
        "ragprivacy.dp.noisy_prefix_threshold",
        "ragprivacy.dp.GaussianNoisyTopK.__init__",
        "ragprivacy.dp.AccountPolicy.mechanism",
        "ragprivacy.retrieval.adaptive_screen",
        "ragprivacy.retrieval.ThresholdRetriever.__init__",
        "ragprivacy.retrieval.TenantRetriever.__init__",
        "ragprivacy.rag.DPVoteConfig.__init__",
        "ragprivacy.rag.DPVoteRAG.__init__ (from _Voting)",
        "ragprivacy.rag.synthetic_datastore",
    } <= with_simulation


def test_the_walker_flags_planted_offenders() -> None:
    def planted(*, simulation=True):  # type: ignore[no-untyped-def]
        return simulation

    def planted_secure(x: int, secure: bool = False) -> int:
        return x

    def fine(*, simulation: bool = False) -> bool:
        return simulation

    def required(*, simulation: bool) -> bool:
        return simulation

    class Planted:
        def __init__(self, *, simulation: bool = True) -> None:
            self.simulation = simulation

        def release(self, *, simulation: bool = True) -> None:
            pass

        def _private(self, *, simulation: bool = True) -> None:
            pass

    class _Base:
        def __init__(self, *, simulation: bool = True) -> None:
            self.simulation = simulation

    class Forwarding(_Base):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)

    module = ModuleType("planted_layer")
    module.__dict__.update(
        planted=planted,
        planted_secure=planted_secure,
        fine=fine,
        required=required,
        Planted=Planted,
        Forwarding=Forwarding,
        __all__=["planted", "planted_secure", "fine", "required", "Planted", "Forwarding"],
    )
    offenders, with_simulation = insecure_defaults(list(public_callables(module)))
    assert offenders == [
        "planted_layer.planted(simulation=True)",
        "planted_layer.planted_secure(secure=False)",
        "planted_layer.Planted.__init__(simulation=True)",
        "planted_layer.Planted.release(simulation=True)",
        "planted_layer.Forwarding.__init__ (from _Base)(simulation=True)",
    ]
    assert "planted_layer.fine" in with_simulation
    assert "planted_layer.required" in with_simulation
    assert not any("_private" in name for name in with_simulation)


# The defaults that used to be simulated, now secure.


def test_pe_accounts_the_secure_event_by_default() -> None:
    assert pe_event(2.0, 3) == SelfComposedEvent(ZCdpEvent(1 / 8), 3)
    assert pe_event(2.0, 3) == pe_event(2.0, 3, simulation=False)
    assert pe_epsilon(2.0, 3, 1e-6) == pe_epsilon(2.0, 3, 1e-6, simulation=False)
    assert pe_epsilon(2.0, 3, 1e-6) > pe_epsilon(2.0, 3, 1e-6, simulation=True)


def test_adaptive_screen_is_secure_by_default() -> None:
    edges = score_bins(0.1, top=1.0, bottom=0.0)
    scores = np.array([0.95, 0.93, 0.74, 0.72, 0.71, 0.3])
    active = np.ones(scores.size, dtype=bool)
    with pytest.raises(ConfigError, match="refuses 'rng'"):
        adaptive_screen(scores, active, 4, 50.0, edges, rng=0)
    secure = adaptive_screen(scores, active, 4, 50.0, edges)
    assert secure.stop_bin == 2  # integer Lap(1/50) noise: 0 but w.p. ~1e-21
    a = adaptive_screen(scores, active, 4, 0.5, edges, simulation=True, rng=3)
    b = adaptive_screen(scores, active, 4, 0.5, edges, simulation=True, rng=3)
    assert a.stop_bin == b.stop_bin and a.released.tolist() == b.released.tolist()
