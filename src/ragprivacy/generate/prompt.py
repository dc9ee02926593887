"""Structured prompts: a task, an optional defense instruction, context documents and a
query or text; ``render()`` turns one into plain text for real LLMs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

__all__ = ["Prompt", "Task"]


class Task(StrEnum):
    """What a prompt asks the model to do."""

    ANSWER = "answer"  # answer a question from the context (RAG QA)
    CONTINUE = "continue"  # continue the given text
    FILL_MASKS = "fill_masks"  # predict each [Mask_i] of the given text (MBA)
    JUDGE = "judge"  # does this text appear in the context? (RAG-MIA)
    YESNO = "yesno"  # a yes/no question about a fact
    CHAT = "chat"  # free-form instruction, rendered as is


@dataclass(frozen=True, slots=True)
class Prompt:
    """A structured prompt.

    Attributes:
        task: what is asked.
        text: the question, the text to continue, the masked text, or the text to judge.
        context: the retrieved documents' texts, best first (empty for non-RAG).
        instruction: a system/defense instruction (e.g. "do not repeat the context").
        options: task settings (e.g. ``max_tokens``, ``template`` name).
    """

    task: Task
    text: str
    context: tuple[str, ...] = ()
    instruction: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", Task(self.task))
        object.__setattr__(self, "context", tuple(self.context))
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def with_context(self, context: tuple[str, ...] | list[str]) -> Prompt:
        return Prompt(self.task, self.text, tuple(context), self.instruction, self.options)

    def render(self) -> str:
        """Plain text for a real LLM, using the task's template (see ``templates``)."""
        from ragprivacy.generate.templates import render_prompt

        return render_prompt(self)

    def cache_key(self) -> dict[str, Any]:
        """A JSON-ready description (keys the generator call cache)."""
        return {
            "task": self.task.value,
            "text": self.text,
            "context": list(self.context),
            "instruction": self.instruction,
            "options": {k: self.options[k] for k in sorted(self.options)},
        }
