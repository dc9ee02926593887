"""Batching with a rich progress bar for long inputs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

PROGRESS_THRESHOLD = 5000


def batched_progress(
    items: Sequence[T], batch_size: int, *, label: str, show: bool | None = None
) -> Iterator[list[T]]:
    """Yield ``items`` in batches, with a progress bar when ``show`` (or when large)."""
    if batch_size < 1:
        raise ValueError(f"The 'batch_size' parameter must be >= 1; got {batch_size}.")
    n = len(items)
    show = n > PROGRESS_THRESHOLD if show is None else show
    starts = range(0, n, batch_size)
    if not show:
        for s in starts:
            yield list(items[s : s + batch_size])
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=n)
        for s in starts:
            batch = list(items[s : s + batch_size])
            yield batch
            bar.advance(task, len(batch))
