"""S-RAG: the shadow-RAG membership audit (S-RAG Section 4, Alg. 1).

**Preparation** (4.2). The attacker builds a shadow RAG over part of an auxiliary corpus
(``D_s,i``, members) and keeps the rest out (``D_s,o``); :meth:`SRAGAttack.fit` queries
the shadow with both and trains a membership classifier on the features below.

**Segmentation** (Alg. 1, factor ``k``). A sample's units (the shared word tokenizer's
tokens) are split into a prefix (the first ⌊len/2⌋) and a suffix; the proxy LM gives the
probability ``p_i`` of each suffix unit after everything before it (lines 7–10); the
``n = ⌊ℓ/k⌋`` least probable positions (lines 11–12) each give one query: the prefix plus
the suffix up to that position (lines 13–17; the pseudocode's loop appends the suffix
units one by one). Deviation: only word units are candidates — our tokenizer makes each
punctuation mark its own unit, which GPT-2 (the paper's proxy) mostly merges.

**Query** (4.2.2). Each segment is sent as a continuation with the audit-intent prompt
(the ``srag-audit`` template, verbatim from the paper); retrieval uses the segment.

**Features** (4.2.3, eqs. 3–5). ``p_i`` is the probability of the word the system
predicted next (its first generated token's probability; ``probability="correct"``
counts it only when it is the true next word). The feature vector counts the ``p_i`` in
each of ``m`` equal intervals of [0, 1] (``j = ⌊m·p⌋ + 1``, ``p = 1`` in the last).
Without log-probabilities ``p_i`` is 1 when the predicted word is the true next word and
0 otherwise (a text-only fallback, not in the paper).

**Classifier.** The paper uses AutoGluon; we choose among scikit-learn models by
cross-validated AUC (:func:`~ragprivacy.attacks.classifier.fit_classifier`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragprivacy._validation import check_choice, check_positive_int
from ragprivacy.attacks.base import MembershipAttack, ShadowData, register_attack
from ragprivacy.attacks.classifier import CLASSIFIERS, fit_classifier, shadow_features
from ragprivacy.attacks.proxy import ProxyLM, create_proxy
from ragprivacy.attacks.stopwords import is_punctuation
from ragprivacy.errors import DataError
from ragprivacy.generate import Task, detokenize, normalize, tokenize
from ragprivacy.rag import Query
from ragprivacy.types import Document, Response

__all__ = ["SRAGAttack", "Segment", "histogram_features", "segment_sample"]


@dataclass(frozen=True, slots=True)
class Segment:
    """One segmented query: the text sent and the true next word."""

    text: str
    next_word: str


def segment_sample(text: str, proxy: ProxyLM, k: int) -> list[Segment]:
    """S-RAG Alg. 1: the ``⌊ℓ/k⌋`` segments ending before the suffix's least probable
    word units (in text order)."""
    k = check_positive_int("k", k)
    units = tokenize(text)
    half = len(units) // 2
    prefix, suffix = units[:half], units[half:]
    probs: list[tuple[float, int]] = []
    for i, u in enumerate(suffix):
        if is_punctuation(u):
            continue
        probs.append((proxy.word_prob(prefix + suffix[:i], u), i))
    n = len(suffix) // k
    chosen = sorted(i for _, i in sorted(probs, key=lambda pi: (pi[0], pi[1]))[:n])
    return [Segment(detokenize(prefix + suffix[:i]), suffix[i]) for i in chosen]


def histogram_features(probs: Sequence[float], m: int = 10) -> list[int]:
    """Counts of ``probs`` in ``m`` equal intervals of [0, 1] (S-RAG eqs. 3–5).

    >>> histogram_features([0.0, 0.05, 0.5, 0.99, 1.0], m=10)
    [2, 0, 0, 0, 0, 1, 0, 0, 0, 2]
    """
    m = check_positive_int("m", m)
    out = [0] * m
    for p in probs:
        j = min(m - 1, max(0, int(math.floor(m * float(p)))))
        out[j] += 1
    return out


class SRAGAttack(MembershipAttack):
    """The S-RAG audit (see the module docstring).

    Args:
        proxy: the generic LM for segmentation (``"ngram"``, ``"hf:PATH"`` or a proxy).
        background_texts: public non-member texts for the ``ngram`` proxy.
        k: the segmentation factor (one query per ``k`` suffix units).
        intervals: ``m``, the number of histogram intervals (10 in the paper).
        probability: ``"predicted"`` (the paper) or ``"correct"`` (see above).
        max_tokens: tokens requested per query (only the first is read).
        classifiers: candidate model families for the cross-validated choice.
        seed: seeds the classifier search.
    """

    name = "srag"
    learns = True

    def __init__(
        self,
        proxy: ProxyLM | str = "ngram",
        *,
        background_texts: Sequence[str] = (),
        k: int = 10,
        intervals: int = 10,
        probability: str = "predicted",
        max_tokens: int = 3,
        classifiers: Sequence[str] = CLASSIFIERS,
        seed: int = 0,
    ) -> None:
        self.proxy = create_proxy(proxy, background_texts=background_texts)
        self.k = check_positive_int("k", k)
        self.intervals = check_positive_int("intervals", intervals)
        self.probability = check_choice("probability", probability, ("correct", "predicted"))
        self.max_tokens = check_positive_int("max_tokens", max_tokens)
        for c in classifiers:
            check_choice("classifiers", c, CLASSIFIERS)
        self.classifiers = tuple(classifiers)
        self.seed = check_positive_int("seed", seed, allow_zero=True)
        self.model: Any = None
        self.model_name: str | None = None
        self._segments: dict[str, list[Segment]] = {}

    def segments(self, target: Document) -> list[Segment]:
        hit = self._segments.get(target.text)
        if hit is None:
            hit = segment_sample(target.text, self.proxy, self.k)
            if not hit:  # a very short sample: predict its last word
                units = tokenize(target.text)
                if len(units) < 2:
                    raise DataError(
                        f"Document {target.id!r} is too short for S-RAG (fewer than 2 units)."
                    )
                hit = [Segment(detokenize(units[:-1]), units[-1])]
            self._segments[target.text] = hit
        return hit

    def queries(self, target: Document) -> list[Query]:
        return [
            Query(
                s.text,
                task=Task.CONTINUE,
                options={"template": "srag-audit", "max_tokens": self.max_tokens},
            )
            for s in self.segments(target)
        ]

    def probabilities(self, target: Document, responses: Sequence[Response]) -> list[float]:
        out = []
        for seg, r in zip(self.segments(target), responses):
            toks = list(r.tokens) or tokenize(r.text)
            first = toks[0] if toks else ""
            right = normalize(first) == normalize(seg.next_word)
            if r.logprobs is not None and r.logprobs:
                p = math.exp(r.logprobs[0])
                out.append(p if (self.probability == "predicted" or right) else 0.0)
            else:
                out.append(1.0 if right else 0.0)
        return out

    def features(self, target: Document, responses: Sequence[Response]) -> list[int]:
        return histogram_features(self.probabilities(target, responses), self.intervals)

    def fit(self, shadow: ShadowData) -> SRAGAttack:
        """Train the audit model on the shadow system's members and non-members."""
        x, y = shadow_features(self, shadow)
        self.model, self.model_name = fit_classifier(
            x, y, candidates=self.classifiers, seed=self.seed
        )
        return self

    def decide(self, target: Document, responses: Sequence[Response]) -> float:
        if self.model is None:
            raise DataError("The srag attack must be fitted on a shadow system first.")
        f = np.asarray([self.features(target, responses)], dtype=np.float64)
        return float(self.model.predict_proba(f)[0, 1])

    def predict(self, score: float) -> bool:
        return score >= 0.5

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "k": self.k,
            "intervals": self.intervals,
            "probability": self.probability,
            "proxy": self.proxy.config(),
            "classifier": self.model_name,
        }


register_attack("srag", SRAGAttack)
