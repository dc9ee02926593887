"""Vectors → exact or approximate inner-product scores."""

from __future__ import annotations

from ragprivacy.index.base import (
    SearchResult,
    VectorIndex,
    create_index,
    index_names,
    load_index,
    register_index,
)

__all__ = [
    "SearchResult",
    "VectorIndex",
    "create_index",
    "index_names",
    "load_index",
    "register_index",
]
