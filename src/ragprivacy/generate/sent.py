"""Whether a prompt of the current request has already been used by a generator.

The failure rule (:func:`ragprivacy.rag.charged_on_failure`) gives a request's retrieval
back only for a failure that provably does not depend on the data: a generator that was
never reached (:class:`~ragprivacy.errors.GeneratorUnavailableError`). That holds only
for the *first* generator call of a request. Once one call has carried a prompt with the
retrieved documents, the documents have left, and whether the request gets to a later
call (a DP vote's next token, MURAG's next step) depends on what earlier calls answered
from them — so an unreachable generator at a later call is charged like any failure.

A request opens :func:`tracking_prompts`; a generator notes each call that may have
carried its prompt (:func:`note_prompt_used`: the request was sent, or an answer came from
a cache). The note follows the request into worker threads through
:func:`contextvars.copy_context` (``OpenAIGenerator.generate_batch`` does so).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["note_prompt_used", "tracking_prompts"]

_USED: ContextVar[list[bool] | None] = ContextVar("ragprivacy_prompt_used", default=None)


@contextmanager
def tracking_prompts() -> Iterator[list[bool]]:
    """Track the block's generator calls; yields ``[used]``, true once a call noted that
    it may have carried its prompt."""
    holder = [False]
    token = _USED.set(holder)
    try:
        yield holder
    finally:
        _USED.reset(token)


def note_prompt_used() -> None:
    """A generator call may have carried its prompt (no-op outside :func:`tracking_prompts`)."""
    holder = _USED.get()
    if holder is not None:
        holder[0] = True
