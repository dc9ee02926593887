"""Query → ranked documents; where the privacy of retrieval is decided."""

from __future__ import annotations

from ragprivacy.retrieval.base import (
    Retriever,
    TopKRetriever,
    create_retriever,
    register_retriever,
    retriever_names,
)
from ragprivacy.retrieval.knowledge_base import KnowledgeBase

__all__ = [
    "KnowledgeBase",
    "Retriever",
    "TopKRetriever",
    "create_retriever",
    "register_retriever",
    "retriever_names",
]
