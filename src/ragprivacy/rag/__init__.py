"""Systems under test: a ``RAGSystem`` answers queries and reports the privacy it spent."""

from __future__ import annotations

from ragprivacy.rag.base import (
    NonRAG,
    Query,
    RAGSystem,
    StandardRAG,
    create_system,
    register_system,
    system_names,
)

__all__ = [
    "NonRAG",
    "Query",
    "RAGSystem",
    "StandardRAG",
    "create_system",
    "register_system",
    "system_names",
]
