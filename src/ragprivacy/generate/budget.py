"""A prompt whose size does not depend on the retrieved documents.

Whether a generator accepts a prompt can depend on its length: every hosted model answers
HTTP 400 ("context length exceeded") above its context window, so if the retrieved
documents decide the prompt's length, the caller learns something about them from
*whether* the request failed. :class:`PromptBudget` takes that channel away: each
retrieved document gets the same budget — cut to it, and padded up to it — so the prompt
that carries k documents has one size for every k documents, and :meth:`PromptBudget.check`
compares that size with the generator's context *before* retrieval, where a refusal reads
nothing private and costs nothing.

Sizes are counted in UTF-8 bytes: a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen,
SmolLM2, OpenAI's o200k/cl100k) never makes more tokens than bytes, so a prompt of B
bytes is at most B tokens whatever the text — an upper bound that holds without the
server's tokenizer, which a remote endpoint does not share. ``overhead_tokens`` covers
what the server adds around the text (chat-template role markers, BOS).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ragprivacy._validation import check_positive_int
from ragprivacy.errors import ConfigError
from ragprivacy.generate.prompt import Prompt

__all__ = ["PromptBudget", "fit_document"]

_PAD = " "


def fit_document(text: str, size: int, *, pad: bool = True) -> str:
    """``text`` cut to at most ``size`` UTF-8 bytes (at a character boundary) and, with
    ``pad``, filled with spaces to exactly ``size`` bytes.

    >>> fit_document("héllo", 4), len(fit_document("héllo", 4).encode())
    ('hél', 4)
    >>> fit_document("ab", 4)
    'ab  '
    """
    raw = text.encode("utf-8", errors="replace")
    cut = raw[:size].decode("utf-8", errors="ignore")  # drops a split last character
    used = len(cut.encode("utf-8"))
    return cut + _PAD * (size - used) if pad else cut


@dataclass(frozen=True, slots=True, kw_only=True)
class PromptBudget:
    """Each retrieved document's share of the prompt, and the generator's context.

    Attributes:
        doc_tokens: the budget of one retrieved document, in UTF-8 bytes (an upper bound
            on its tokens for byte-level tokenizers, module docstring).
        context_tokens: the generator's context window in tokens (None: not checked).
        overhead_tokens: what the server adds around the prompt's text (template markers).
        pad: fill each document up to its budget, so the prompt's size is the same for
            every retrieval (without it only the upper bound is data-independent).
    """

    doc_tokens: int = 1024
    context_tokens: int | None = None
    overhead_tokens: int = 64
    pad: bool = True

    def __post_init__(self) -> None:
        check_positive_int("doc_tokens", self.doc_tokens)
        check_positive_int("overhead_tokens", self.overhead_tokens, allow_zero=True)
        if self.context_tokens is not None:
            check_positive_int("context_tokens", self.context_tokens)

    def for_generator(self, generator: object) -> PromptBudget:
        """This budget, with ``generator``'s ``context_tokens`` where it names none."""
        context = getattr(generator, "context_tokens", None)
        if self.context_tokens is not None or context is None:
            return self
        return replace(self, context_tokens=int(context))

    def fit(self, texts: Sequence[str]) -> tuple[str, ...]:
        """The retrieved documents, each cut (and padded) to :attr:`doc_tokens` bytes."""
        return tuple(fit_document(t, self.doc_tokens, pad=self.pad) for t in texts)

    def prompt_tokens(self, prompt: Prompt, documents: int) -> int:
        """The most tokens ``prompt`` can take with ``documents`` documents of this budget
        (its rendered bytes with placeholders of the budget's size, plus the overhead)."""
        filler = tuple("x" * self.doc_tokens for _ in range(documents))
        rendered = prompt.with_context(filler).render()  # the instruction included
        return len(rendered.encode()) + self.overhead_tokens

    def check(self, prompt: Prompt, documents: int, max_tokens: int) -> None:
        """Refuse, before anything private is read, a prompt that could overflow the
        context with ``documents`` documents and ``max_tokens`` new tokens.

        The bound depends only on the query, the budget and ``documents`` — never on which
        documents a retrieval would return — so the refusal reveals nothing about them.
        """
        if self.context_tokens is None:
            return
        need = self.prompt_tokens(prompt, documents) + int(max_tokens)
        if need > self.context_tokens:
            raise ConfigError(
                f"This request could need {need} tokens ({documents} documents of "
                f"{self.doc_tokens} each, the query and {max_tokens} new tokens), over the "
                f"generator's context of {self.context_tokens}; shorten the query or ask for "
                "fewer tokens or documents. Nothing was read or spent."
            )
