from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ragprivacy._sqlite import when_unlocked
from ragprivacy.eval import CachedGenerator, GenerationCache
from ragprivacy.generate import Generator, Prompt, Task, TokenDistribution
from ragprivacy.types import Completion


class CountingGenerator(Generator):
    """Echoes the prompt text and counts how often it is really called."""

    name = "counting"

    def __init__(self, tag: str = "a") -> None:
        self.calls = 0
        self.tag = tag

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        self.calls += 1
        return Completion(f"{self.tag}:{prompt.text}", (self.tag,), (-0.5,))

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        self.calls += 1
        return TokenDistribution(("x", "y"), (0.25, 0.75))

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        self.calls += 1
        return Completion(continuation, (continuation,), (-1.0,))

    def config(self) -> dict:
        return {"tag": self.tag}


def test_cache_survives_a_new_process_view(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    inner = CountingGenerator()
    gen = CachedGenerator(inner, GenerationCache(path))
    prompts = [Prompt(Task.ANSWER, f"q{i}") for i in range(5)]
    first = gen.generate_batch(prompts)
    assert inner.calls == 5
    again = CachedGenerator(CountingGenerator(), GenerationCache(path))
    second = again.generate_batch([*prompts, Prompt(Task.ANSWER, "new")])
    assert again.inner.calls == 1  # type: ignore[attr-defined]
    assert second[:5] == first
    assert second[0].logprobs == (-0.5,)


def test_cache_key_depends_on_backend_settings_and_prompt(tmp_path: Path) -> None:
    cache = GenerationCache(tmp_path / "c.sqlite")
    a = CachedGenerator(CountingGenerator("a"), cache)
    b = CachedGenerator(CountingGenerator("b"), cache)
    p = Prompt(Task.ANSWER, "q", context=("ctx",))
    assert a.generate(p).text == "a:q"
    assert b.generate(p).text == "b:q"
    assert a.generate(p.with_context(("other",))).text == "a:q"
    assert a.inner.calls == 2  # type: ignore[attr-defined]


def test_cached_distribution_and_score(tmp_path: Path) -> None:
    inner = CountingGenerator()
    gen = CachedGenerator(inner, GenerationCache(tmp_path / "c.sqlite"))
    p = Prompt(Task.CONTINUE, "t")
    assert gen.next_token_distribution(p, ["a"]).as_dict() == {"x": 0.25, "y": 0.75}
    assert gen.next_token_distribution(p, ["a"]).probs == (0.25, 0.75)
    assert gen.score(p, "z").logprobs == gen.score(p, "z").logprobs == (-1.0,)
    assert inner.calls == 2


def test_many_processes_open_a_new_cache_at_once(tmp_path: Path, at_once: Any) -> None:
    # The workers of a sweep all open one new file; SQLite refused some of them
    # ("database is locked") while another was switching the file to WAL.
    for round_ in range(20):
        path = str(tmp_path / f"r{round_}" / "generations.sqlite")

        def open_and_write(n: int, path: str = path) -> str:
            GenerationCache(path).put_many({f"k{n}": n})
            return "ok"

        assert at_once(open_and_write, 6) == ["ok"] * 6
        assert len(GenerationCache(path)) == 6


def test_lock_retry_waits_out_a_locked_file_and_no_other_error() -> None:
    calls = []

    def locked_twice() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")

    when_unlocked(locked_twice, wait_s=5.0)
    assert len(calls) == 3

    def broken() -> None:
        raise sqlite3.OperationalError("no such table: calls")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        when_unlocked(broken, wait_s=5.0)

    def always_locked() -> None:
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        when_unlocked(always_locked, wait_s=0.05)
