"""The reference reader: a deterministic, weight-free stand-in for an instruction-following
LLM that copies what it retrieves (ARCHITECTURE.md, "The reference reader, precisely").

Results produced with it say what such a model leaks; reports must name it
(``generator: reference``) and its settings (:meth:`ReferenceReader.config`).

**Tokens.** The shared word tokenizer (:mod:`ragprivacy.generate.tokens`); matching
ignores case, output keeps the context's case (else the background model's most frequent
form).

**Next-token distribution.** For a history ``h`` (the prompt's text tokens, then what has
been generated)::

    P(w | h) = λ · P_copy(w | h) + (1 − λ) · P_bg(w | h)

* ``P_bg`` — the interpolated Kneser–Ney background model
  (:class:`~ragprivacy.generate.background.BackgroundModel`) over its vocabulary, plus
  ``<unk>`` (the mass of every unseen word) and ``</s>`` (end of text).
* ``P_copy`` — the copy model (:mod:`ragprivacy.generate._copy`): positions of the context
  documents preceded by a suffix of ``h`` (longest ``ℓ*`` ≤ ``max_match`` tokens); each
  votes for the token it holds with weight ``4 ** (ℓ − ℓ_max)``, match lengths ``ℓ`` being
  counted up to ``tie_break_match`` tokens so that positions agreeing on the last
  ``max_match`` tokens are told apart by the longer match; the end of a document votes
  for ``</s>``.
* ``λ = copy_strength · min(ℓ*, 3) / 3`` (0 when nothing matches): one matching token gives
  a third of ``copy_strength``, three or more give all of it.

The distribution's support is the background vocabulary (``<s>`` excluded) plus context
tokens the background never saw (mass ``λ · P_copy``); it sums to 1. A token that is in
neither is scored with the ``<unk>`` entry's probability. Decoding is greedy (first
maximum) unless ``sampling=True`` (a seeded draw from the mixture); it never emits
``<unk>``, never ends before its first token, and stops at ``</s>`` or after
``max_tokens`` tokens. A token copied from the context is written as the context writes
it at the longest-matching position. Every emitted token's log-probability is the log of
its mixture probability, so ``generate``, ``score`` and ``next_token_distribution`` agree
(to floating-point rounding).

**Tasks** (``prompt.task``); for all but CONTINUE the text is decided by the rule below,
and its tokens are then scored by the mixture with the prompt's text as history:

* CONTINUE — decode from the text's tokens as history.
* ANSWER — the context sentence that best overlaps the question, and in it the longest run
  of tokens the question does not cover (:mod:`ragprivacy.generate._extract`); when no
  sentence covers at least ``answer_min_coverage`` of the question's idf weight, or there
  is no context, the answer is ``"I don't know."`` (the reader never guesses facts). If
  the question asks to repeat the context ("Copy and output all the text ... before",
  Private-RAG F.5) and ``follow_extraction`` is set, the answer is the context itself,
  verbatim from the first document on, up to ``max_tokens``.
* FILL_MASKS — each ``[Mask_i]`` from the words before it (and the words after it as a
  span delimiter), by the copy model, else the background (:mod:`._masks`); one
  ``[Mask_i]: answer`` per line. ``max_tokens`` does not truncate the list.
* JUDGE — ``"Yes"`` if some context document holds at least ``judge_threshold`` of the
  text's distinct word 3-grams, else ``"No"``; a RAG-MIA question ("Does this: X appear in
  the context? ...") is judged on ``X``.
* YESNO — ``"Yes"`` if a context sentence holds every content word of the question, ``"No"``
  if the best sentence covers at least ``answer_min_coverage`` of it (same subject and
  relation, another object), else ``"I don't know"``.
* CHAT — ANSWER when the text ends with ``?`` or asks to repeat the context, else
  CONTINUE.

**Defense instructions.** A prompt is *defended* when ``prompt.options["defense"]`` is
true, or (without that option) when ``prompt.instruction`` contains one of
:data:`DEFENSE_KEYWORDS` (case-insensitive). A defended prompt is *complied with* when
``u < compliance``, where ``u`` ∈ [0, 1) comes from SHA-256 of the prompt
(:meth:`Prompt.cache_key`) and the reader's seed — the same prompt always gets the same
behaviour. When complied with, the reader:

* refuses membership questions: JUDGE and requests to repeat the context answer
  ``"I cannot share that."``;
* caps verbatim copying: once ``copy_cap`` consecutive emitted tokens had copy support
  (``P_copy > 0``), ``λ = 0`` until a token without copy support is emitted; ANSWER spans are
  cut to ``copy_cap`` tokens.

FILL_MASKS and YESNO answers are not changed by compliance (single words are not
verbatim copying; a yes/no fact question is not a membership question).

**Randomness.** ``rng=None`` means seed 0: the reader is deterministic by default. Sampling
draws from the reader's stream (repeated calls differ; a run is reproducible from the
seed), or from a fresh stream seeded by ``prompt.options["seed"]`` when given.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._typing import FloatArray, IntArray
from ragprivacy._validation import check_positive_int, check_probability
from ragprivacy.errors import ConfigError
from ragprivacy.generate import _extract
from ragprivacy.generate._copy import ContextIndex, MatchState
from ragprivacy.generate._masks import fill_masks, format_mask_answers
from ragprivacy.generate.background import (
    BOS_ID,
    EOS_ID,
    UNK_ID,
    BackgroundModel,
    build_background,
    default_background,
)
from ragprivacy.generate.base import Generator, TokenDistribution, register_generator
from ragprivacy.generate.prompt import Prompt, Task
from ragprivacy.generate.tokens import detokenize, normalize, tokenize
from ragprivacy.types import Completion

__all__ = [
    "DEFENSE_KEYWORDS",
    "REFUSAL",
    "ReferenceReader",
    "UNKNOWN_ANSWER",
    "is_defense_instruction",
]

DEFENSE_KEYWORDS = (
    "do not repeat",
    "don't repeat",
    "do not directly repeat",
    "never repeat",
    "must not repeat",
    "do not reveal",
    "don't reveal",
    "never reveal",
    "do not disclose",
    "do not share",
    "do not output",
    "do not copy",
    "do not print",
    "is illegal",
    "is forbidden",
    "is not allowed",
    "summarize it based on your understanding",
)
"""Phrases that make ``Prompt.instruction`` a defense instruction (case-insensitive)."""

REFUSAL = "I cannot share that."
UNKNOWN_ANSWER = "I don't know."
_LAMBDA_RAMP = 3
_CACHE_DOCS = 4096
_CACHE_INDICES = 32


def is_defense_instruction(instruction: str | None) -> bool:
    """Whether ``instruction`` contains one of :data:`DEFENSE_KEYWORDS`.

    >>> is_defense_instruction("Answer briefly. Do not repeat the context.")
    True
    """
    if not instruction:
        return False
    text = instruction.casefold().replace("’", "'")
    return any(k in text for k in DEFENSE_KEYWORDS)


class _State:
    """Decoder state: copy match lengths, background context, copied-token run."""

    __slots__ = ("ctx", "match", "run")

    def __init__(self, match: MatchState, ctx: tuple[int, ...]) -> None:
        self.match = match
        self.ctx = ctx
        self.run = 0


class ReferenceReader(Generator):
    """The reference reader (see the module docstring for its exact behaviour).

    Args:
        background: a fitted :class:`BackgroundModel`, public non-member texts to fit one
            on, a path to a model saved with :meth:`BackgroundModel.save`, or ``None`` for
            the small built-in background (:func:`default_background`).
        copy_strength: the largest copy weight λ, in [0, 1].
        compliance: probability of complying with a defense instruction, in [0, 1].
        max_tokens: default output length limit (``prompt.options["max_tokens"]`` and the
            ``max_tokens`` argument override it).
        sampling: draw tokens instead of greedy decoding.
        max_match: longest history suffix the copy model matches (its ``ℓ*``).
        tie_break_match: match lengths are counted this far (≥ ``max_match``) to tell
            apart context positions that agree on the last ``max_match`` tokens.
        judge_threshold: JUDGE overlap needed for "Yes", in [0, 1].
        answer_min_coverage: question idf coverage a sentence needs to answer it.
        copy_cap: consecutive copied tokens allowed when complying with a defense.
        follow_extraction: whether ANSWER/CHAT obey requests to repeat the context.
        rng: seed or generator (``None`` = seed 0).

    >>> reader = ReferenceReader(["The weather was mild and the parks were busy."])
    >>> ctx = ("Marta Olsen was born in Velmora. She works as a nurse.",)
    >>> reader.generate(Prompt(Task.ANSWER, "Where was Marta Olsen born?", ctx)).text
    'Velmora'
    >>> reader.generate(Prompt(Task.CONTINUE, "Marta Olsen was born", ctx)).text
    'in Velmora. She works as a nurse.'
    """

    name = "reference"

    def __init__(
        self,
        background: BackgroundModel | Sequence[str] | str | Path | None = None,
        *,
        copy_strength: float = 0.9,
        compliance: float = 0.0,
        max_tokens: int = 64,
        sampling: bool = False,
        max_match: int = 8,
        tie_break_match: int = 32,
        judge_threshold: float = 0.5,
        answer_min_coverage: float = 0.5,
        copy_cap: int = 5,
        follow_extraction: bool = True,
        rng: RngLike = None,
    ) -> None:
        if background is None:
            self.background = default_background()
        elif isinstance(background, BackgroundModel):
            self.background = background
        elif isinstance(background, (str, Path)):
            self.background = BackgroundModel.load(background)
        else:
            self.background = build_background(list(background))
        self.copy_strength = check_probability("copy_strength", copy_strength)
        self.compliance = check_probability("compliance", compliance)
        self.max_tokens = check_positive_int("max_tokens", max_tokens)
        self.sampling = bool(sampling)
        self.max_match = check_positive_int("max_match", max_match)
        self.tie_break_match = check_positive_int("tie_break_match", tie_break_match)
        if self.tie_break_match < self.max_match:
            raise ConfigError(
                f"The 'tie_break_match' parameter must be >= max_match ({self.max_match}); "
                f"got {tie_break_match}."
            )
        self.judge_threshold = check_probability("judge_threshold", judge_threshold)
        self.answer_min_coverage = check_probability("answer_min_coverage", answer_min_coverage)
        self.copy_cap = check_positive_int("copy_cap", copy_cap)
        self.follow_extraction = bool(follow_extraction)
        if rng is None:
            rng = 0
        if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
            self._rng = make_rng(int(rng))  # validates the seed
            self.seed = int(rng)
        else:
            self._rng = make_rng(rng)
            self.seed = int(self._rng.integers(2**63))
        self._lock = threading.Lock()
        self._docs: OrderedDict[str, tuple[list[str], list[str]]] = OrderedDict()
        self._indices: OrderedDict[tuple[str, ...], ContextIndex] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_lock", "_docs", "_indices"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._docs = OrderedDict()
        self._indices = OrderedDict()

    def __repr__(self) -> str:
        return (
            f"ReferenceReader(copy_strength={self.copy_strength}, compliance={self.compliance}, "
            f"sampling={self.sampling}, background={self.background.state_digest()[:12]})"
        )

    # ----------------------------------------------------------------- identity

    def config(self) -> dict[str, Any]:
        return {
            "copy_strength": self.copy_strength,
            "compliance": self.compliance,
            "max_tokens": self.max_tokens,
            "sampling": self.sampling,
            "max_match": self.max_match,
            "tie_break_match": self.tie_break_match,
            "judge_threshold": self.judge_threshold,
            "answer_min_coverage": self.answer_min_coverage,
            "copy_cap": self.copy_cap,
            "follow_extraction": self.follow_extraction,
            "seed": self.seed,
            "background": {**self.background.config(), "digest": self.background.state_digest()},
        }

    # ----------------------------------------------------------------- caches

    def _tokens(self, text: str) -> list[str]:
        return self._analysed(text)[0]

    def _analysed(self, text: str) -> tuple[list[str], list[str]]:
        """Tokens and their normalised forms (cached per text)."""
        with self._lock:
            hit = self._docs.get(text)
            if hit is not None:
                self._docs.move_to_end(text)
                return hit
        toks = tokenize(text)
        entry = (toks, [normalize(t) for t in toks])
        with self._lock:
            self._docs[text] = entry
            if len(self._docs) > _CACHE_DOCS:
                self._docs.popitem(last=False)
        return entry

    def _index(self, context: tuple[str, ...]) -> ContextIndex:
        with self._lock:
            hit = self._indices.get(context)
            if hit is not None:
                self._indices.move_to_end(context)
                return hit
        analysed = [self._analysed(d) for d in context]
        index = ContextIndex(
            [a[0] for a in analysed],
            self.background,
            max_match=self.max_match,
            horizon=self.tie_break_match,
            doc_norms=[a[1] for a in analysed],
        )
        with self._lock:
            self._indices[context] = index
            if len(self._indices) > _CACHE_INDICES:
                self._indices.popitem(last=False)
        return index

    # ----------------------------------------------------------------- defense

    def is_defended(self, prompt: Prompt) -> bool:
        """Whether ``prompt`` carries a defense instruction (see the module docstring)."""
        flag = prompt.options.get("defense")
        if flag is not None:
            return bool(flag)
        return is_defense_instruction(prompt.instruction)

    def complies(self, prompt: Prompt) -> bool:
        """Whether the reader complies with ``prompt``'s defense (deterministic per prompt)."""
        if self.compliance <= 0.0 or not self.is_defended(prompt):
            return False
        blob = json.dumps(
            {"prompt": prompt.cache_key(), "seed": self.seed}, sort_keys=True, default=str
        )
        u = int.from_bytes(hashlib.sha256(blob.encode()).digest()[:8], "big") / 2.0**64
        return u < self.compliance

    # ----------------------------------------------------------------- the mixture

    def _start(self, index: ContextIndex, history: Sequence[str]) -> _State:
        return _State(index.start(history), self.background.context_ids(history))

    def _lambda(self, longest: int, state: _State, capped: bool) -> float:
        if longest == 0 or (capped and state.run >= self.copy_cap):
            return 0.0
        return self.copy_strength * min(longest, _LAMBDA_RAMP) / _LAMBDA_RAMP

    def _step(
        self, index: ContextIndex, state: _State, capped: bool
    ) -> tuple[float, FloatArray | None]:
        """``(λ, P_copy)`` at the current state."""
        longest, pc = index.copy_distribution(state.match)
        return self._lambda(longest, state, capped), pc

    def _advance(
        self, index: ContextIndex, state: _State, token: str, pc: FloatArray | None
    ) -> None:
        k = index.token_id(token)
        state.run = state.run + 1 if pc is not None and k >= 0 and pc[k] > 0 else 0
        index.advance(state.match, k)
        if self.background.order > 1:
            ctx = (*state.ctx, self.background.token_id(token))
            state.ctx = ctx[len(ctx) - (self.background.order - 1) :]

    def _token_prob(
        self, index: ContextIndex, state: _State, token: str, capped: bool
    ) -> tuple[float, FloatArray | None]:
        lam, pc = self._step(index, state, capped)
        k = index.token_id(token)
        pcw = float(pc[k]) if pc is not None and k >= 0 else 0.0
        b = self.background.lookup(token)
        if b is not None:
            p = lam * pcw + (1.0 - lam) * self.background.prob_id(b, state.ctx)
        elif lam * pcw > 0:
            p = lam * pcw
        else:
            p = (1.0 - lam) * self.background.prob_id(UNK_ID, state.ctx)
        return p, pc

    def _mixture(
        self, index: ContextIndex, state: _State, lam: float, pc: FloatArray | None
    ) -> tuple[FloatArray, IntArray, FloatArray]:
        """Dense mixture over the background ids, and the context ids of copy-only tokens
        with their masses."""
        mix: FloatArray = (1.0 - lam) * self.background.distribution_ids(state.ctx)
        extra_ids: IntArray = np.zeros(0, dtype=np.int64)
        extra_p: FloatArray = np.zeros(0, dtype=np.float64)
        if pc is not None and lam > 0:
            ks = np.flatnonzero(pc)
            b = index.bg_ids[ks]
            known = b >= 0
            mix[b[known]] += lam * pc[ks[known]]
            extra_ids = ks[~known]
            extra_p = lam * pc[extra_ids]
        return mix, extra_ids, extra_p

    def _name(self, index: ContextIndex, state: _State, k: int, b: int) -> str:
        """The written form of the chosen token (context id ``k``, background id ``b``)."""
        form = index.copy_surface(state.match, k) if k > 0 else None
        if form is not None:
            return form
        if b >= 0:
            return index.bg_display.get(b) or self.background.surfaces[b]
        return index.display[k]

    def _greedy_copy(
        self,
        index: ContextIndex,
        state: _State,
        lam: float,
        pc: FloatArray | None,
        allow_end: bool,
    ) -> tuple[int, int, float] | None:
        """The greedy choice ``(context id, background id, probability)`` without the dense
        vector, when a copied token provably beats every other: a token without copy mass
        has probability ``(1 − λ) · P_bg < 1 − λ``. ``None`` when that is not certain."""
        if pc is None or lam <= 0.0:
            return None
        top = float(pc.max())
        if lam * top < 1.0 - lam:
            return None
        floor = top - (1.0 - lam) / lam
        best: tuple[float, int, int] | None = None  # (probability, background id, context id)
        extra: tuple[float, int] | None = None
        for k in np.flatnonzero(pc >= floor).tolist():
            b = int(index.bg_ids[k])
            if b >= 0:
                if b == EOS_ID and not allow_end:
                    continue
                v = lam * float(pc[k]) + (1.0 - lam) * self.background.prob_id(b, state.ctx)
                if best is None or v > best[0] or (v == best[0] and b < best[1]):
                    best = (v, b, k)
            elif extra is None or lam * float(pc[k]) > extra[0]:
                extra = (lam * float(pc[k]), k)
        if extra is not None and (best is None or extra[0] > best[0]):
            return (extra[1], -1, extra[0]) if extra[0] >= 1.0 - lam else None
        if best is None or best[0] < 1.0 - lam:
            return None
        return best[2], best[1], best[0]

    def _choose(
        self,
        mix: FloatArray,
        extra_ids: IntArray,
        extra_p: FloatArray,
        rng: np.random.Generator | None,
        allow_end: bool,
    ) -> tuple[int, int, float]:
        """``(context id or -1, background id or -1, probability)`` of the next token
        from the dense mixture (which it may overwrite)."""
        values = mix.copy() if rng is not None else mix
        keep = float(mix[EOS_ID])
        values[UNK_ID] = 0.0
        values[BOS_ID] = 0.0
        if not allow_end:
            values[EOS_ID] = 0.0
        if rng is None:
            j = int(np.argmax(values))
            if len(extra_p) and float(extra_p.max()) > values[j]:
                e = int(np.argmax(extra_p))
                return int(extra_ids[e]), -1, float(extra_p[e])
            return -1, j, keep if j == EOS_ID else float(values[j])
        cum = np.cumsum(np.concatenate([values, extra_p]))
        j = min(int(np.searchsorted(cum, rng.random() * cum[-1], side="right")), len(cum) - 1)
        if j >= len(values):
            e = j - len(values)
            return int(extra_ids[e]), -1, float(extra_p[e])
        return -1, j, float(mix[j])

    def _score(
        self, index: ContextIndex, history: Sequence[str], tokens: Sequence[str], capped: bool
    ) -> list[float]:
        state = self._start(index, history)
        out = []
        for tok in tokens:
            p, pc = self._token_prob(index, state, tok, capped)
            out.append(math.log(p) if p > 0 else -math.inf)
            self._advance(index, state, tok, pc)
        return out

    # ----------------------------------------------------------------- tasks

    def _limit(self, prompt: Prompt, max_tokens: int | None) -> int:
        value = max_tokens if max_tokens is not None else prompt.options.get("max_tokens")
        return self.max_tokens if value is None else check_positive_int("max_tokens", value)

    def _call_rng(self, prompt: Prompt) -> np.random.Generator | None:
        if not self.sampling:
            return None
        seed = prompt.options.get("seed")
        return self._rng if seed is None else make_rng(seed)

    def _decode(
        self,
        index: ContextIndex,
        history: Sequence[str],
        limit: int,
        capped: bool,
        rng: np.random.Generator | None,
    ) -> Completion:
        state = self._start(index, history)
        tokens: list[str] = []
        logprobs: list[float] = []
        for _ in range(limit):
            lam, pc = self._step(index, state, capped)
            allow_end = bool(tokens)
            fast = self._greedy_copy(index, state, lam, pc, allow_end) if rng is None else None
            if fast is not None:
                k, b, p = fast
            else:
                mix, extra_ids, extra_p = self._mixture(index, state, lam, pc)
                if rng is not None:
                    with self._lock:
                        k, b, p = self._choose(mix, extra_ids, extra_p, rng, allow_end)
                else:
                    k, b, p = self._choose(mix, extra_ids, extra_p, None, allow_end)
                if b >= 0:
                    k = index.bg_ctx.get(b, -1)
            if b == EOS_ID or p <= 0.0:  # end of text, or nothing left with any mass
                break
            tok = self._name(index, state, k, b)
            tokens.append(tok)
            logprobs.append(math.log(p))
            self._advance(index, state, tok, pc)
        return Completion(detokenize(tokens), tuple(tokens), tuple(logprobs))

    def _ruled(
        self,
        index: ContextIndex,
        history: Sequence[str],
        text: str,
        capped: bool,
        tokens: Sequence[str] | None = None,
    ) -> Completion:
        toks = list(tokens) if tokens is not None else tokenize(text)
        return Completion(text, tuple(toks), tuple(self._score(index, history, toks, capped)))

    def _answer(
        self, prompt: Prompt, index: ContextIndex, history: list[str], limit: int, capped: bool
    ) -> Completion:
        if self.follow_extraction and _extract.is_extraction_request(prompt.text):
            if capped:
                return self._ruled(index, history, REFUSAL, capped)
            dump = [t for doc in index.doc_tokens for t in doc][:limit]
            if dump:
                return self._ruled(index, history, detokenize(dump), capped, dump)
        sentences = [s for doc in index.doc_tokens for s in _extract.split_sentences(doc)]
        ranked = _extract.rank_sentences(history, sentences)
        span = _extract.answer_span(history, ranked, min_coverage=self.answer_min_coverage)
        if not span:
            return self._ruled(index, history, UNKNOWN_ANSWER, capped)
        span = span[: min(limit, self.copy_cap) if capped else limit]
        return self._ruled(index, history, detokenize(span), capped, span)

    def _judge(
        self, prompt: Prompt, index: ContextIndex, history: list[str], capped: bool
    ) -> Completion:
        if capped:
            return self._ruled(index, history, REFUSAL, capped)
        target = self._tokens(_extract.parse_judge_target(prompt.text))
        overlap = max(
            (_extract.ngram_containment(target, doc) for doc in index.doc_tokens), default=0.0
        )
        verdict = "Yes" if overlap >= self.judge_threshold else "No"
        return self._ruled(index, history, verdict, capped)

    def _yesno(self, index: ContextIndex, history: list[str], capped: bool) -> Completion:
        sentences = [s for doc in index.doc_tokens for s in _extract.split_sentences(doc)]
        ranked = _extract.rank_sentences(history, sentences)
        verdict = _extract.yes_no(history, ranked, min_coverage=self.answer_min_coverage)
        return self._ruled(index, history, verdict, capped)

    def _effective_task(self, prompt: Prompt) -> Task:
        if prompt.task is Task.CHAT:
            text = prompt.text.rstrip()
            if text.endswith("?") or _extract.is_extraction_request(text):
                return Task.ANSWER
            return Task.CONTINUE
        return prompt.task

    # ----------------------------------------------------------------- Generator API

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        """Answer ``prompt`` by its task's rule (see the module docstring)."""
        index = self._index(prompt.context)
        history = tokenize(prompt.text)
        capped = self.complies(prompt)
        limit = self._limit(prompt, max_tokens)
        task = self._effective_task(prompt)
        if task is Task.CONTINUE:
            return self._decode(index, history, limit, capped, self._call_rng(prompt))
        if task is Task.ANSWER:
            return self._answer(prompt, index, history, limit, capped)
        if task is Task.JUDGE:
            return self._judge(prompt, index, history, capped)
        if task is Task.YESNO:
            return self._yesno(index, history, capped)
        answers = fill_masks(prompt.text, index, self.background)
        return self._ruled(index, history, format_mask_answers(answers), capped)

    def score(self, prompt: Prompt, continuation: str | Sequence[str]) -> Completion:
        """Teacher-forced log-probabilities of ``continuation`` (a text, or tokens as a
        sequence) after the prompt's text."""
        index = self._index(prompt.context)
        if isinstance(continuation, str):
            text, tokens = continuation, tokenize(continuation)
        else:
            tokens = list(continuation)
            text = detokenize(tokens)
        logprobs = self._score(index, tokenize(prompt.text), tokens, self.complies(prompt))
        return Completion(text, tuple(tokens), tuple(logprobs))

    def _next_mixture(
        self, prompt: Prompt, prefix: Sequence[str] | str
    ) -> tuple[ContextIndex, _State, FloatArray | None, FloatArray, IntArray, FloatArray]:
        """Index, state, copy distribution and mixture after the prompt and ``prefix``."""
        index = self._index(prompt.context)
        capped = self.complies(prompt)
        extra = tokenize(prefix) if isinstance(prefix, str) else list(prefix)
        state = self._start(index, tokenize(prompt.text))
        for tok in extra:
            _, pc = index.copy_distribution(state.match)
            self._advance(index, state, tok, pc)
        lam, pc = self._step(index, state, capped)
        mix, extra_ids, extra_p = self._mixture(index, state, lam, pc)
        return index, state, pc, mix, extra_ids, extra_p

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        """The whole next-token distribution after the prompt's text and ``prefix``.

        Tokens are the background vocabulary's forms (the context's form where the context
        holds the token), ``"</s>"`` (end of text), ``"<unk>"`` (every unseen word), and
        context tokens the background never saw.
        """
        index, state, pc, mix, extra_ids, extra_p = self._next_mixture(prompt, prefix)
        names = list(self.background.surfaces)
        for b, disp in index.bg_display.items():
            names[b] = disp
        extra_names = {int(k): index.display[int(k)] for k in extra_ids}
        if pc is not None:
            for k in np.flatnonzero(pc).tolist():
                form = index.copy_surface(state.match, k)
                b = int(index.bg_ids[k])
                if form is not None and b >= 0:
                    names[b] = form
                elif form is not None and k in extra_names:
                    extra_names[k] = form
        del names[BOS_ID]
        probs = np.delete(mix, BOS_ID).tolist()
        names.extend(extra_names[int(k)] for k in extra_ids)
        probs.extend(extra_p.tolist())
        return TokenDistribution(tuple(names), tuple(probs))

    def next_token(self, prompt: Prompt, prefix: Sequence[str] | str = ()) -> str:
        """The most probable next token, exactly as the first maximum of
        :meth:`next_token_distribution` (same order, same written form) without building
        the dense distribution's names: DP voting asks this once per voter and token."""
        index, state, pc, mix, extra_ids, extra_p = self._next_mixture(prompt, prefix)
        mix[BOS_ID] = -np.inf
        b = int(np.argmax(mix))
        if extra_p.size and float(extra_p.max()) > float(mix[b]):
            k = int(extra_ids[int(np.argmax(extra_p))])
            form = index.copy_surface(state.match, k) if pc is not None else None
            return form if form is not None else index.display[k]
        name = index.bg_display[b] if b in index.bg_display else self.background.surfaces[b]
        if pc is not None:
            ks = np.flatnonzero(pc)
            for k in ks[index.bg_ids[ks] == b].tolist():  # the last copy form wins, as above
                form = index.copy_surface(state.match, k)
                if form is not None:
                    name = form
        return name


register_generator("reference", ReferenceReader)
