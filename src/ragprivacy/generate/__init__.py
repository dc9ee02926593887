"""Prompts → text and token probabilities."""

from __future__ import annotations

from ragprivacy.generate.base import (
    Generator,
    TokenDistribution,
    create_generator,
    generator_names,
    register_generator,
)
from ragprivacy.generate.prompt import Prompt, Task
from ragprivacy.generate.tokens import detokenize, normalize, tokenize

__all__ = [
    "Generator",
    "Prompt",
    "Task",
    "TokenDistribution",
    "create_generator",
    "detokenize",
    "generator_names",
    "normalize",
    "register_generator",
    "tokenize",
]
