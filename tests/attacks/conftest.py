"""Small fakes shared by the attack tests."""

from __future__ import annotations

from collections.abc import Sequence

from ragprivacy.attacks import ProxyLM, SpellCorrector


class FakeProxy(ProxyLM):
    """Ranks from a table (default 1); words in ``fragmented`` split in two pieces."""

    name = "fake"

    def __init__(
        self,
        ranks: dict[str, int] | None = None,
        fragmented: Sequence[str] = (),
        probs: dict[str, float] | None = None,
    ) -> None:
        self.ranks = {k.lower(): v for k, v in (ranks or {}).items()}
        self.frag = {w.lower() for w in fragmented}
        self.probs = {k.lower(): v for k, v in (probs or {}).items()}
        self.calls: list[tuple[tuple[str, ...], str]] = []

    def pieces(self, word: str) -> list[str]:
        if word.lower() in self.frag:
            half = max(1, len(word) // 2)
            return [word[:half], word[half:]]
        return [word]

    def word_rank(self, prefix: Sequence[str], word: str) -> int:
        self.calls.append((tuple(prefix), word))
        return self.ranks.get(word.lower(), 1)

    def word_prob(self, prefix: Sequence[str], word: str) -> float:
        return self.probs.get(word.lower(), 0.9)


class FakeCorrector(SpellCorrector):
    name = "fake"

    def __init__(self, fixes: dict[str, str]) -> None:
        self.fixes = fixes
        self.windows: list[list[str]] = []

    def correct(self, window: Sequence[str]) -> str:
        self.windows.append(list(window))
        return self.fixes.get(window[-1], window[-1])


import pytest  # noqa: E402


@pytest.fixture
def fakes():
    """The fake proxy and corrector classes."""
    return FakeProxy, FakeCorrector
