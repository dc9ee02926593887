"""A fake LLM for the voting systems' tests: it answers 'alpha' from a context document
that holds 'secret alpha' and "I don't know." otherwise, and counts its calls."""

from __future__ import annotations

from collections.abc import Sequence

from ragprivacy.generate import Generator, Prompt, TokenDistribution, tokenize
from ragprivacy.types import Completion

VOCAB = ["alpha", "beta", "I", "don't", "know", ".", "</s>"]


class FakeLLM(Generator):
    """Answers 'alpha' when a context document holds 'secret alpha', else "I don't know."."""

    name = "fake"

    def __init__(self) -> None:
        self.generate_calls = 0
        self.prompts = 0

    def _answer(self, prompt: Prompt) -> list[str]:
        if any("secret alpha" in d for d in prompt.context):
            return ["alpha"]
        return tokenize("I don't know.")

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return self.generate_batch([prompt])[0]

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        self.generate_calls += 1
        self.prompts += len(prompts)
        return [Completion(" ".join(self._answer(p)), tuple(self._answer(p))) for p in prompts]

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        return TokenDistribution(("beta", "</s>"), (0.6, 0.4))

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        toks = tokenize(continuation)
        return Completion(continuation, tuple(toks), tuple(-1.0 for _ in toks))
