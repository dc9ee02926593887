"""Checks of the texts handed to embedders."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

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


_CONTROLLER: tuple[int, Any] | None = None


def _controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries, rebuilt only when modules were
    imported since (numpy, scipy, faiss and torch load theirs on import; a library opened
    by hand with ctypes is not seen and keeps its own thread count). Building it scans
    every loaded shared object — 10-15 ms with faiss, torch and scipy loaded, half the
    cost of encoding one query."""
    global _CONTROLLER
    from threadpoolctl import ThreadpoolController

    loaded = len(sys.modules)
    if _CONTROLLER is None or _CONTROLLER[0] != loaded:
        _CONTROLLER = (loaded, ThreadpoolController())
    return _CONTROLLER[1]


@contextlib.contextmanager
def blas_threads(num_threads: int | None) -> Iterator[None]:
    """Limit BLAS/LAPACK threads inside the block (no-op for ``None``)."""
    if num_threads is None:
        yield
        return
    with _controller().limit(limits=num_threads, user_api="blas"):
        yield
