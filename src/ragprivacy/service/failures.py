"""The service's failure rule: a failure after retrieval is an answer.

Whether a request fails after its documents were read can depend on them — a hosted
model answers HTTP 400 above its context length, so the failure reads the documents'
lengths — and the caller sees that it failed. A refunded failure would be a free,
data-dependent answer outside every guarantee. So every failure after retrieval is
charged like an answer (the noisy_topk record is appended; the voted answer stays
counted), counted per account and window in the state, and logged without its message.

The one failure that provably does not depend on the data is a generator that was never
reached (:class:`~ragprivacy.errors.GeneratorUnavailableError`: no byte of the prompt
left); an account gets :data:`~ragprivacy.service.state.FREE_FAILURES` of those free per
window, and pays for any past that. Refusals before retrieval (authentication,
validation, rate limit, a prompt that could overflow the generator's context) never get
here and spend nothing.
"""

from __future__ import annotations

import logging

from ragprivacy.errors import GeneratorUnavailableError
from ragprivacy.service.state import ServiceState

__all__ = ["record_failure"]

_log = logging.getLogger("ragprivacy.service")


def record_failure(
    state: ServiceState,
    window_id: str,
    account: str,
    exc: BaseException,
    *,
    appended: bool = False,
) -> bool:
    """Count and log one failure of ``account`` after retrieval; return whether it is
    charged (always, unless the generator was never reached and the account has free
    failures left in the window; always once the record is ``appended``: a stream that
    broke after its first piece). The log line names the window, the account and the
    error's type — never its message, which may quote the documents."""
    free = isinstance(exc, GeneratorUnavailableError) and not appended
    charged = state.count_failure(window_id, account, charged=not free)
    _log.warning(
        "request failed after retrieval: window=%s account=%s error=%s %s",
        window_id,
        account,
        type(exc).__name__,
        "charged like an answer" if charged else "free (the generator was never reached)",
    )
    return charged
