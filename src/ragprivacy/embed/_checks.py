"""Checks of the texts handed to embedders."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

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


@contextlib.contextmanager
def blas_threads(num_threads: int | None) -> Iterator[None]:
    """Limit BLAS/LAPACK threads inside the block (no-op for ``None``)."""
    if num_threads is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=num_threads, user_api="blas"):
        yield
