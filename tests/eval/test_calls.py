"""The endpoint-call tally: what responses add, the cache's ``cached`` flag and kept
``usage``, the price, and the progress bar's calls line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragprivacy.errors import ConfigError
from ragprivacy.eval import CachedGenerator, CallTally, GenerationCache, Price
from ragprivacy.eval.runner import _progress
from ragprivacy.generate import Generator, Prompt, Task, TokenDistribution
from ragprivacy.types import Completion, Response


class _Metered(Generator):
    name = "metered"

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return Completion("ok", ("ok",), None, usage={"prompt_tokens": 7, "completion_tokens": 1})

    def next_token_distribution(
        self, prompt: Prompt, prefix: object = ()
    ) -> TokenDistribution:  # pragma: no cover - not used
        raise NotImplementedError

    def score(self, prompt: Prompt, continuation: str) -> Completion:  # pragma: no cover
        raise NotImplementedError

    def config(self) -> dict[str, object]:
        return {}


def test_the_cache_marks_what_it_served_and_keeps_the_usage(tmp_path: Path) -> None:
    gen = CachedGenerator(_Metered(), GenerationCache(tmp_path / "c.sqlite"))
    prompt = Prompt(Task.CHAT, "hello")
    first, again = gen.generate(prompt), gen.generate(prompt)
    assert not first.cached and again.cached and first == again
    assert dict(again.usage or {}) == {"prompt_tokens": 7, "completion_tokens": 1}


def test_the_tally_counts_remote_responses_only() -> None:
    def r(**meta: object) -> Response:
        return Response(text="x", metadata=meta)

    usage = {"prompt_tokens": 10, "completion_tokens": 4, "estimated": False}
    tally = CallTally()
    delta = tally.record(
        [
            r(outcome="answer", cached=False, usage=usage),
            r(outcome="answer", cached=True, usage=usage),  # from the cache: no cost
            r(outcome="error", cached=False, error="HTTP 500"),
            r(),  # not an endpoint's answer
        ]
    )
    assert delta.to_dict() == tally.to_dict()
    assert (tally.new, tally.cached, tally.failed) == (2, 1, 1)
    assert (tally.prompt_tokens, tally.completion_tokens, tally.estimated) == (10, 4, 0)
    summary = tally.summary(Price(prompt=1.0, completion=2.0))
    assert summary["cost_usd"] == pytest.approx((10 + 8) / 1e6)
    assert tally.summary()["cost_usd"] is None  # no price, no cost


@pytest.mark.parametrize("bad", ["1", "a,b", "1,-2", "1,2,3"])
def test_a_bad_price_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"PROMPT_USD|>= 0"):
        Price.parse(bad)


def test_the_progress_bar_shows_the_calls() -> None:
    bar = _progress(True, 2, 0, 5, calls=True, price=Price(prompt=1.0, completion=1.0))
    with bar as (advance, step, show_calls):
        step(2)
        advance()
        show_calls(CallTally(new=3, cached=2, failed=1, prompt_tokens=1500, estimated=3))
        lines = [t.description for t in bar._bar.tasks]
        counts = [t.fields["count"] for t in bar._bar.tasks]
    assert lines[0] == "cells" and counts[:2] == ["1/2", "2/5"]
    assert "3 new, 2 cached, 1 failed" in lines[2] and "~1.5k tokens" in lines[2]
    assert "$0.0015" in lines[2]
