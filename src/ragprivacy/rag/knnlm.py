"""``knnlm``: kNN-LM (Khandelwal et al. 2020) as the RP paper uses it, over any retriever.

The datastore holds one entry per token position of the corpus: the key is the text of
the ``window`` tokens before the position (embedded by the knowledge base's embedder, the
stand-in for the LM's last hidden state), the value is the token at the position
(:func:`knn_datastore`). Generation is token by token (RP paper Alg. 1): the query is the
last ``window`` tokens of prompt + output; the retriever returns the K nearest keys;
p_kNN(w) ∝ Σ_{neighbours with value w} exp(score/T) (a softmax over their similarities,
RP §3.1); the next token is the argmax of λ·p_kNN + (1 − λ)·p_LM, with λ = 0.1 and K = 1024
in the RP paper (§4.1). Any retriever plugs in — plain top-K, random projection, DP-RP-G,
noisy top-K — so the defenses apply to kNN-LM and standard RAG alike.

Privacy: each generated token is one retrieval; the response reports the composed event
of the retrievals (Gaussian events compose exactly: ε from μ = √(Σμ²), at ``delta``; a
retriever without a guarantee makes the answer's ε infinite). A failure after the first
search is charged like an answer (:func:`ragprivacy.rag.charged_on_failure`): every
search made so far stays spent.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragprivacy._validation import check_in_range, check_positive, check_positive_int
from ragprivacy.corpus import Corpus
from ragprivacy.errors import BudgetExhaustedError, GeneratorUnavailableError, RagPrivacyError
from ragprivacy.generate import (
    Generator,
    Prompt,
    Task,
    TokenDistribution,
    detokenize,
    normalize,
    normalize_all,
    tokenize,
)
from ragprivacy.rag.base import Query, RAGSystem, answer_cost, charged_failure, register_system
from ragprivacy.retrieval import Retriever
from ragprivacy.types import Document, PrivacyCost, PrivacyEvent, Response, Retrieval

__all__ = ["KNNLM", "KNN_WINDOW", "knn_datastore"]

EOS = "</s>"
KNN_WINDOW = 6  # key length in tokens, shared by the datastore and the model


def knn_datastore(corpus: Corpus, *, window: int = KNN_WINDOW, stride: int = 1) -> Corpus:
    """One entry per token position (every ``stride``-th): key text = the ``window``
    tokens before it, ``metadata["next"]`` = the token (``</s>`` after the last), and
    ``metadata["doc"]`` = the source document id."""
    window = check_positive_int("window", window)
    stride = check_positive_int("stride", stride)
    entries = []
    for doc in corpus:
        toks = [*tokenize(doc.text), EOS]
        for i in range(1, len(toks), stride):
            key = detokenize(toks[max(0, i - window) : i])
            entries.append(Document(f"{doc.id}@{i}", key, {"next": toks[i], "doc": doc.id}))
    return Corpus(entries, name=f"{corpus.name}-knn")


_NEXT: weakref.WeakKeyDictionary[Corpus, list[str]] = weakref.WeakKeyDictionary()
_NEXT_LOCK = threading.Lock()


def _next_tokens(datastore: Corpus) -> list[str]:
    """Each datastore entry's value (its next token), read once per datastore: systems
    built afresh per attack target share one datastore of about a million entries."""
    with _NEXT_LOCK:
        hit = _NEXT.get(datastore)
    if hit is None:
        hit = [str(doc.metadata.get("next", EOS)) for doc in datastore]
        with _NEXT_LOCK:
            _NEXT[datastore] = hit
    return hit


class KNNLM(RAGSystem):
    """kNN-LM generation (see the module docstring).

    Args:
        retriever: a retriever over a :func:`knn_datastore` knowledge base; its k is K.
        generator: the parametric LM (p_LM from ``next_token_distribution``).
        lam: λ, the weight of p_kNN.
        temperature: T of the softmax over neighbour scores.
        window: key length in tokens (as used to build the datastore).
        max_tokens: T_max.
        delta: δ at which composed Gaussian retrieval events are reported.
    """

    name = "knnlm"

    def __init__(
        self,
        retriever: Retriever,
        generator: Generator,
        *,
        lam: float = 0.1,
        temperature: float = 0.1,
        window: int = KNN_WINDOW,
        max_tokens: int = 32,
        delta: float = 1e-5,
    ) -> None:
        self.retriever = retriever
        self.generator = generator
        self.lam = check_in_range("lam", lam, 0.0, 1.0)
        self.temperature = check_positive("temperature", temperature)
        self.window = check_positive_int("window", window)
        self.max_tokens = check_positive_int("max_tokens", max_tokens)
        self.delta = check_in_range("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
        self._next = _next_tokens(retriever.kb.corpus)

    def _knn(
        self, history: Sequence[str], account: str | None, made: list[Retrieval]
    ) -> tuple[dict[str, float], PrivacyEvent]:
        r = self.retriever.retrieve(detokenize(list(history[-self.window :])), account=account)
        made.append(r)
        if not r.indices:
            return {}, r.event
        s = np.asarray(r.scores, dtype=np.float64) / self.temperature
        w = np.exp(s - s.max())
        w /= w.sum()
        out: dict[str, float] = {}
        for pos, weight in zip(r.indices, w):
            tok = self._next[pos]
            out[tok] = out.get(tok, 0.0) + float(weight)
        return out, r.event

    def _mix_argmax(self, dist: TokenDistribution, knn: dict[str, float]) -> tuple[str, str, float]:
        """argmax over normalised tokens of λ·p_kNN + (1 − λ)·p_LM: (key, written form,
        mixed probability). The LM's form wins over a neighbour's; ties go to the token
        met first (LM order, then neighbour order).

        Only the LM's own argmax and the ≤ K neighbour tokens can win (no other token
        scores above (1 − λ)·max p_LM), so the vocabulary is normalised and searched in
        C instead of being mixed entry by entry; a test checks the result against the
        entry-by-entry mix.
        """
        keys = normalize_all(dist.tokens)
        lm = dict(zip(keys, dist.probs))  # a repeated form keeps its last probability
        scale = 1 - self.lam
        mixed: dict[str, float] = {}
        forms: dict[str, str] = {}
        for tok, p in knn.items():
            key = normalize(tok)
            if key not in mixed:
                mixed[key] = scale * lm.get(key, 0.0)
                forms[key] = tok
            mixed[key] += self.lam * p
        if lm:
            # the first key at the largest *scaled* probability: scaling may tie values
            # that differ (λ = 1 ties them all)
            scaled = scale * np.fromiter(lm.values(), dtype=np.float64, count=len(lm))
            at = int(np.argmax(scaled))
            mixed.setdefault(list(lm)[at], float(scaled[at]))
        top = max(mixed.values())
        winners = [key for key, v in mixed.items() if v == top]
        if len(winners) > 1:
            first = {key: i for i, key in reversed(list(enumerate(keys))) if key in winners}
            winners.sort(key=lambda key: first.get(key, len(keys) + list(mixed).index(key)))
        best = winners[0]
        if best not in lm:
            return best, forms[best], mixed[best]
        last = len(keys) - 1 - keys[::-1].index(best)  # the form a repeated key kept
        return best, dist.tokens[last], mixed[best]

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        q = Query.of(query)
        prompt = Prompt(Task.CONTINUE if q.task == Task.ANSWER else q.task, q.text, ())
        history = tokenize(q.text)
        out: list[str] = []
        logprobs: list[float] = []
        events: list[PrivacyEvent] = []
        made: list[Retrieval] = []
        calls = 0
        try:
            for _ in range(self.max_tokens):
                dist = self.generator.next_token_distribution(prompt, out)
                knn, event = self._knn(history + out, account, made)
                calls += 1
                events.append(event)
                best, form, p_best = self._mix_argmax(dist, knn)
                if best == normalize(EOS) or best == "<unk>":
                    break
                out.append(form)
                logprobs.append(float(np.log(max(p_best, 1e-300))))
        except Exception as exc:
            # A failure is an answer (rag.charged_on_failure): every search made so far
            # stays charged, since the prefix each one saw was read from the datastore and
            # how far the answer got before failing depends on it.
            if isinstance(exc, RagPrivacyError) and not made:
                raise  # refused before any search (e.g. over budget): nothing was read
            if isinstance(exc, GeneratorUnavailableError):
                raise charged_failure(exc) from None  # a later call: earlier ones read data
            if isinstance(exc, BudgetExhaustedError):
                raise BudgetExhaustedError(
                    "The account's budget ran out partway through the answer; the "
                    f"{len(made)} searches it made were charged (how many an answer needs "
                    "depends on the data) and nothing was released."
                ) from None
            raise charged_failure(exc) from None
        return Response(
            text=detokenize(out),
            tokens=tuple(out),
            logprobs=tuple(logprobs),
            privacy=self._cost(events),
            metadata={"retrievals": calls},
        )

    def _cost(self, events: list[PrivacyEvent]) -> PrivacyCost:
        # Every generated token mixes in the neighbours of one datastore search: the answer
        # costs the composition of the searches (no guarantee if any search gives none).
        return answer_cost(
            events, mechanism=self.retriever.name, delta=self.delta, scope="retrieval"
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "retriever": self.retriever.config(),
            "generator": self.generator.name,
            "lam": self.lam,
            "temperature": self.temperature,
            "window": self.window,
        }


register_system("knnlm", KNNLM)
