"""The ``Embedder`` interface: text → unit-norm float32 vectors."""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragprivacy._registry import Registry
from ragprivacy._typing import FloatArray

__all__ = ["Embedder", "create_embedder", "embedder_names", "register_embedder"]


class Embedder(ABC):
    """Maps texts to unit-norm float32 rows of width :attr:`dim`.

    Subclasses implement :meth:`_encode` (raw vectors) and :meth:`config`; the base class
    batches, shows progress for large inputs, and normalises. Embedders that learn from
    data (``lsa``) are fitted with :meth:`fit` before use; the fitted state is part of the
    :meth:`fingerprint`, which audit commitments bind to.
    """

    name: str = "embedder"

    @property
    @abstractmethod
    def dim(self) -> int:
        """Width of the vectors."""

    @abstractmethod
    def _encode(self, texts: list[str]) -> FloatArray:
        """Raw (not necessarily normalised) vectors for one batch."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """JSON-ready settings that, with :meth:`state_digest`, identify this embedder."""

    def fit(self, texts: Sequence[str]) -> Embedder:
        """Learn from ``texts`` (no-op for embedders without learned state)."""
        return self

    @property
    def is_fitted(self) -> bool:
        return True

    def state_digest(self) -> str:
        """SHA-256 hex of learned state (empty string when there is none)."""
        return ""

    def fingerprint(self) -> str:
        """A stable SHA-256 hex over name, settings and learned state."""
        blob = json.dumps(
            {"name": self.name, "config": self.config(), "state": self.state_digest()},
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def encode(
        self, texts: Sequence[str] | str, *, batch_size: int = 256, progress: bool | None = None
    ) -> FloatArray:
        """Encode ``texts`` into a float32 array ``[n, dim]`` with unit-norm rows.

        Args:
            texts: the texts (a single string is treated as a list of one).
            batch_size: texts per backend call.
            progress: show a progress bar; ``None`` shows one for more than 5,000 texts.
        """
        from ragprivacy.embed._progress import batched_progress

        items = [texts] if isinstance(texts, str) else list(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [
            self._encode(batch)
            for batch in batched_progress(
                items, batch_size, label=f"encode[{self.name}]", show=progress
            )
        ]
        out = np.ascontiguousarray(np.vstack(parts), dtype=np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


_REGISTRY: Registry[Embedder] = Registry("embedder")


def register_embedder(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register an embedder factory under a short name."""
    _REGISTRY.register(name, factory, replace=replace)


def create_embedder(spec: str, **kwargs: Any) -> Embedder:
    """Build an embedder from a spec such as ``"lsa"`` or ``"sentence-transformers:PATH"``."""
    return _REGISTRY.create(spec, **kwargs)


def embedder_names() -> list[str]:
    return _REGISTRY.names()
