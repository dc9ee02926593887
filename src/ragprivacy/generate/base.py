"""The ``Generator`` interface: structured prompts → text with token log-probabilities."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragprivacy._registry import Registry
from ragprivacy.generate.prompt import Prompt
from ragprivacy.types import Completion

__all__ = [
    "Generator",
    "TokenDistribution",
    "create_generator",
    "generator_names",
    "register_generator",
]


@dataclass(frozen=True, slots=True)
class TokenDistribution:
    """A next-token distribution: ``probs[i]`` is the probability of ``tokens[i]``.

    Backends with a closed vocabulary return it whole; the reference reader returns its
    support (every token with non-zero mass). Probabilities sum to 1 (within 1e-6).
    """

    tokens: tuple[str, ...]
    probs: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.probs):
            raise ValueError("TokenDistribution tokens and probs must align.")

    def as_dict(self) -> dict[str, float]:
        return dict(zip(self.tokens, self.probs))

    def top(self, n: int = 10) -> list[tuple[str, float]]:
        return sorted(zip(self.tokens, self.probs), key=lambda tp: -tp[1])[:n]

    def logprob(self, token: str) -> float:
        p = self.as_dict().get(token, 0.0)
        return math.log(p) if p > 0 else -math.inf


class Generator(ABC):
    """A language model as ragprivacy sees it.

    ``generate`` answers a structured :class:`Prompt`; ``next_token_distribution`` gives the
    model's distribution after ``prompt`` plus an already-generated ``prefix`` (what token
    voting and probability-based attacks need); ``score`` gives teacher-forced
    log-probabilities of a given continuation (perplexity, Min-k%).
    """

    name: str = "generator"

    @abstractmethod
    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        """Answer ``prompt``; ``max_tokens`` overrides the prompt's own limit."""

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        """Answer several prompts (backends override this to batch)."""
        return [self.generate(p, max_tokens=max_tokens) for p in prompts]

    @abstractmethod
    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        """The distribution of the next token after ``prompt`` and ``prefix`` tokens."""

    def next_token(self, prompt: Prompt, prefix: Sequence[str] | str = ()) -> str:
        """The most probable next token (the first maximum of
        :meth:`next_token_distribution`); backends override it when they can answer
        without the whole distribution. An empty distribution reads as end of text
        (``"</s>"``)."""
        dist = self.next_token_distribution(prompt, prefix)
        if not dist.probs:
            return "</s>"
        return dist.tokens[max(range(len(dist.probs)), key=dist.probs.__getitem__)]

    @abstractmethod
    def score(self, prompt: Prompt, continuation: str) -> Completion:
        """Log-probabilities of ``continuation``'s tokens given ``prompt`` (teacher
        forcing)."""

    @property
    def exposes_logprobs(self) -> bool:
        """Whether completions carry log-probabilities."""
        return True

    def config(self) -> dict[str, Any]:
        """JSON-ready settings; with :attr:`name` they key the on-disk call cache."""
        return {}


_REGISTRY: Registry[Generator] = Registry("generator")


def register_generator(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register a generator factory under a short name."""
    _REGISTRY.register(name, factory, replace=replace)


def create_generator(spec: str, **kwargs: Any) -> Generator:
    """Build a generator from a spec: ``"reference"``, ``"hf:PATH"``, ``"gguf:PATH"``,
    ``"smollm2"``, ``"openai:MODEL@BASE_URL"``."""
    return _REGISTRY.create(spec, **kwargs)


def generator_names() -> list[str]:
    return _REGISTRY.names()


def _freeze(options: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(options or {})
