"""What one client may take of a worker: failed key checks are limited before any hash
(per client address and over all clients, keys already verified never held back), and an
account's requests in progress at once."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ragprivacy.errors import AuthError
from ragprivacy.generate import Prompt, ReferenceReader, create_generator
from ragprivacy.service import (
    AccountBusyError,
    AuthThrottledError,
    FailedAuthLimit,
    InFlightLimit,
    ServiceState,
    open_window,
)
from ragprivacy.service.protocol import AnswerRequest, RetrieveRequest
from ragprivacy.service.provider import ServiceProvider
from ragprivacy.service.serving import Serving
from ragprivacy.types import Completion, Document

BAD = "Bearer rpk_000000000000_" + "A" * 43  # well-formed, unknown: costs a hash


def test_the_buckets_refill_at_their_rate_and_bound_the_hashes() -> None:
    clock = [0.0]
    limit = FailedAuthLimit(per_client=6, overall=9, clock=lambda: clock[0])
    for _ in range(6):
        limit.check("a")
        limit.failed("a")
    with pytest.raises(AuthThrottledError) as held:
        limit.check("a")
    assert held.value.retry_after == 10  # one failure's worth every 60/6 s
    for _ in range(3):  # b has its own bucket, but the shared one holds 3 more
        limit.check("b")
        limit.failed("b")
    with pytest.raises(AuthThrottledError):
        limit.check("c")  # the shared bucket is empty: everyone waits
    clock[0] = 60.0 / 9
    limit.check("c")
    clock[0] = 1e6
    limit.check("a")  # full again, no more than its size
    for _ in range(6):
        limit.failed("a")
    with pytest.raises(AuthThrottledError):
        limit.check("a")


def test_a_verified_key_is_never_held_back_and_a_malformed_one_costs_nothing(
    tmp_path: Path,
) -> None:
    state = ServiceState(tmp_path / "state", create=True)
    state.create_tenant("t", k=2)
    state.create_account("t", "a", epsilon=4.0, delta=1e-6, rate_limit=10)
    key = state.create_key("a").token
    serving = Serving(
        ServiceProvider(state), create_generator("reference"), FailedAuthLimit(per_client=2)
    )
    assert serving.authenticate(f"Bearer {key}", "x") == "a"  # verified: remembered
    for _ in range(50):  # malformed: refused before any hash, never counted
        with pytest.raises(AuthError):
            serving.authenticate("Bearer not-a-key", "x")
    for _ in range(2):
        with pytest.raises(AuthError):
            serving.authenticate(BAD, "x")
    with pytest.raises(AuthThrottledError):
        serving.authenticate(BAD, "x")
    assert serving.authenticate(f"Bearer {key}", "x") == "a"  # no hash: not held back


_GATE = threading.Event()
_ENTERED = threading.Semaphore(0)


@contextlib.contextmanager
def _released() -> Iterator[None]:
    """Let every held answer go when the block ends, whatever happened in it."""
    _GATE.clear()
    try:
        yield
    finally:
        _GATE.set()


class _Held(ReferenceReader):
    """The reference reader, holding each answer until the test lets it go (the gate is
    the module's: the service may answer through a copy of its generator)."""

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        _ENTERED.release()
        assert _GATE.wait(120), "the test never let the answer go"
        return super().generate(prompt, max_tokens=max_tokens)


def test_an_account_cannot_hold_more_than_its_requests_at_once(tmp_path: Path) -> None:
    """Two requests of alice in progress (her limit): a third is refused at once and
    spends nothing, while bob is served; once hers finish, she is served again. Without
    the limit each further request would hold a thread of the pool, waiting its turn."""
    state = ServiceState(tmp_path / "state", create=True)
    state.create_tenant("t", k=2)
    state.add_documents("t", [Document(f"d{i}", f"note {i} about gout") for i in range(6)])
    for name in ("alice", "bob"):
        state.create_account("t", name, epsilon=4.0, delta=1e-6, rate_limit=10)
    open_window(state)
    held = _Held()
    serving = Serving(ServiceProvider(state), held, inflight=InFlightLimit(2))
    ask = AnswerRequest(query="gout")
    with ThreadPoolExecutor(2) as pool, _released():
        slow = [pool.submit(serving.answer, "alice", ask) for _ in range(2)]
        # one is in the generator; the other waits for it (an account's queries take
        # their numbers one at a time), holding its thread and its slot all the same
        assert _ENTERED.acquire(timeout=120)
        deadline = time.monotonic() + 120
        while serving.inflight.in_progress("alice") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert serving.inflight.in_progress("alice") == 2
        with pytest.raises(AccountBusyError):
            serving.answer("alice", ask)
        with pytest.raises(AccountBusyError):
            serving.retrieve("alice", RetrieveRequest(query="gout"))
        assert serving.budget("alice").used == 0  # charged at the append, after the answer
        assert len(serving.retrieve("bob", RetrieveRequest(query="gout")).documents) == 2
        _GATE.set()
        assert all(len(f.result(timeout=120).documents) == 2 for f in slow)
    assert serving.inflight.in_progress("alice") == 0
    assert len(serving.answer("alice", ask).documents) == 2
    assert serving.budget("alice").used == 3
