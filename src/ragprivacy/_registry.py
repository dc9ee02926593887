"""A plain name → factory registry, one per kind of backend.

Backends register under a short name (``register("lsa", LsaEmbedder)``); a spec string
may carry an argument after a colon (``"sentence-transformers:/models/minilm"``), which
is passed to the factory as its first positional argument.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ragprivacy.errors import ConfigError, UnknownBackendError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Named factories of one kind of backend (embedders, indices, generators, ...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str, factory: Callable[..., T], *, replace: bool = False) -> None:
        """Register ``factory`` under ``name``; refuses to overwrite unless ``replace``."""
        if not name or ":" in name:
            raise ValueError(f"A {self.kind} name must be non-empty without ':'; got {name!r}.")
        if name in self._factories and not replace:
            raise ValueError(f"A {self.kind} named {name!r} is already registered.")
        self._factories[name] = factory

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def factory(self, name: str) -> Callable[..., T]:
        """The factory registered as ``name``."""
        try:
            return self._factories[name]
        except KeyError:
            raise UnknownBackendError(
                f"Unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}."
            ) from None

    def create(self, spec: str, *args: Any, **kwargs: Any) -> T:
        """Build the backend named by ``spec`` (``"name"`` or ``"name:argument"``).

        Positional ``args`` come first (e.g. the knowledge base of a retriever), then the
        spec's argument if it has one.
        """
        if not isinstance(spec, str) or not spec:
            raise UnknownBackendError(
                f"A {self.kind} spec must be a non-empty string such as "
                f"{self.names()[0] if self.names() else 'name'!r}; got {spec!r}."
            )
        name, _, arg = spec.partition(":")
        factory = self.factory(name)
        call_args = (*args, arg) if arg else args
        _check_options(self.kind, name, factory, call_args, kwargs)
        try:
            return factory(*call_args, **kwargs)
        except TypeError as exc:  # an option passed on through **kwargs and refused there
            if "unexpected keyword argument" not in str(exc):
                raise
            raise ConfigError(
                f"Bad options for {self.kind} {name!r}: {exc}. It takes: "
                f"{', '.join(_option_names(factory)) or 'none'}."
            ) from exc


def _option_names(factory: Callable[..., Any]) -> list[str]:
    """Keyword options of ``factory`` (for a class, of every ``__init__`` it inherits)."""
    inits = [
        k.__dict__["__init__"]
        for k in getattr(factory, "__mro__", ())
        if k is not object and "__init__" in k.__dict__
    ]
    names: list[str] = []
    for fn in inits or [factory]:
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            continue
        names += [
            p.name
            for p in params
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
            and p.name != "self"
            and p.name not in names
        ]
    return names


def _check_options(
    kind: str, name: str, factory: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
) -> None:
    """Refuse options the factory does not take, naming the ones it does (a config's typo
    should not surface as a ``TypeError`` from deep inside a constructor)."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise ConfigError(
            f"Bad options for {kind} {name!r}: {exc}. It takes: "
            f"{', '.join(_option_names(factory)) or 'none'}."
        ) from None
