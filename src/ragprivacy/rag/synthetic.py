"""RAG over a DP synthetic datastore: the Private Evolution baseline of Private-RAG.

Private-RAG (§4, "Baseline methods", App. E) compares its multi-query methods with
privatising the external dataset itself: Private Evolution (PE; Lin et al. 2023 Alg. 1,
its text variant Aug-PE, Xie et al. 2024) builds a DP synthetic corpus, and plain RAG
then runs over it. Every answer is post-processing of the released corpus, so the whole
datastore costs the PE ε once and queries are free.

This module provides offline, public-only PE APIs built from the package's own parts:

* :class:`BackgroundRandomAPI` (RANDOM_API): fresh synthetic documents of the corpus's
  kind from :func:`ragprivacy.corpus.synthetic.background_texts` — an independent
  stream whose names are disjoint from any member corpus, so no private document (nor a
  member's name) can appear in them. The paper's RANDOM_API asks the RAG model for
  in-domain text ("write a Wikipedia paragraph", "write a dialogue between a patient ...
  and a doctor"); the synthetic generator plays that model.
* :class:`FillInVariationAPI` (VARIATION_API): Aug-PE's two variation kinds, rephrasing
  and fill-in-the-blanks, offline: the lexicon paraphraser of the ``paraphrasing``
  defense rewrites the sample, then a ``mask_rate`` share of its words (Aug-PE's
  ``mlm_probability``, 0.6 in its PubMed setting) are replaced by ``[Mask_i]`` slots
  that a generator fills *without context* — the reference reader then fills them from
  its background n-gram model, which is fitted on public text only.

:func:`synthetic_datastore` runs PE (:func:`ragprivacy.dp.private_evolution`) on the
private knowledge base's documents and indexes the result; :class:`SyntheticRAG` answers
over it. The embedder that votes and indexes must be public too: the builder fits a fresh
embedder of the private base's kind on public text only (an embedder fitted on the
private corpus, as LSA is elsewhere in the experiments, would itself leak it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragprivacy._random import RngLike
from ragprivacy._validation import check_positive_int, check_probability
from ragprivacy.corpus import Corpus, background_texts, synthetic_kinds
from ragprivacy.dp import (
    PE_DEFAULT_ITERATIONS,
    PE_DEFAULT_SAMPLES,
    PrivacyEvent,
    PrivateEvolutionResult,
    event_epsilon,
    pe_sigma,
    private_evolution,
)
from ragprivacy.embed import Embedder, create_embedder
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Generator, Prompt, Task, detokenize, tokenize
from ragprivacy.rag.base import (
    Query,
    RAGSystem,
    _response,
    charged_on_failure,
    register_system,
)
from ragprivacy.rag.defenses import LexiconParaphraser, Paraphraser
from ragprivacy.retrieval import KnowledgeBase, Retriever, TopKRetriever
from ragprivacy.types import Document, NoOpEvent, PrivacyCost, Response

__all__ = [
    "BackgroundRandomAPI",
    "FillInVariationAPI",
    "SyntheticDatastore",
    "SyntheticRAG",
    "synthetic_datastore",
]

_WORD = re.compile(r"^[A-Za-z][A-Za-z'\-]*$")
_ANSWER_LINE = re.compile(r"^\s*\[Mask_(\d+)\]:\s*(.*)$", re.MULTILINE)


class BackgroundRandomAPI:
    """RANDOM_API: ``n`` new public documents of a synthetic ``kind``.

    Each call draws a fresh seed from the caller's stream and returns
    ``background_texts(kind, n, seed=...)``: documents of the kind's form whose names
    and invented entities come from the half of the name space member corpora never use.

    >>> api = BackgroundRandomAPI("knowledge")
    >>> len(api(3, np.random.default_rng(0)))
    3
    """

    def __init__(self, kind: str) -> None:
        if kind not in synthetic_kinds():
            raise ConfigError(
                f"The PE random API draws a synthetic kind; got {kind!r}, expected one of "
                f"{', '.join(synthetic_kinds())}."
            )
        self.kind = kind

    def __call__(self, n: int, rng: np.random.Generator) -> list[str]:
        return background_texts(self.kind, n, seed=int(rng.integers(2**31)))

    def config(self) -> dict[str, Any]:
        return {"name": "background", "kind": self.kind}


class FillInVariationAPI:
    """VARIATION_API: rephrase, then fill a random share of the words back in.

    Args:
        generator: fills ``[Mask_i]`` slots (``Task.FILL_MASKS`` with no context); the
            reference reader fills from its public background model.
        mask_rate: share of word tokens masked per variation (Aug-PE's
            ``mlm_probability``; default 0.6, its PubMed setting).
        paraphraser: the rephrasing step (default the ``paraphrasing`` defense's
            :class:`~ragprivacy.rag.LexiconParaphraser`).
        rephrase: ``False`` skips the rephrasing step.

    A slot the generator leaves empty keeps its original word (a variation never
    shortens a sample to nothing).
    """

    def __init__(
        self,
        generator: Generator,
        *,
        mask_rate: float = 0.6,
        paraphraser: Paraphraser | None = None,
        rephrase: bool = True,
    ) -> None:
        self.generator = generator
        self.mask_rate = check_probability("mask_rate", mask_rate)
        self.paraphraser = paraphraser if paraphraser is not None else LexiconParaphraser()
        self.rephrase = bool(rephrase)

    def _mask(self, text: str, rng: np.random.Generator) -> tuple[list[str], dict[int, int]]:
        toks = tokenize(text)
        words = [i for i, t in enumerate(toks) if _WORD.match(t)]
        chosen = sorted(i for i in words if rng.random() < self.mask_rate)
        slots = {pos: j + 1 for j, pos in enumerate(chosen)}
        return toks, slots

    def __call__(self, samples: Sequence[str], rng: np.random.Generator) -> list[str]:
        texts = [self.paraphraser.paraphrase(s) if self.rephrase else s for s in samples]
        masked = [self._mask(t, rng) for t in texts]
        prompts = [
            Prompt(
                Task.FILL_MASKS,
                detokenize([f"[Mask_{slots[i]}]" if i in slots else t for i, t in enumerate(toks)]),
            )
            for toks, slots in masked
        ]
        asked = [i for i, (_, slots) in enumerate(masked) if slots]
        outputs = self.generator.generate_batch([prompts[i] for i in asked]) if asked else []
        filled = {i: c.text for i, c in zip(asked, outputs)}
        out: list[str] = []
        for i, (toks, slots) in enumerate(masked):
            if not slots:
                out.append(texts[i])
                continue
            answers = {int(n): a.strip() for n, a in _ANSWER_LINE.findall(filled[i])}
            new = [(answers.get(slots[p]) or t) if p in slots else t for p, t in enumerate(toks)]
            out.append(detokenize(new))
        return out

    def config(self) -> dict[str, Any]:
        return {
            "name": "fill-in",
            "generator": self.generator.name,
            "mask_rate": self.mask_rate,
            "paraphraser": self.paraphraser.config() if self.rephrase else None,
        }


@dataclass(frozen=True, slots=True)
class SyntheticDatastore:
    """A PE synthetic corpus, indexed, with what its release cost.

    Attributes:
        knowledge_base: the synthetic documents, embedded by the public embedder.
        result: the PE run (final samples, released histograms, event).
        epsilon: the release's ε at ``delta`` (:func:`ragprivacy.dp.event_epsilon`).
        delta: δ.
    """

    knowledge_base: KnowledgeBase
    result: PrivateEvolutionResult[str]
    epsilon: float
    delta: float

    @property
    def event(self) -> PrivacyEvent:
        return self.result.event


def synthetic_datastore(
    private: Corpus,
    *,
    random_api: BackgroundRandomAPI | Any,
    variation_api: FillInVariationAPI | Any,
    epsilon: float,
    delta: float,
    embedder: str = "lsa",
    public_texts: Sequence[str] | None = None,
    iterations: int = PE_DEFAULT_ITERATIONS,
    n_synthetic: int = PE_DEFAULT_SAMPLES,
    threshold: float = 0.0,
    index: str = "exact",
    simulation: bool = False,
    rng: RngLike = None,
    api_rng: RngLike = None,
) -> SyntheticDatastore:
    """Run PE on ``private``'s documents at a total (ε, δ) and index the synthetic corpus.

    σ is calibrated by :func:`ragprivacy.dp.pe_sigma` so that T iterations compose to
    exactly (ε, δ) (continuous Gaussian; the secure discrete path's zCDP bound is then
    reported, slightly above ε). The embedder ``embedder`` is built fresh and fitted on
    ``public_texts`` (default: a fresh draw of the random API, 4·N_syn documents at
    most 2,000), never on the private documents.

    Args:
        private: the private documents (each one the unit of privacy).
        random_api, variation_api: PE's public APIs (see the module docstring).
        epsilon, delta: the release's total budget.
        embedder: an embedder registry spec (``lsa``, ``minilm``, ...).
        public_texts: public text to fit the embedder on.
        iterations, n_synthetic, threshold: T, N_syn, H.
        index: the synthetic index's registry spec.
        simulation, rng, api_rng: as :func:`ragprivacy.dp.private_evolution`.
    """
    private.require_nonempty()
    iterations = check_positive_int("iterations", iterations)
    n_synthetic = check_positive_int("n_synthetic", n_synthetic)
    sigma = pe_sigma(epsilon, delta, iterations)
    emb: Embedder = create_embedder(embedder)
    if public_texts is None:
        seed_rng = np.random.default_rng(np.random.SeedSequence(0x5E11))
        public_texts = random_api(min(4 * n_synthetic, 2000), seed_rng)
    emb.fit(list(public_texts))
    result = private_evolution(
        emb.encode(private.texts),
        random_api=random_api,
        variation_api=variation_api,
        embed=lambda texts: emb.encode(list(texts)),
        sigma=sigma,
        iterations=iterations,
        n_synthetic=n_synthetic,
        threshold=threshold,
        simulation=simulation,
        rng=rng,
        api_rng=api_rng,
    )
    docs = [Document(f"pe-{i}", text, {"synthetic": True}) for i, text in enumerate(result.samples)]
    kb = KnowledgeBase.build(Corpus(docs, name=f"{private.name}-pe"), embedder=emb, index=index)
    eps, used_delta = event_epsilon(result.event, delta)
    return SyntheticDatastore(knowledge_base=kb, result=result, epsilon=eps, delta=used_delta)


class SyntheticRAG(RAGSystem):
    """Plain top-K RAG over a DP synthetic datastore (Private-RAG's PE baseline).

    Neighbouring relation: add/remove one private document. Guarantee: the release of the
    datastore is (ε, δ)-DP (:func:`synthetic_datastore`); every answer reads only the
    released synthetic documents and the public query, so it is post-processing and costs
    nothing more. Each answer's :class:`~ragprivacy.types.PrivacyCost` is therefore a
    :class:`NoOpEvent` with ``cumulative_epsilon`` = the release's ε (paid once, before
    the first query), and :attr:`release_event` is the PE event.
    """

    name = "pe"

    def __init__(
        self,
        datastore: SyntheticDatastore,
        generator: Generator,
        *,
        k: int = 5,
        instruction: str | None = None,
    ) -> None:
        self.datastore = datastore
        self.retriever = TopKRetriever(datastore.knowledge_base, k=k)
        self.generator = generator
        self.instruction = instruction

    @property
    def release_event(self) -> PrivacyEvent:
        """What publishing the synthetic datastore cost (all queries included)."""
        return self.datastore.event

    @property
    def total_epsilon(self) -> float:
        """The release's ε at :attr:`delta` — the whole run's ε, however many queries."""
        return self.datastore.epsilon

    @property
    def delta(self) -> float:
        return self.datastore.delta

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self.answer_batch([query], account=account)[0]

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        qs = [Query.of(q) for q in queries]
        retrievals = self.retriever.retrieve_batch([q.search_text for q in qs], account=account)
        kb = self.datastore.knowledge_base
        cost = PrivacyCost(
            event=NoOpEvent(),
            mechanism="pe-synthetic",
            cumulative_epsilon=self.total_epsilon,
        )
        with charged_on_failure(self.retriever, retrievals, account):
            prompts = [
                Prompt(q.task, q.text, kb.texts(r.indices), self.instruction, q.options)
                for q, r in zip(qs, retrievals)
            ]
            completions = self.generator.generate_batch(prompts)
        return [_response(c, r, cost) for c, r in zip(completions, retrievals)]

    def describe(self) -> dict[str, Any]:
        r = self.datastore.result
        return {
            "name": self.name,
            "retriever": self.retriever.config(),
            "generator": self.generator.name,
            "synthetic_documents": len(self.datastore.knowledge_base),
            "pe": {
                "sigma": r.sigma,
                "iterations": r.iterations,
                "threshold": r.threshold,
                "event": r.event.to_dict(),
                "epsilon": self.datastore.epsilon,
                "delta": self.datastore.delta,
            },
        }


def _make_pe(
    *,
    generator: Generator,
    datastore: SyntheticDatastore | None = None,
    retriever: Retriever | None = None,
    k: int = 5,
    instruction: str | None = None,
) -> SyntheticRAG:
    """``create_system("pe", generator=..., datastore=synthetic_datastore(...), k=...)``:
    plain RAG over a DP synthetic datastore. It reads no private document when it
    answers, so it takes no retriever over them (one given is not used); ``k`` is what
    its own top-K over the synthetic documents retrieves."""
    if datastore is None:
        raise ConfigError(
            "The 'pe' system answers over a DP synthetic datastore; pass "
            "datastore=synthetic_datastore(...) (the private_rag experiment builds one per ε)."
        )
    return SyntheticRAG(datastore, generator, k=k, instruction=instruction)


register_system("pe", _make_pe)
