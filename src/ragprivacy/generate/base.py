"""The ``Generator`` interface: structured prompts → text with token log-probabilities."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ragprivacy._registry import Registry
from ragprivacy.generate.prompt import Prompt
from ragprivacy.generate.tokens import detokenize
from ragprivacy.types import Completion

__all__ = [
    "Generator",
    "GreedySteps",
    "TokenDistribution",
    "create_generator",
    "generator_names",
    "join_completions",
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

    ``context_tokens`` is the model's context window in tokens where it is known (None:
    unknown or unbounded); :class:`~ragprivacy.generate.PromptBudget` checks prompts
    against it before retrieval.
    """

    name: str = "generator"
    context_tokens: int | None = None

    @abstractmethod
    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        """Answer ``prompt``; ``max_tokens`` overrides the prompt's own limit."""

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        """Answer several prompts (backends override this to batch)."""
        return [self.generate(p, max_tokens=max_tokens) for p in prompts]

    def stream(self, prompt: Prompt, *, max_tokens: int | None = None) -> Iterator[Completion]:
        """The answer to ``prompt`` as it is generated: each item a piece of it (its text,
        tokens and their log-probabilities), which :func:`join_completions` puts back
        together as :meth:`generate` answers. The default yields :meth:`generate`'s answer
        as one piece; backends that decode token by token (``hf:``, ``smollm2``,
        ``openai:``) override it. The first piece comes once the backend has begun to
        answer, so a backend that cannot be reached fails at the first ``next``. Closing
        the iterator early stops the generation."""
        yield self.generate(prompt, max_tokens=max_tokens)

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

    def greedy_steps(self, prompts: Sequence[Prompt]) -> GreedySteps:
        """A :class:`GreedySteps` session over ``prompts``: their greedy next tokens after a
        shared prefix that grows step by step (what token voting asks of its voters).

        The default asks :meth:`next_token` once per prompt and step; backends that can
        answer every prompt in one forward pass and keep their key/value cache across
        steps (``hf:``) override it."""
        return GreedySteps(self, prompts)

    def tokens_to_text(self, tokens: Sequence[str]) -> str:
        """The text of a sequence of this generator's own tokens, as :meth:`next_token`
        returns them (what token voting releases one at a time). The default joins
        word-level tokens the way the reference reader emits them; backends whose tokens
        are sub-word pieces (``hf:``, ``openai:``) override it."""
        return detokenize(tuple(tokens))

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


class GreedySteps:
    """Greedy next tokens of a fixed list of prompts after one shared prefix, asked again
    as the prefix grows: y_t^(i) = argmax LLM(x, D^i | y_<t) for every voter i at every
    step t of token voting (Private-RAG Alg. 4 lines 6–8).

    This default holds no state: :meth:`next_tokens` asks the generator's
    :meth:`Generator.next_token` once per requested prompt, in the order asked (a
    generator's own caches see the calls in that order). A subclass whose
    :attr:`batched` is true answers *all* prompts in one call at about the cost of a few
    (one batched forward pass per step, the cache kept across steps), so a caller should
    ask for every row rather than only the ones it cannot answer otherwise.

    Use it as a context manager (or call :meth:`close`) so a backend frees its cache.
    """

    batched: bool = False

    def __init__(self, generator: Generator, prompts: Sequence[Prompt]) -> None:
        self.generator = generator
        self.prompts = list(prompts)

    def next_tokens(self, prefix: Sequence[str], rows: Sequence[int] | None = None) -> list[str]:
        """The greedy next token of ``prompts[i]`` after ``prefix`` for each ``i`` in
        ``rows`` (default: every prompt), in that order; end of text reads ``"</s>"``."""
        picked = range(len(self.prompts)) if rows is None else rows
        return [self.generator.next_token(self.prompts[i], prefix) for i in picked]

    def close(self) -> None:
        """Free what the session holds (nothing here)."""

    def __enter__(self) -> GreedySteps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_REGISTRY: Registry[Generator] = Registry("generator")


def register_generator(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register a generator factory under a short name."""
    _REGISTRY.register(name, factory, replace=replace)


def create_generator(spec: str, **kwargs: Any) -> Generator:
    """Build a generator from a spec: ``"reference"``, ``"hf:PATH"``, ``"gguf:PATH"``,
    ``"smollm2"``, ``"openai:MODEL@BASE_URL"``, ``"http:TEMPLATE"`` (an HTTP API declared
    in a template file, :mod:`ragprivacy.generate.http_template`)."""
    return _REGISTRY.create(spec, **kwargs)


def generator_names() -> list[str]:
    return _REGISTRY.names()


def _freeze(options: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(options or {})


def join_completions(pieces: Iterable[Completion]) -> Completion:
    """One :class:`Completion` from the pieces :meth:`Generator.stream` yields: their
    texts and tokens concatenated, log-probabilities kept only where every piece has them,
    ``usage`` the last piece's that reports one (a server reports the whole call's once)."""
    texts: list[str] = []
    tokens: list[str] = []
    logprobs: list[float] | None = []
    usage: Mapping[str, int] | None = None
    for piece in pieces:
        texts.append(piece.text)
        tokens.extend(piece.tokens)
        if logprobs is not None and piece.logprobs is not None:
            logprobs.extend(piece.logprobs)
        else:
            logprobs = None
        usage = piece.usage if piece.usage is not None else usage
    lps = None if logprobs is None else tuple(logprobs)
    return Completion("".join(texts), tuple(tokens), lps, usage=usage)
