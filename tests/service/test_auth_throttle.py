"""Failed key checks are limited before any hash: per client address and over all
clients, with keys already verified never held back."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragprivacy.errors import AuthError
from ragprivacy.generate import create_generator
from ragprivacy.service import AuthThrottledError, FailedAuthLimit, ServiceState
from ragprivacy.service.provider import ServiceProvider
from ragprivacy.service.serving import Serving

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
