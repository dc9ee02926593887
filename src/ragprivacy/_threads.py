"""BLAS thread limits for one block of code, shared by the embedders and the indices.

threadpoolctl's ``threadpool_limits`` rescans every loaded shared object on each call,
which costs far more than reusing a controller (benchmarks/README.md, "Embedders and
indices"): the controller is built once and rebuilt only when modules were imported since.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["blas_threads"]

_CONTROLLER: tuple[int, Any] | None = None


def _controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries, rebuilt only when modules were
    imported since (numpy, scipy, faiss and torch load theirs on import; a library opened
    by hand with ctypes is not seen and keeps its own thread count)."""
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
