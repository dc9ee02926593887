"""Systems under attack: their config entries, and building a system from one.

The attack experiments (``membership``, ``extraction``) name the systems they attack in
``system_specs``; each entry is a registered system name, or a mapping::

    {name: rag, retriever: noisy_topk, retriever_options: {epsilon_acc: 4}, budget: target}
    {name: murag, epsilon_q: 10, k: 20, label: "MURAG ε_q=10"}

Keys: ``name`` (a registered system), ``retriever`` (a registered retriever; default
``topk``), ``retriever_options``, ``k`` (retrieved documents; default the experiment's),
``budget`` (``run`` or ``target``: see :mod:`ragprivacy.eval.experiments._budgeted`),
``redact_pii`` (a PII detector, e.g. ``regex``: the *PII-redaction* defense, which
replaces what the detector finds with typed placeholders such as ``[PHONE]`` in every
document before it is indexed; the attacks and their ground truth keep the original
documents, :func:`redacted_knowledge_base`), ``label`` (the name in tables; default
built from the rest); every other key is an
option of the system (``epsilon``, ``epsilon_q``, ``tau``, ...). A ``knnlm`` system reads
a token-level datastore built from the knowledge base's documents
(:func:`knn_knowledge_base`; ``datastore_stride`` keeps every n-th position,
``datastore_index`` picks its index, e.g. ``faiss-hnsw`` for large corpora).

**Offline defaults** (:func:`entry_spec`; :func:`build_entry` builds the system through
:func:`ragprivacy.rag.build_system`). Private retrievers and DP-voting systems are
built in their *simulation* mode (float noise from a stream seeded by the run; the secure
samplers give the same distributions, far more slowly), and the exponential mechanism of
DP voting ranges over the words of the corpus and of the background text (a public
stand-in for an LLM's vocabulary, as in the ``private_rag`` experiment). Budgets that are
sized by a query count are sized for the queries the account will make: ``noisy_topk``'s
``queries_per_account`` = that count, so the queries compose to exactly (ε_acc, δ_acc),
and its scores are clipped to the paper's :data:`~ragprivacy.dp.PAPER_SCORE_RANGE`
(0, 1), Δ = 1 (the library's default is the cosine range, Δ = 2). An option given in the
spec wins; a budget given in the spec is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragprivacy._validation import check_choice, check_positive_int
from ragprivacy.corpus import create_pii_detector, pii_detector_names, redact_corpus
from ragprivacy.dp import PAPER_SCORE_RANGE
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Generator, GreedySteps, Prompt, TokenDistribution
from ragprivacy.rag import (
    KNN_WINDOW,
    RAGSystem,
    SystemSpec,
    build_system,
    knn_datastore,
    system_names,
)
from ragprivacy.retrieval import KnowledgeBase, retriever_names
from ragprivacy.types import Completion

__all__ = [
    "NO_LOGPROB_SYSTEMS",
    "ONE_BY_ONE_SYSTEMS",
    "VOTING_SYSTEMS",
    "GenerationsOnlyCache",
    "SystemEntry",
    "build_entry",
    "entry_spec",
    "knn_knowledge_base",
    "paper_noisy_topk",
    "parse_system_specs",
    "redacted_knowledge_base",
]

VOTING_SYSTEMS = ("dp_vote", "murag", "murag_ada", "naive_multi")
NO_LOGPROB_SYSTEMS = VOTING_SYSTEMS
ONE_BY_ONE_SYSTEMS = (*VOTING_SYSTEMS, "knnlm")
_SPEC_KEYS = ("budget", "k", "label", "name", "redact_pii", "retriever", "retriever_options")
_SIMULATED_RETRIEVERS = ("dp_projection", "noisy_topk", "threshold")
_RETRIEVER_SYSTEMS = ("dp_projection", "noisy_topk", "projection", "threshold")


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemEntry:
    """One system under attack (see the module docstring).

    Attributes:
        name: a registered system (``rag``, ``dp_vote``, ``murag``, ``knnlm``, ...), or a
            retriever name (``noisy_topk``, ``dp_projection``, ``projection``,
            ``threshold``) for ``rag`` over that retriever, as ``private_rag`` names them.
        label: the name in tables (default: built from the rest).
        retriever: a registered retriever (default ``topk``).
        retriever_options: keyword options of the retriever (``epsilon_acc``, ...).
        options: keyword options of the system (``epsilon``, ``epsilon_q``, ``tau``, ...),
            usually given as keys of the entry itself.
        k: documents retrieved (default: the experiment's ``k``).
        budget: ``run`` (one account for the whole run) or ``target`` (one per target).
        redact_pii: a PII detector (``regex``, ``presidio``): the system indexes the
            documents with the spans it detects replaced by typed placeholders
            (``[PHONE]``), the PII-redaction defense.
    """

    name: str
    label: str = ""
    retriever: str = "topk"
    retriever_options: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    k: int | None = None
    budget: str = "run"
    redact_pii: str | None = None

    def __post_init__(self) -> None:
        if self.name in _RETRIEVER_SYSTEMS:  # private_rag's names for RAG over a retriever
            if self.retriever not in ("topk", self.name):
                raise ConfigError(
                    f"System {self.name!r} is 'rag' over the {self.name!r} retriever; it "
                    f"cannot take retriever {self.retriever!r} as well: drop one of them."
                )
            object.__setattr__(self, "retriever", self.name)
            object.__setattr__(self, "name", "rag")
        # pe answers over a DP synthetic datastore, which only private_rag builds
        attacked = [n for n in system_names() if n != "pe"]
        check_choice("system", self.name, [*attacked, *_RETRIEVER_SYSTEMS])
        if self.redact_pii is not None:
            check_choice("redact_pii", str(self.redact_pii).partition(":")[0], pii_detector_names())
        check_choice("retriever", self.retriever, retriever_names())
        check_choice("budget", self.budget, ("run", "target"))
        if self.k is not None:
            check_positive_int("k", self.k)
        object.__setattr__(self, "retriever_options", dict(self.retriever_options))
        object.__setattr__(self, "options", dict(self.options))
        if not self.label:
            object.__setattr__(self, "label", self._default_label())

    def _default_label(self) -> str:
        def opts(m: Mapping[str, Any]) -> str:
            return ",".join(f"{k}={v}" for k, v in sorted(m.items()))

        out = self.name
        if self.redact_pii is not None:
            out = f"PII redaction ({self.redact_pii}) + {out}"
        if self.options:
            out += f"({opts(self.options)})"
        if self.retriever != "topk" or self.retriever_options:
            out += f"+{self.retriever}"
            if self.retriever_options:
                out += f"({opts(self.retriever_options)})"
        if self.k is not None:
            out += f",k={self.k}"
        if self.budget != "run":
            out += f",{self.budget} budget"
        return out

    @property
    def uses_data(self) -> bool:
        # non-rag reads no documents; a remote endpoint reads its own, not ours
        return self.name.partition(":")[0] not in ("non-rag", "remote")


def parse_system_specs(entries: Sequence[Any], where: str) -> tuple[SystemEntry, ...]:
    """Parse ``system_specs`` entries (names or mappings) into :class:`SystemEntry`\\ s."""
    out: list[SystemEntry] = []
    for i, entry in enumerate(entries):
        at = f"{where}[{i}]"
        if isinstance(entry, str):
            out.append(_spec(at, name=entry))
            continue
        if not isinstance(entry, Mapping) or "name" not in entry:
            raise ConfigError(
                f"{at} must be a system name or a mapping with 'name'; got {entry!r}."
            )
        kw = {k: entry[k] for k in _SPEC_KEYS if k in entry}
        for key in ("retriever_options",):
            if key in kw and not isinstance(kw[key], Mapping):
                raise ConfigError(f"{at}.{key} must be a mapping; got {kw[key]!r}.")
        kw["options"] = {k: v for k, v in entry.items() if k not in _SPEC_KEYS}
        out.append(_spec(at, **kw))
    labels = [s.label for s in out]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ConfigError(f"{where}: systems share the label(s) {dup}; give each a 'label'.")
    return tuple(out)


def _spec(where: str, **kw: Any) -> SystemEntry:
    try:
        return SystemEntry(**kw)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}.") from None


class GenerationsOnlyCache(Generator):
    """A cached generator whose next-token distributions bypass the cache.

    DP voting asks for thousands of next-token distributions per query; storing each
    (a whole vocabulary) costs more than recomputing it with the reference reader, while
    the voters' completions are worth caching. ``cached`` is a
    :class:`~ragprivacy.eval.cache.CachedGenerator` (or any generator) and ``inner`` the
    generator behind it.
    """

    def __init__(self, cached: Generator, inner: Generator) -> None:
        self.cached = cached
        self.inner = inner
        self.name = inner.name

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return self.cached.generate(prompt, max_tokens=max_tokens)

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        return self.cached.generate_batch(prompts, max_tokens=max_tokens)

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        return self.inner.next_token_distribution(prompt, prefix)

    def next_token(self, prompt: Prompt, prefix: Sequence[str] | str = ()) -> str:
        return self.inner.next_token(prompt, prefix)

    def greedy_steps(self, prompts: Sequence[Prompt]) -> GreedySteps:
        return self.inner.greedy_steps(prompts)

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        return self.cached.score(prompt, continuation)

    def tokens_to_text(self, tokens: Sequence[str]) -> str:
        return self.inner.tokens_to_text(tokens)

    @property
    def exposes_logprobs(self) -> bool:
        return self.inner.exposes_logprobs

    def config(self) -> dict[str, Any]:
        return self.inner.config()


_DATASTORES: dict[tuple[int, int, int, str], tuple[KnowledgeBase, KnowledgeBase]] = {}
_REDACTED: dict[tuple[int, str], tuple[KnowledgeBase, KnowledgeBase]] = {}


def redacted_knowledge_base(kb: KnowledgeBase, detector: str) -> KnowledgeBase:
    """``kb``'s documents with the PII ``detector`` finds replaced by typed placeholders
    (:func:`~ragprivacy.corpus.redact_corpus`), embedded by ``kb``'s embedder into an
    index of the same kind: the PII-redaction defense, applied before indexing. Ids are
    kept (retrieval recall still names the original documents); built once per process
    and detector."""
    key = (id(kb), detector)
    hit = _REDACTED.get(key)
    if hit is None or hit[0] is not kb:  # the source is held, so its id is not reused
        redacted = redact_corpus(kb.corpus, create_pii_detector(detector))
        store = KnowledgeBase.build(redacted, embedder=kb.embedder, index=kb.index.name)
        hit = _REDACTED[key] = (kb, store)
    return hit[1]


def knn_knowledge_base(
    kb: KnowledgeBase, *, window: int = KNN_WINDOW, stride: int = 1, index: str = "exact"
) -> KnowledgeBase:
    """kNN-LM's datastore over ``kb``'s documents: one entry per token position
    (:func:`~ragprivacy.rag.knn_datastore`), keys embedded by ``kb``'s embedder, built
    once per process and settings. A knowledge base that already is a datastore is
    returned as is."""
    if len(kb) and "next" in kb.document(0).metadata:
        return kb
    key = (id(kb), window, stride, index)
    hit = _DATASTORES.get(key)
    if hit is None or hit[0] is not kb:  # the source is held, so its id is not reused
        store = KnowledgeBase.build(
            knn_datastore(kb.corpus, window=window, stride=stride),
            embedder=kb.embedder,
            index=index,
        )
        hit = _DATASTORES[key] = (kb, store)
    return hit[1]


def entry_spec(entry: SystemEntry, *, k: int, queries: int, seed: int) -> SystemSpec:
    """The :class:`~ragprivacy.rag.SystemSpec` of ``entry`` under the offline defaults
    (see the module docstring): simulated private retrievers and votes seeded from
    ``seed``, ``noisy_topk`` sized for ``queries``, ``k`` where the entry gives none."""
    ropts = dict(entry.retriever_options)
    if entry.retriever in _SIMULATED_RETRIEVERS:
        ropts.setdefault("simulation", True)
    if entry.retriever == "projection" or (
        entry.retriever in _SIMULATED_RETRIEVERS and ropts["simulation"]
    ):
        ropts.setdefault("rng", seed)  # R's seed; in simulation also the noise stream
    if entry.retriever == "noisy_topk":
        ropts = {**paper_noisy_topk(queries), **ropts}
    sopts = dict(entry.options)
    if entry.name == "knnlm":  # the datastore's settings: build_entry builds it
        for key in ("datastore_stride", "datastore_index"):
            sopts.pop(key, None)
    simulation = sopts.pop("simulation", True)
    rng = sopts.pop("rng", seed + 1)
    return SystemSpec(
        system=entry.name,
        retriever=entry.retriever if entry.uses_data else None,
        retriever_options=ropts if entry.uses_data else {},
        k=entry.k or k,
        simulation=simulation,
        rng=rng,
        options=sopts,
    )


def paper_noisy_topk(queries: int) -> dict[str, Any]:
    """``noisy_topk``'s options in the papers' setting: its σ calibrated exactly for the
    ``queries`` the account will make (so they compose to exactly (ε_acc, δ_acc)), its
    scores clipped to :data:`~ragprivacy.dp.PAPER_SCORE_RANGE` (Δ = 1)."""
    return {
        "queries_per_account": max(1, int(queries)),
        "calibration": "exact",
        "score_range": PAPER_SCORE_RANGE,
    }


def build_entry(
    entry: SystemEntry,
    *,
    kb: KnowledgeBase | None,
    generator: Generator,
    k: int,
    queries: int,
    seed: int,
    vocabulary: Callable[[], Sequence[str]] | None = None,
) -> RAGSystem:
    """Build the system ``entry`` describes (:func:`entry_spec`, then
    :func:`ragprivacy.rag.build_system`), over ``kb`` with its PII redacted or turned
    into kNN-LM's datastore where the entry says so.

    Args:
        entry: the system.
        kb: the knowledge base (``None`` only for systems that use no data).
        generator: the generator.
        k: retrieved documents when the entry gives none.
        queries: the queries the account will make (sizes ``noisy_topk``'s window).
        seed: seed of the simulation streams.
        vocabulary: the DP-voting word domain, built on demand.
    """
    spec = entry_spec(entry, k=k, queries=queries, seed=seed)
    if not entry.uses_data:
        return build_system(spec, generator=generator)
    if kb is None:
        raise ConfigError(f"System {entry.label!r} needs a knowledge base; none was given.")
    if entry.redact_pii is not None:
        kb = redacted_knowledge_base(kb, entry.redact_pii)
    if entry.name == "knnlm":
        kb = knn_knowledge_base(
            kb,
            window=int(entry.options.get("window", KNN_WINDOW)),
            stride=int(entry.options.get("datastore_stride", 1)),
            index=str(entry.options.get("datastore_index", "exact")),
        )
    if entry.name in ONE_BY_ONE_SYSTEMS:
        inner = getattr(generator, "inner", None)
        if isinstance(inner, Generator):
            generator = GenerationsOnlyCache(generator, inner)
    return build_system(spec, kb=kb, generator=generator, vocabulary=vocabulary)
