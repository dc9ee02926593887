"""Checks of the texts handed to embedders."""

from __future__ import annotations

from collections.abc import Sequence

from ragprivacy._threads import blas_threads
from ragprivacy.errors import DataError

__all__ = ["blas_threads", "check_texts"]


def check_texts(texts: Sequence[object]) -> list[str]:
    """The texts as a list, refusing items that are not strings."""
    out = list(texts)
    for position, item in enumerate(out):
        if not isinstance(item, str):
            raise DataError(
                f"Embedders encode strings; item {position} is {type(item).__name__}: "
                f"{item!r:.80}. Convert it to text first."
            )
    return out  # type: ignore[return-value]
