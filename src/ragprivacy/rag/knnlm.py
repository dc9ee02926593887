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
of the retrievals (Gaussian events compose exactly: ε from μ = √(Σμ²), at ``delta``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ragprivacy._validation import check_in_range, check_positive, check_positive_int
from ragprivacy.corpus import Corpus
from ragprivacy.dp import GaussianEvent, compose, exact_gaussian_epsilon
from ragprivacy.generate import Generator, Prompt, Task, detokenize, normalize, tokenize
from ragprivacy.rag.base import Query, RAGSystem, register_system
from ragprivacy.retrieval import Retriever
from ragprivacy.types import Document, PrivacyCost, Response

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
        kb = retriever.kb
        self._next = [str(kb.document(i).metadata.get("next", EOS)) for i in range(len(kb))]

    def _knn(self, history: Sequence[str], account: str | None) -> tuple[dict[str, float], Any]:
        r = self.retriever.retrieve(detokenize(list(history[-self.window :])), account=account)
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

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        q = Query.of(query)
        prompt = Prompt(Task.CONTINUE if q.task == Task.ANSWER else q.task, q.text, ())
        history = tokenize(q.text)
        out: list[str] = []
        logprobs: list[float] = []
        events = []
        calls = 0
        for _ in range(self.max_tokens):
            dist = self.generator.next_token_distribution(prompt, out)
            mix = {normalize(t): (1 - self.lam) * p for t, p in zip(dist.tokens, dist.probs)}
            forms = {normalize(t): t for t in dist.tokens}
            knn, event = self._knn(history + out, account)
            calls += 1
            if event is not None:
                events.append(event)
            for tok, p in knn.items():
                key = normalize(tok)
                mix[key] = mix.get(key, 0.0) + self.lam * p
                forms.setdefault(key, tok)
            best = max(mix, key=lambda t: mix[t])
            if best == normalize(EOS) or best == "<unk>":
                break
            out.append(forms[best])
            logprobs.append(float(np.log(max(mix[best], 1e-300))))
        return Response(
            text=detokenize(out),
            tokens=tuple(out),
            logprobs=tuple(logprobs),
            privacy=self._cost(events),
            metadata={"retrievals": calls},
        )

    def _cost(self, events: list[Any]) -> PrivacyCost:
        if not events:
            return PrivacyCost(mechanism=self.retriever.name)
        if all(isinstance(e, GaussianEvent) for e in events):
            eps = exact_gaussian_epsilon(compose(events), self.delta)
            return PrivacyCost(epsilon=eps, delta=self.delta, mechanism=self.retriever.name)
        return PrivacyCost(mechanism=self.retriever.name)

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
