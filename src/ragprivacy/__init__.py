"""ragprivacy: protect, attack and audit the privacy of retrieval-augmented generation."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
