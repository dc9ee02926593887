"""Deterministic synthetic corpora with PII and QA ground truth.

Kinds (``synthesize(kind, n, seed=...)``):

* ``"medical"`` — HealthCareMagic-style patient–doctor dialogues with names, ages,
  contacts, conditions and drugs, and misspellings recorded in metadata;
* ``"email"`` — Enron-style threads with headers, signatures, e-mail addresses, URLs and
  phone numbers;
* ``"legal"`` — ECHR-style case paragraphs with applicants, states, dates, case numbers
  and courts;
* ``"knowledge"`` — a fictional world of people, organisations and places, one document
  per entity, with single- and multi-hop questions (the QA contract is in
  :mod:`ragprivacy.corpus.synthetic.knowledge`).

Every document's ``pii`` spans satisfy ``doc.text[s.start:s.end] == s.value``. New kinds
register with :func:`register_synthetic_kind`. :func:`background_texts` gives text from
an independent stream (and a disjoint half of the name space) for a reader's background
model.
"""

from __future__ import annotations

from ragprivacy.corpus.synthetic._base import (
    GenerationContext,
    SyntheticGenerator,
    background_texts,
    register_synthetic_kind,
    synthesis_estimate,
    synthesize,
    synthetic_kinds,
)
from ragprivacy.corpus.synthetic.email import generate_email
from ragprivacy.corpus.synthetic.knowledge import generate_knowledge
from ragprivacy.corpus.synthetic.legal import generate_legal
from ragprivacy.corpus.synthetic.medical import generate_medical

register_synthetic_kind("email", generate_email)
register_synthetic_kind("knowledge", generate_knowledge)
register_synthetic_kind("legal", generate_legal)
register_synthetic_kind("medical", generate_medical)

__all__ = [
    "GenerationContext",
    "SyntheticGenerator",
    "background_texts",
    "register_synthetic_kind",
    "synthesis_estimate",
    "synthesize",
    "synthetic_kinds",
]
