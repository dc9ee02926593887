"""Small frozen records shared by every layer.

``Document`` and ``PIISpan`` describe stored text; ``Hit`` and ``Retrieval`` describe what
a retriever returned; ``Completion`` is a generator's output; ``PrivacyEvent`` (with
``NoOpEvent`` and ``NonPrivateEvent``) is the typed cost of a step and ``PrivacyCost``
what one answer spent; ``Response`` is what a RAG system answers. Nothing here imports another
layer.
"""

from __future__ import annotations

from ragprivacy.types._privacy import NonPrivateEvent, NoOpEvent, PrivacyEvent
from ragprivacy.types._records import (
    Completion,
    Document,
    Hit,
    PIISpan,
    PrivacyCost,
    Response,
    Retrieval,
)

__all__ = [
    "Completion",
    "Document",
    "Hit",
    "NoOpEvent",
    "NonPrivateEvent",
    "PIISpan",
    "PrivacyCost",
    "PrivacyEvent",
    "Response",
    "Retrieval",
]
