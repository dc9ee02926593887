"""The baseline membership attacks the MBA and S-RAG papers compare against (MBA 5.2,
S-RAG 5.1).

* **RAG-MIA** (Anderson et al., 2024): ask "Does this: {document} appear in the context?
  Answer with Yes or No." (the ``rag-mia`` template); the score is 1 for a "Yes" answer
  and 0 otherwise, as S-RAG uses it ("the binary response is directly taken as the
  membership inference result").
* **S²MIA** (Li et al., 2024): send the first half of the document as a continuation
  request and compare the answer with the second half. ``s2mia-s`` scores the cosine
  similarity of the two (MBA's "semantic similarity"; S-RAG's S²MIA-T thresholds it);
  ``s2mia-sp`` feeds (similarity, perplexity of the answer) to a classifier fitted on a
  shadow system (S²MIA-M / S²MIA_s&p). The original used XGBoost; we use scikit-learn's
  gradient boosting (XGBoost is not a dependency). The similarity embedder is the
  attacker's own (``hashing`` by default: no fitting, nothing downloaded; the papers
  used a sentence encoder — pass ``embedder="minilm"`` when it is installed).
* **Min-k% Prob** (Shi et al., 2024): the mean of the lowest k% token log-probabilities
  of the system's answer to the first half (the tokens a black-box API exposes: those it
  generated); MBA varied k from 1 to 20 and kept the best, we default to 20.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragprivacy._validation import check_in_range, check_positive_int
from ragprivacy.attacks.base import MembershipAttack, ShadowData, register_attack
from ragprivacy.attacks.classifier import fit_classifier, shadow_features
from ragprivacy.embed import Embedder, create_embedder
from ragprivacy.errors import DataError
from ragprivacy.generate import Task, detokenize, tokenize
from ragprivacy.rag import Query
from ragprivacy.types import Document, Response

__all__ = ["MinKProbAttack", "RagMIAAttack", "S2MIAAttack", "split_halves"]

_JUDGE_TOKENS = 8  # new tokens for a yes/no answer (RAG-MIA reads the first word)


def split_halves(text: str) -> tuple[str, str]:
    """The first and second halves of ``text`` by token count.

    >>> split_halves("a b c d")
    ('a b', 'c d')
    """
    toks = tokenize(text)
    cut = len(toks) // 2
    return detokenize(toks[:cut]), detokenize(toks[cut:])


class RagMIAAttack(MembershipAttack):
    """RAG-MIA: a direct yes/no membership question (see the module docstring)."""

    name = "rag-mia"

    def queries(self, target: Document) -> list[Query]:
        # the decision reads the first word only, so a long answer buys nothing: with a
        # real LM, 8 new tokens instead of the reader's default (64) is most of the cost
        options = {"template": "rag-mia", "max_tokens": _JUDGE_TOKENS}
        return [Query(target.text, task=Task.JUDGE, options=options)]

    def decide(self, target: Document, responses: Sequence[Response]) -> float:
        words = tokenize(responses[0].text)
        return 1.0 if words and words[0].casefold() == "yes" else 0.0

    def predict(self, score: float) -> bool:
        return score >= 0.5


class _HalfAttack(MembershipAttack):
    """Shared query of S²MIA and Min-k%: continue the first half of the document."""

    def __init__(self, *, max_tokens: int = 128) -> None:
        self.max_tokens = check_positive_int("max_tokens", max_tokens)

    def queries(self, target: Document) -> list[Query]:
        first, second = split_halves(target.text)
        limit = max(1, min(self.max_tokens, len(tokenize(second))))
        return [Query(first, task=Task.CONTINUE, options={"max_tokens": limit})]


class S2MIAAttack(_HalfAttack):
    """S²MIA (see the module docstring).

    Args:
        variant: ``"s"`` (similarity only) or ``"sp"`` (similarity and perplexity with a
            classifier fitted on a shadow system; needs log-probabilities).
        embedder: the attacker's embedder: a registry spec of one that needs no fitting
            (``hashing``, ``minilm``) or a fitted instance.
        max_tokens: longest answer requested.
        seed: seeds the classifier search.
    """

    def __init__(
        self,
        *,
        variant: str = "s",
        embedder: Embedder | str = "hashing",
        max_tokens: int = 128,
        seed: int = 0,
    ) -> None:
        super().__init__(max_tokens=max_tokens)
        if variant not in ("s", "sp"):
            raise DataError(f"The 'variant' parameter must be 's' or 'sp'; got {variant!r}.")
        self.variant = variant
        self.name = "s2mia-s" if variant == "s" else "s2mia-sp"
        self.requires_logprobs = variant == "sp"
        self.learns = variant == "sp"
        self.embedder = create_embedder(embedder) if isinstance(embedder, str) else embedder
        self.seed = check_positive_int("seed", seed, allow_zero=True)
        self.model: Any = None
        self.model_name: str | None = None

    def similarity(self, target: Document, answer: str) -> float:
        _, second = split_halves(target.text)
        if not answer.strip():
            return 0.0
        vecs = self.embedder.encode([second, answer])
        return float(np.dot(vecs[0], vecs[1]))

    def features(self, target: Document, responses: Sequence[Response]) -> list[float]:
        r = responses[0]
        sim = self.similarity(target, r.text)
        if self.variant == "s":
            return [sim]
        self._need_logprobs(responses)
        lps = [x for x in (r.logprobs or ()) if math.isfinite(x)]
        ppl = math.exp(-float(np.mean(lps))) if lps else 1e6
        return [sim, math.log(ppl)]

    def fit(self, shadow: ShadowData) -> S2MIAAttack:
        if self.variant == "s":
            return self
        x, y = shadow_features(self, shadow)
        self.model, self.model_name = fit_classifier(
            x, y, candidates=("gradient-boosting",), seed=self.seed
        )
        return self

    def decide(self, target: Document, responses: Sequence[Response]) -> float:
        f = self.features(target, responses)
        if self.variant == "s":
            return f[0]
        if self.model is None:
            raise DataError("The s2mia-sp attack must be fitted on a shadow system first.")
        return float(self.model.predict_proba(np.asarray([f]))[0, 1])

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "embedder": self.embedder.config(),
            "max_tokens": self.max_tokens,
            "classifier": self.model_name,
        }


class MinKProbAttack(_HalfAttack):
    """Min-k% Prob over the answer's token log-probabilities (see the module docstring).

    Args:
        k: the share of lowest-probability tokens averaged, in (0, 1].
        max_tokens: longest answer requested.
    """

    name = "min-k"
    requires_logprobs = True

    def __init__(self, *, k: float = 0.2, max_tokens: int = 128) -> None:
        super().__init__(max_tokens=max_tokens)
        self.k = check_in_range("k", k, 0.0, 1.0, low_open=True)

    def decide(self, target: Document, responses: Sequence[Response]) -> float:
        self._need_logprobs(responses)
        lps = sorted(max(x, -1e3) for x in (responses[0].logprobs or ()))
        if not lps:
            return -1e3
        n = max(1, int(math.ceil(self.k * len(lps))))
        return float(np.mean(lps[:n]))

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "k": self.k, "max_tokens": self.max_tokens}


class _S2MIASimilarity(S2MIAAttack):
    """``s2mia-s`` (its class attributes say what it needs before it is built)."""

    requires_logprobs = False
    learns = False

    def __init__(
        self, *, embedder: Embedder | str = "hashing", max_tokens: int = 128, seed: int = 0
    ) -> None:
        super().__init__(variant="s", embedder=embedder, max_tokens=max_tokens, seed=seed)


class _S2MIASimilarityPerplexity(S2MIAAttack):
    """``s2mia-sp``: learns on the shadow and needs the answers' log-probabilities."""

    requires_logprobs = True
    learns = True

    def __init__(
        self, *, embedder: Embedder | str = "hashing", max_tokens: int = 128, seed: int = 0
    ) -> None:
        super().__init__(variant="sp", embedder=embedder, max_tokens=max_tokens, seed=seed)


register_attack("rag-mia", RagMIAAttack)
register_attack("s2mia-s", _S2MIASimilarity)
register_attack("s2mia-sp", _S2MIASimilarityPerplexity)
register_attack("min-k", MinKProbAttack)
