"""``private_rag``: the privacy–utility curve of the defenses (Private-RAG Fig. 2, Table 1,
Fig. 1; RP paper Table 1) on the synthetic knowledge corpus.

For each system and each ε of the grid the same question sample is answered in order
(one account), and the cell reports match accuracy (Private-RAG §4.1), retrieval
precision against the true top-50 (the share of retrieved documents that are among the
question's 50 best by exact score, Private-RAG Table 1), the total ε the run is
guaranteed, and the documents charged.

Total ε per system, always from the events the system charged (never from its name or
its target ε): the composition of every answer's event, stated by
:func:`ragprivacy.dp.event_epsilon` at the largest δ an answer was stated at
or the vote's ``delta`` (``total_delta``; 0 for pure systems, whose total is then the
sum). So ``naive_multi`` and
``dp_vote`` give T·c·ε_0 (Alg. 5; c·ε_0 ≤ ε_q per answer); ``noisy_topk`` the exact ε of
its T Gaussian releases at δ_acc = 10⁻⁶ (its σ is calibrated for them: ε_acc);
``dp_projection`` the exact ε of its T Gaussian releases (μ = √T·2c/σ) at its δ — what its
calibration delivers: ``calibration="paper"`` (the default; classic Gaussian formula)
gives one release ε = 10.62 at ε = 10, δ = 10⁻⁴, not 10; ``pe`` the ε of its one
release (the DP synthetic datastore, built at the grid's ε as its total; its queries are
then free); ``rag`` and ``projection`` charge a ``NonPrivateEvent`` (∞) and ``non-rag``
nothing (0). ``murag``/``murag_ada`` are per-document filters: each answer's event is what
each screened document paid, and a document is refused once its budget M·ε_q (Thm 1–2)
could not pay the next charge; that budget, which no document can exceed, is the
guarantee reported.

**Private Evolution** (``pe``, Private-RAG §4's synthetic-data baseline; Lin et al. 2023
Alg. 1, Aug-PE): PE builds ``pe_samples`` synthetic documents from the knowledge base's
documents (every copy votes: each is its own document for the accounting) at total
(ε, ``pe_delta``) over ``pe_iterations`` noisy histograms, with the public offline APIs of
:mod:`ragprivacy.rag.synthetic` (background documents of the corpus's kind; lexicon
rephrasing and fill-in-the-blanks by the generator from its public background model), an
embedder of the configured kind fitted on the background text only, and then plain RAG
(``rag_k`` documents) answers over the synthetic documents. Its precision@top-50 is not
defined (it retrieves synthetic documents) and is left empty. On the synthetic knowledge
corpus every fact is a random relation among invented entities, so a synthetic corpus
built from public text can only hold a private fact if the noisy histograms steer the
variations onto it.

**Redundant corpus.** DP voting can only release a fact that several documents support:
adding or removing one document changes one vote. The synthetic knowledge corpus states
each fact once, so ``copies`` (default 20) independent copies of every document form the
knowledge base — each copy is its own document for the privacy accounting, as the many
Wikipedia passages restating a fact are in the paper's setting. The copies are embedded
once and their vectors repeated.

**Question sets.** ``independent``: one single-hop question per entity (disjoint support,
like NQ/TriviaQA); ``correlated``: every question of a sample of groups — all facts about
one entity and the multi-hop chains with their sub-questions (shared support, like
MQuAKE).

Ablations (``ablation:``): ``bin_size`` (Private-RAG F.3: |τ̂ − τ| of the adaptive
threshold against the true K-th score, per bin size and ε_thr), ``tau`` (F.4: MURAG
accuracy per τ), ``rp_dim`` (RP §4.3 / Table 1 and App. H: RP retrieval precision and
accuracy per projection dimension, variance and matrix kind), ``clip_only`` (RP Tables
16–17: DP-RP-G with clipping only, per clipping bound), ``multihop`` (RP Table 11:
answer/support/joint EM and F1 and retrieved-vs-reference cosine on the multi-hop chains,
per system and ε; see :mod:`ragprivacy.eval.experiments.private_rag_multihop`).

``passages: true`` splits every document into its sentences (one fact each) before the
copies are made, the way the papers' Wikipedia corpus is split into short passages.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np

from ragprivacy._stats import mean_interval
from ragprivacy._validation import (
    check_choice,
    check_positive,
    check_positive_int,
    check_probability,
)
from ragprivacy.corpus import Corpus, QAItem
from ragprivacy.dp import (
    PE_DEFAULT_ITERATIONS,
    PE_DEFAULT_SAMPLES,
    compose,
    event_epsilon,
)
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.eval.config import ExperimentConfig, ExperimentSpec
from ragprivacy.eval.context import RunContext
from ragprivacy.eval.experiments._systems import paper_noisy_topk
from ragprivacy.eval.experiments.base import (
    Experiment,
    ReportSection,
    format_interval,
    register_experiment,
)
from ragprivacy.eval.metrics import match, wilson_interval
from ragprivacy.index import create_index
from ragprivacy.rag import (
    BackgroundRandomAPI,
    DPVoteRAG,
    FillInVariationAPI,
    MuRAG,
    RAGSystem,
    SyntheticDatastore,
    SyntheticRAG,
    SystemSpec,
    build_system,
    synthetic_datastore,
)
from ragprivacy.retrieval import KnowledgeBase, adaptive_screen, score_bins
from ragprivacy.types import Document, Response

__all__ = ["PrivateRAGExperiment", "PrivateRAGOptions"]

DP_SYSTEMS = (
    "naive_multi",
    "murag",
    "murag_ada",
    "dp_vote",
    "noisy_topk",
    "dp_projection",
    "pe",
)
SYSTEMS = (*DP_SYSTEMS, "non-rag", "rag", "projection")
ABLATIONS = ("none", "bin_size", "tau", "rp_dim", "clip_only", "multihop")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrivateRAGOptions:
    """Options of the ``private_rag`` (and ``private_rag_medical``) experiment (see the
    module docstring).

    Attributes:
        question_set: ``independent`` (one single-hop question per entity) or
            ``correlated`` (every question of sampled groups, chains first).
        questions: questions answered per cell (``private_rag_medical``: test records;
            ``ablation: multihop``: multi-hop chains, at most as many as the corpus has).
        copies: copies of every document in the knowledge base (DP voting needs several
            documents supporting a fact).
        passages: split every document into its sentences before copying.
        epsilons: the ε grid (per-query ε_q of voting systems, ε_acc of ``noisy_topk``,
            per-query ε of ``dp_projection``); must not be empty.
        tau: MURAG's relevance threshold τ.
        epsilon_thr: MURAG-ADA's ε spent on the adaptive threshold.
        max_retrievals: M, how many answers may use one document (MURAG).
        bin_size: MURAG-ADA's score bin width.
        epsilon_token: DP voting's ε per released token.
        docs_per_voter: documents in each voter's prompt.
        max_tokens: tokens per answer.
        rag_k: documents retrieved by ``rag``, ``projection``, ``noisy_topk`` and
            ``dp_projection`` (voting systems vote over the experiment's ``k``).
        rp_dim: projection dimension of ``projection`` and ``dp_projection``.
        dp_clip: ``dp_projection``'s clipping bound.
        dp_delta: ``dp_projection``'s δ.
        ablation: ``none``, ``bin_size``, ``tau``, ``rp_dim``, ``clip_only`` or
            ``multihop`` (see the module docstring).
        bin_sizes: ``ablation: bin_size``: the bin widths compared.
        epsilon_thrs: ``ablation: bin_size``: the ε_thr values compared.
        taus: ``ablation: tau``: the τ values compared.
        rp_dims: ``ablation: rp_dim``: the projection dimensions compared.
        rp_variances: ``ablation: rp_dim``: Gaussian matrix variances compared (besides
            the default scaling).
        rp_kinds: ``ablation: rp_dim``: matrix kinds (``gaussian``, ``rademacher``).
        clips: ``ablation: clip_only``: the clipping bounds compared.
        pe_iterations: ``pe``: PE iterations T (noisy histograms; default 10, Aug-PE's
            PubMed setting that Private-RAG App. E adopts).
        pe_samples: ``pe``: synthetic documents N_syn (default 2,000, Private-RAG App. E).
        pe_threshold: ``pe``: histogram threshold H (``max(h − H, 0)``; default 0, Aug-PE).
        pe_mask_rate: ``pe``: share of words the variation masks and refills (Aug-PE's
            ``mlm_probability``, 0.6).
        pe_delta: ``pe``: δ of the release (default ``1/(N·ln N)`` for N private
            documents, Aug-PE's choice).
    """

    question_set: str = "independent"
    questions: int = 40
    copies: int = 20
    passages: bool = False
    epsilons: tuple[float, ...] = (2.0, 5.0, 10.0, 20.0, 40.0)
    tau: float = 0.5
    epsilon_thr: float = 1.0
    max_retrievals: int = 1
    bin_size: float = 0.02
    epsilon_token: float = 2.0
    docs_per_voter: int = 1
    max_tokens: int = 8
    rag_k: int = 5
    rp_dim: int = 100
    dp_clip: float = 1.0
    dp_delta: float = 1e-4
    ablation: str = "none"
    bin_sizes: tuple[float, ...] = (0.01, 0.02, 0.05, 0.1, 0.2)
    epsilon_thrs: tuple[float, ...] = (0.5, 1.0, 2.0)
    taus: tuple[float, ...] = (0.3, 0.5, 0.7)
    rp_dims: tuple[int, ...] = (25, 100, 200)
    rp_variances: tuple[float, ...] = ()
    rp_kinds: tuple[str, ...] = ("gaussian", "rademacher")
    clips: tuple[float, ...] = (0.1, 0.5, 1.0, 5.0)
    pe_iterations: int = PE_DEFAULT_ITERATIONS
    pe_samples: int = PE_DEFAULT_SAMPLES
    pe_threshold: float = 0.0
    pe_mask_rate: float = 0.6
    pe_delta: float | None = None

    def __post_init__(self) -> None:
        check_choice("question_set", self.question_set, ("independent", "correlated"))
        check_positive_int("questions", self.questions)
        check_positive_int("copies", self.copies)
        if not self.epsilons:
            raise ConfigError(
                "The 'epsilons' list must not be empty; give the ε grid, e.g. [2, 5, 10]."
            )
        for e in self.epsilons:
            check_positive("epsilons", e)
        check_choice("ablation", self.ablation, ABLATIONS)
        check_positive_int("max_retrievals", self.max_retrievals)
        check_positive_int("pe_iterations", self.pe_iterations)
        check_positive_int("pe_samples", self.pe_samples)
        check_positive("pe_threshold", self.pe_threshold, allow_zero=True)
        check_probability("pe_mask_rate", self.pe_mask_rate)
        if self.pe_delta is not None:
            check_probability("pe_delta", self.pe_delta, open_interval=True)


# Weak keys: an entry lives as long as its context, so a later context cannot inherit a
# freed one's knowledge base the way an ``id(ctx)`` key could.
_KB_CACHE: WeakKeyDictionary[RunContext, dict[tuple[Any, ...], tuple[KnowledgeBase, Corpus]]] = (
    WeakKeyDictionary()
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def redundant_kb(
    ctx: RunContext, corpus_name: str, copies: int, passages: bool = False
) -> tuple[KnowledgeBase, Corpus]:
    """The knowledge base with ``copies`` documents per source document (cached).

    With ``passages`` every document is first split into its sentences (one fact each,
    each naming its entity), the way the papers' Wikipedia corpus is split into short
    passages: the facts of one entity are then separate documents that all score
    moderately for any question about that entity.
    """
    cache = _KB_CACHE.setdefault(ctx, {})
    key = (corpus_name, copies, passages)
    if passages and key not in cache:
        base = ctx.knowledge_base(corpus_name)
        corpus = ctx.corpus(corpus_name)
        pieces = [
            (f"{d.id}#{i}", text, d)
            for d in corpus
            for i, text in enumerate(t for t in _SENTENCE_END.split(d.text.strip()) if t)
        ]
        docs = [
            Document(f"{pid}~{j}", text, {"source": d.id, "entity": d.metadata.get("entity")})
            for pid, text, d in pieces
            for j in range(copies)
        ]
        big = Corpus(docs, name=f"{corpus.name}-passages-x{copies}")
        vectors = base.embedder.encode([text for _, text, _ in pieces])
        index = create_index("exact", dim=base.embedder.dim)
        index.add(np.repeat(np.asarray(vectors, dtype=np.float32), copies, axis=0), big.ids)
        cache[key] = (KnowledgeBase(big, base.embedder, index), big)
    if key not in cache:
        base = ctx.knowledge_base(corpus_name)
        corpus = ctx.corpus(corpus_name)
        docs = [
            Document(f"{d.id}~{j}", d.text, {**d.metadata, "source": d.id})
            for d in corpus
            for j in range(copies)
        ]
        big = Corpus(docs, name=f"{corpus.name}-x{copies}")
        stored = base.index.vectors()  # type: ignore[attr-defined]
        vectors = np.repeat(np.asarray(stored, dtype=np.float32), copies, axis=0)
        index = create_index("exact", dim=base.embedder.dim)
        index.add(vectors.astype(np.float32), big.ids)
        cache[key] = (KnowledgeBase(big, base.embedder, index), big)
    return cache[key]


def question_sample(corpus: Corpus, which: str, count: int, seed: int) -> list[QAItem]:
    """``independent``: one single-hop question per group; ``correlated``: all questions
    of sampled groups (chains first), in group order."""
    rng = np.random.default_rng(seed)
    groups: dict[str, list[QAItem]] = {}
    for q in corpus.questions:
        groups.setdefault(q.group or q.id, []).append(q)
    names = sorted(groups)
    if which == "independent":
        pool = [
            next(q for q in groups[g] if q.hops == 1)
            for g in names
            if any(q.hops == 1 for q in groups[g])
        ]
        take = min(count, len(pool))
        return [pool[i] for i in sorted(rng.choice(len(pool), take, replace=False))]
    chained = [g for g in names if any(q.hops > 1 for q in groups[g])]
    order = list(rng.permutation(chained)) + list(
        rng.permutation([g for g in names if g not in chained])
    )
    out: list[QAItem] = []
    for g in order:
        if len(out) >= count:
            break
        out.extend(sorted(groups[g], key=lambda q: q.hops))
    return out[:count]


_ABLATION_AXES: dict[str, tuple[str, str, bool]] = {
    "rp_dim": ("dim", "projection dimension (log scale)", True),
    "tau": ("tau", "screening threshold τ", False),
    "clip_only": ("clip", "clipping bound (log scale)", True),
}
"""Per ablation: the cell key it varies, the plot's x label and whether x is logarithmic."""


def charged_total(system: RAGSystem, responses: list[Response]) -> tuple[float, float]:
    """(ε, δ) of everything ``system`` charged while giving ``responses``.

    The composition of the answers' events at the largest δ an answer was stated at, or
    the vote's δ if larger (0 when every answer was pure: their sum). A per-document
    filter (MURAG/-ADA) reports its per-document budget, which no document's charges can
    exceed (Private-RAG Thm 1–2); a PE datastore the ε of its one release (its answers
    charge nothing).
    """
    if isinstance(system, MuRAG):
        renyi = system.screener.accounting == "renyi"
        return system.total_epsilon, (system.screener.renyi_delta if renyi else 0.0)
    events = [r.privacy.event for r in responses]
    delta = max((r.privacy.delta for r in responses), default=0.0)
    if isinstance(system, DPVoteRAG):  # a vote calibrated at δ composes at δ
        delta = max(delta, system.vote.delta)
    if isinstance(system, SyntheticRAG):
        store = system.datastore
        events.append(store.result.event)
        delta = max(delta, store.delta)
    if not events:
        return 0.0, 0.0
    return event_epsilon(compose(events), delta)


def _total(eps: float) -> str:
    """A total ε for a legend: ∞ for no guarantee, 0 for a system that reads no data."""
    return "∞" if math.isinf(eps) else f"{eps:g}"


class PrivateRAGExperiment(Experiment):
    """The privacy–utility sweep (and its ablations) of the defenses."""

    type = "private_rag"
    options_type = PrivateRAGOptions

    def __init__(self, spec: ExperimentSpec, config: ExperimentConfig, index: int = 0) -> None:
        super().__init__(spec, config, index)
        self.options: PrivateRAGOptions = self.parse_options()
        for s in spec.systems:
            check_choice("systems", s, SYSTEMS)

    def cells(self) -> list[dict[str, Any]]:
        o = self.options
        if o.ablation == "bin_size":
            return [{"system": "murag_ada", "ablation": "bin_size"}]
        if o.ablation == "tau":
            return [{"system": "murag", "tau": t, "epsilon": e} for t in o.taus for e in o.epsilons]
        if o.ablation == "rp_dim":
            out: list[dict[str, Any]] = [
                {"system": "projection", "dim": d, "kind": kd, "variance": None}
                for d in o.rp_dims
                for kd in o.rp_kinds
            ]
            out += [
                {"system": "projection", "dim": d, "kind": "gaussian", "variance": v}
                for d in o.rp_dims
                for v in o.rp_variances
            ]
            return out
        if o.ablation == "clip_only":
            return [{"system": "dp_projection", "clip": c, "clip_only": True} for c in o.clips]
        cells: list[dict[str, Any]] = []
        for s in self.spec.systems:
            if s in DP_SYSTEMS:
                cells += [{"system": s, "epsilon": e} for e in o.epsilons]
            else:
                cells.append({"system": s})
        if o.ablation == "multihop":
            return [{**c, "ablation": "multihop"} for c in cells]
        return cells

    # ------------------------------------------------------------------ systems

    def _spec(self, cell: dict[str, Any], n: int, rng: Any) -> SystemSpec:
        """The cell's system: the grid's ε in the parameter the system takes, budgets
        sized for the ``n`` answers of one account, simulated noise from ``rng``."""
        o = self.options
        name, eps = cell["system"], cell.get("epsilon", math.nan)
        seeded = {"simulation": True, "rng": rng}
        vote = {
            "k": self.spec.k,
            "epsilon_token": o.epsilon_token,
            "docs_per_voter": o.docs_per_voter,
            "max_tokens": o.max_tokens,
            **seeded,
        }
        screened = {
            **vote,
            "tau": cell.get("tau", o.tau),
            "epsilon_q": eps,
            "epsilon_thr": o.epsilon_thr,
            "max_retrievals": o.max_retrievals,
            "bin_size": o.bin_size,
        }
        clip_only = bool(cell.get("clip_only", False))
        projection = {
            "dim": cell.get("dim", o.rp_dim),
            "kind": cell.get("kind", "gaussian"),
            "variance": cell.get("variance"),
            "rng": rng,
        }
        dp_projection = {
            "dim": o.rp_dim,
            "epsilon": eps if not clip_only else 1.0,
            "delta": o.dp_delta,
            "clip": cell.get("clip", o.dp_clip),
            "clip_only": clip_only,
            **seeded,
        }
        noisy = {"epsilon_acc": eps, "delta_acc": 1e-6, **paper_noisy_topk(n), **seeded}

        def rag_over(retriever: str, options: dict[str, Any]) -> dict[str, Any]:
            return {
                "system": "rag",
                "k": o.rag_k,
                "retriever": retriever,
                "retriever_options": options,
            }

        settings: dict[str, dict[str, Any]] = {
            "non-rag": {"system": "non-rag"},
            "rag": {"system": "rag", "k": o.rag_k},
            "projection": rag_over("projection", projection),
            "dp_projection": rag_over("dp_projection", dp_projection),
            "noisy_topk": rag_over("noisy_topk", noisy),
            "pe": {"system": "pe", "k": o.rag_k},
            "dp_vote": {"system": "dp_vote", "epsilon": eps, **vote},
            # Alg. 5: the account's cap is T·ε_q for T answers
            "naive_multi": {
                "system": "naive_multi",
                "epsilon_q": eps,
                "total_epsilon": n * eps,
                **vote,
            },
            "murag": {"system": "murag", **screened},
            "murag_ada": {"system": "murag_ada", **screened},
        }
        return SystemSpec(**settings[name])

    def _system(
        self, cell: dict[str, Any], ctx: RunContext, kb: KnowledgeBase, n: int, rng: Any
    ) -> RAGSystem:
        """The cell's system over ``kb`` (:meth:`_spec`; PE over its synthetic datastore,
        built from ``kb`` at the cell's ε)."""
        spec = self._spec(cell, n, rng)
        gen = ctx.generator(self.corpus_name)
        store = self._pe(ctx, kb, gen, cell["epsilon"], rng) if spec.name == "pe" else None
        return build_system(
            spec,
            kb=kb,
            generator=gen,
            datastore=store,
            vocabulary=lambda: ctx.vocabulary(self.corpus_name),
        )

    def _kind(self, ctx: RunContext) -> str:
        """The synthetic kind of PE's public documents: the corpus's (``knowledge`` for
        a corpus that is not synthetic, as its reader's background text)."""
        return ctx.config.corpora[self.corpus_name].synthetic or "knowledge"

    def _pe(
        self, ctx: RunContext, kb: KnowledgeBase, gen: Any, eps: float, rng: Any
    ) -> SyntheticDatastore:
        """PE's synthetic datastore from ``kb``'s documents at total (ε, δ) (see the
        module docstring)."""
        o = self.options
        n = len(kb)
        delta = o.pe_delta if o.pe_delta is not None else 1.0 / (n * math.log(max(n, 3)))
        kind = self._kind(ctx)
        # the variations are many one-off prompts: the call cache would only grow
        inner = getattr(gen, "inner", gen)
        return synthetic_datastore(
            kb.corpus,
            random_api=BackgroundRandomAPI(kind),
            variation_api=FillInVariationAPI(inner, mask_rate=o.pe_mask_rate),
            epsilon=eps,
            delta=delta,
            embedder=self.config.models.embedder,
            public_texts=ctx.background_texts(self.corpus_name),
            iterations=o.pe_iterations,
            n_synthetic=o.pe_samples,
            threshold=o.pe_threshold,
            simulation=True,
            rng=rng,
        )

    # ------------------------------------------------------------------ cells

    def run_cell(
        self, cell: dict[str, Any], ctx: RunContext, rng: np.random.Generator
    ) -> dict[str, Any]:
        o = self.options
        kb, _ = redundant_kb(ctx, self.corpus_name, o.copies, o.passages)
        corpus = ctx.corpus(self.corpus_name)
        questions = question_sample(corpus, o.question_set, o.questions, self.seed)
        if cell.get("ablation") == "bin_size":
            return self._bin_size(kb, questions, rng)
        if cell.get("ablation") == "multihop":
            from ragprivacy.eval.experiments.private_rag_multihop import (
                chain_queries,
                multihop_intervals,
                multihop_means,
                multihop_questions,
                multihop_rows,
            )

            chains = multihop_questions(corpus, o.questions, self.seed)
            if len(chains) < o.questions:  # a smaller sample would be reported as asked for
                raise DataError(
                    f"experiments[{self.index}] (ablation: multihop) asks for {o.questions} "
                    f"multi-hop questions; corpus {self.corpus_name!r} has {len(chains)}. "
                    f"Set 'questions' to at most {len(chains)} or enlarge the corpus "
                    "(a synthetic knowledge corpus has about n/20 chains)."
                )
            # asked hop by hop: the budget covers one query per hop
            queries = chain_queries(chains)
            system = self._system(cell, ctx, kb, queries, rng)
            by_id = {q.id: q for q in corpus.questions}
            recorder = _Recording(system)
            rows = multihop_rows(recorder, kb, chains, "evaluator", by_id)
            total, total_delta = charged_total(system, recorder.responses)
            return {
                "n": len(chains),
                "queries": queries,
                "total_epsilon": total,
                "total_delta": total_delta,
                "multihop": multihop_means(rows),
                "multihop_ci95": multihop_intervals(rows),
            }
        system = self._system(cell, ctx, kb, len(questions), rng)
        vectors = kb.embedder.encode([q.question for q in questions])
        true_top = [
            set(np.argsort(-row, kind="stable")[:50].tolist()) for row in kb.index.scores(vectors)
        ]
        hits, precision, charged, discoveries = [], [], 0, 0
        responses: list[Response] = []
        pe = system if isinstance(system, SyntheticRAG) else None
        for q, top50 in zip(questions, true_top):
            r = system.answer(q.question, account="evaluator")
            responses.append(r)
            hits.append(bool(match(r.text, q.answers)))
            # PE retrieves synthetic documents: precision against the private top-50 is
            # not defined for it
            if pe is None and r.retrieval is not None and len(r.retrieval.indices):
                got = r.retrieval.indices
                precision.append(sum(1 for p in got if p in top50) / len(got))
            charged += len(r.privacy.per_document)
            discoveries += int(r.metadata.get("discoveries", 0))
        total, total_delta = charged_total(system, responses)
        return {
            "system": system.describe() if hasattr(system, "describe") else {},
            "n": len(questions),
            "accuracy": float(np.mean(hits)),
            "accuracy_ci95": list(wilson_interval(sum(hits), len(hits))),
            "precision_top50": float(np.mean(precision)) if precision else math.nan,
            "precision_top50_ci95": list(mean_interval(precision, unit=True)),
            "total_epsilon": total,
            "total_delta": total_delta,
            "documents_charged": charged,
            "discoveries": discoveries,
            "reuse": self._reuse(kb, true_top) if cell["system"] == "rag" else None,
            **({} if pe is None else {"pe": _pe_summary(pe, kb, self._kind(ctx), self.seed)}),
        }

    @staticmethod
    def _reuse(kb: KnowledgeBase, tops: list[set[int]]) -> dict[str, int]:
        """Figure 1: how many questions each document's top-50 appearances cover."""
        counts: dict[int, int] = {}
        for top in tops:
            for p in top:
                counts[p] = counts.get(p, 0) + 1
        hist: dict[str, int] = {}
        for c in counts.values():
            hist[str(c)] = hist.get(str(c), 0) + 1
        return hist

    def _bin_size(self, kb: KnowledgeBase, questions: list[QAItem], rng: Any) -> dict[str, Any]:
        """Private-RAG F.3: mean |τ̂ − τ| with τ the true K-th score."""
        o = self.options
        vectors = kb.embedder.encode([q.question for q in questions])
        scores = kb.index.scores(vectors).astype(np.float64)
        active = np.ones(scores.shape[1], dtype=bool)
        table = {}
        for eps in o.epsilon_thrs:
            for size in o.bin_sizes:
                edges = score_bins(size)
                errs = []
                for row in scores:
                    true_tau = float(np.sort(row)[-self.spec.k])
                    s = adaptive_screen(
                        row, active, self.spec.k, eps, edges, simulation=True, rng=rng
                    )
                    errs.append(abs(s.tau - true_tau))
                table[f"{eps:g}|{size:g}"] = float(np.mean(errs))
        return {"threshold_error": table}

    # ------------------------------------------------------------------ report

    def report(self, results: list[dict[str, Any]], out_dir: Path) -> ReportSection:
        from ragprivacy.eval.experiments.private_rag_plots import (
            bin_size_plot,
            parameter_plot,
            privacy_utility_plot,
            reuse_plot,
        )

        o = self.options
        title = f"Private RAG ({self.corpus_name}, {o.question_set} questions)"
        figs: list[str] = []
        if o.ablation == "bin_size":
            table = results[0]["result"]["threshold_error"]
            fig = f"private_rag_{self.index}_bin_size.png"
            bin_size_plot(out_dir / fig, table)
            lines = ["| ε_thr | bin size | mean abs(τ̂ − τ) |", "|---|---|---|"]
            for key, err in table.items():
                e, b = key.split("|")
                lines.append(f"| {e} | {b} | {err:.3f} |")
            lines += ["", f"![threshold error vs bin size]({fig})"]
            return ReportSection(f"{title}: MURAG-ADA bin size", "\n".join(lines), [fig])
        if o.ablation == "multihop":
            from ragprivacy.eval.experiments.private_rag_multihop import multihop_table

            first = results[0]["result"]
            head = [
                f"{first['n']} multi-hop chains (RP paper Table 11; percent, cosine as is), "
                f"asked hop by hop ({first.get('queries', first['n'])} queries: each later "
                "sub-question carries the system's own previous answer; Ans scores the last "
                "hop, Sup each hop's top document). Generator: "
                f"{self.config.models.generator}.",
                "",
            ]
            body = "\n".join(head + multihop_table(results))
            return ReportSection(f"{title}: multi-hop", body, [])
        lines = [
            f"{results[0]['result']['n']} questions answered in order by one account; "
            f"{o.copies} copies of each document; K = {self.spec.k} slots, "
            f"ε_token = {o.epsilon_token}, M = {o.max_retrievals}, τ = {o.tau}, "
            f"ε_thr = {o.epsilon_thr}. Generator: {self.config.models.generator}. "
            "95 % intervals: Wilson for match accuracy, Student t over questions for "
            "precision. Read differences between ε values against them: a non-monotone "
            "step inside the intervals is sampling noise, not an effect of ε.",
            "",
            "| system | setting | ε_q / ε | total ε | match accuracy (95% CI) | "
            "precision@top-50 (95% CI) | docs charged | total ε's δ |",
            "|---|---|---|---|---|---|---|---|",
        ]
        series: dict[str, list[tuple[float, ...]]] = {}
        flat: dict[str, tuple[float, ...]] = {}
        reuse = None
        pe_notes: list[str] = []
        for item in results:
            cell, res = item["cell"], item["result"]
            setting = ", ".join(
                f"{k}={v}" for k, v in cell.items() if k not in ("system", "epsilon")
            )
            eps = cell.get("epsilon")
            lines.append(
                f"| {cell['system']} | {setting or '–'} | {'–' if eps is None else f'{eps:g}'} | "
                f"{res['total_epsilon']:g} | {_with_ci(res, 'accuracy')} | "
                f"{_with_ci(res, 'precision_top50')} | {res['documents_charged']} | "
                f"{res.get('total_delta', 0.0):.2g} |"
            )
            label = cell["system"] + (f" ({setting})" if setting else "")
            acc = (res["accuracy"], *_ci_or_nan(res, "accuracy"))
            if eps is not None and math.isfinite(res["total_epsilon"]):
                series.setdefault(label, []).append((res["total_epsilon"], *acc))
            else:
                flat[f"{label} (ε = {_total(res['total_epsilon'])})"] = acc
            reuse = reuse or res.get("reuse")
            if "pe" in res:
                pe = res["pe"]
                pe_notes.append(
                    f"pe at ε = {res['total_epsilon']:g}: σ = {pe['sigma']:.3g} per histogram, "
                    f"T = {pe['iterations']}, {pe['samples']} synthetic documents, "
                    f"δ = {pe['delta']:.2g}, {pe['verbatim_private']} verbatim private "
                    "documents among them; embedding precision (synthetic → nearest private, "
                    f"mean cosine) {pe['precision']:.3f}, recall (private → nearest "
                    f"synthetic) {pe['recall']:.3f}; a RANDOM_API draw of the same size "
                    f"(PE's start): {pe['precision_random']:.3f} and "
                    f"{pe['recall_random']:.3f}"
                )
        if pe_notes:
            lines += [
                "",
                "PE (plain RAG over a DP synthetic datastore, Private-RAG §4 baseline): the "
                "release costs its ε once; answers are free; precision@top-50 is not "
                "defined for synthetic documents.",
                "",
                *(f"- {note}" for note in pe_notes),
            ]
        fig = f"private_rag_{self.index}_utility.png"
        swept = _ABLATION_AXES.get(o.ablation)
        if swept is not None:  # against the parameter varied: total ε is one value (or ∞)
            key, xlabel, log_x = swept
            by_setting: dict[str, list[tuple[float, ...]]] = {}
            for item in results:
                cell, res = item["cell"], item["result"]
                rest = ", ".join(
                    f"{k}={v}" for k, v in cell.items() if k not in ("system", key, "clip_only")
                )
                name = cell["system"] + (f" ({rest})" if rest else "")
                by_setting.setdefault(name, []).append(
                    (float(cell[key]), res["accuracy"], *_ci_or_nan(res, "accuracy"))
                )
            parameter_plot(
                out_dir / fig,
                by_setting,
                xlabel=xlabel,
                title=f"{title}: {o.ablation} ablation",
                log_x=log_x,
            )
        else:
            privacy_utility_plot(out_dir / fig, series, flat, title=title)
        figs.append(fig)
        lines += ["", f"![privacy-utility]({fig})"]
        if reuse:
            fig2 = f"private_rag_{self.index}_reuse.png"
            reuse_plot(out_dir / fig2, reuse, title=f"Document reuse in top-50 ({o.question_set})")
            figs.append(fig2)
            lines += ["", f"![document reuse]({fig2})"]
        return ReportSection(title, "\n".join(lines), figs)


def _pe_summary(system: SyntheticRAG, kb: KnowledgeBase, kind: str, seed: int) -> dict[str, Any]:
    """What the PE release was: its σ, T, N_syn, δ, how many synthetic documents are
    verbatim copies of a private one (0 with public APIs), and how close it came to the
    private documents — evaluation statistics, never released, in the public embedding
    (the embedding precision and recall Aug-PE reports, as mean nearest-neighbour
    cosines): ``precision`` is the mean over synthetic documents of the cosine to the
    nearest private one (is what PE made private-like?), ``recall`` the mean over private
    documents of the cosine to the nearest synthetic one (is every private document
    covered?); ``*_random`` are the same for a RANDOM_API draw of the same size, what PE
    starts from."""
    store = system.datastore
    private = set(kb.corpus.texts)
    texts = store.knowledge_base.corpus.texts
    embedder = store.knowledge_base.embedder
    unique = sorted(private)
    p = embedder.encode(unique)
    start = BackgroundRandomAPI(kind)(len(texts), np.random.default_rng(seed))

    syn, rnd = embedder.encode(list(texts)), embedder.encode(start)
    return {
        "precision": float(np.mean(np.max(syn @ p.T, axis=1))),
        "precision_random": float(np.mean(np.max(rnd @ p.T, axis=1))),
        "recall": float(np.mean(np.max(p @ syn.T, axis=1))),
        "recall_random": float(np.mean(np.max(p @ rnd.T, axis=1))),
        "sigma": store.result.sigma,
        "iterations": store.result.iterations,
        "samples": len(texts),
        "delta": store.delta,
        "verbatim_private": sum(1 for t in texts if t in private),
    }


class _Recording(RAGSystem):
    """A system that keeps every response it gives (to total what was charged)."""

    def __init__(self, inner: RAGSystem) -> None:
        self.inner = inner
        self.name = inner.name
        self.responses: list[Response] = []

    def answer(self, query: Any, *, account: str | None = None) -> Response:
        r = self.inner.answer(query, account=account)
        self.responses.append(r)
        return r

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def _ci_or_nan(res: dict[str, Any], key: str) -> tuple[float, float]:
    """The stored 95 % interval of ``res[key]`` (NaNs for results stored without one)."""
    ci = res.get(f"{key}_ci95") or (math.nan, math.nan)
    return (float(ci[0]), float(ci[1]))


def _with_ci(res: dict[str, Any], key: str) -> str:
    """``key``'s figure with its stored 95 % interval (the figure alone for results
    written without one)."""
    low, high = res.get(f"{key}_ci95") or (math.nan, math.nan)
    return format_interval(res[key], low, high)


register_experiment("private_rag", PrivateRAGExperiment)
