"""Text → unit-norm float32 vectors."""

from __future__ import annotations

from ragprivacy.embed.base import Embedder, create_embedder, embedder_names, register_embedder

__all__ = ["Embedder", "create_embedder", "embedder_names", "register_embedder"]
