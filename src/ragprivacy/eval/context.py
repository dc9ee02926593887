"""``RunContext``: builds (once per process) the corpora, knowledge bases, generators
and systems an experiment's cells need, from the config."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ragprivacy.corpus import Corpus
from ragprivacy.eval.cache import CachedGenerator, GenerationCache
from ragprivacy.eval.config import CorpusSpec, ExperimentConfig
from ragprivacy.generate import Generator, create_generator, tokenize
from ragprivacy.rag import RAGSystem, SystemSpec, build_system
from ragprivacy.retrieval import KnowledgeBase

__all__ = ["RunContext", "derive_seed", "load_corpus_spec"]


def derive_seed(root: int, *labels: str) -> int:
    """A seed for a named part of a run, derived from the root seed (stable across runs
    and processes, independent across labels)."""
    label = "/".join(labels).encode()
    return (root * 1_000_003 + zlib.crc32(label)) % (2**31 - 1)


def load_corpus_spec(spec: CorpusSpec, *, root_seed: int, name: str) -> Corpus:
    """Load or synthesise the corpus a :class:`CorpusSpec` describes."""
    from ragprivacy.corpus import load_corpus, load_dataset_corpus, redact_corpus, synthesize

    detector = None if spec.pii_detector == "none" else spec.pii_detector
    if spec.synthetic is not None:
        seed = spec.seed if spec.seed is not None else derive_seed(root_seed, "corpus", name)
        corpus = synthesize(spec.synthetic, spec.n, seed=seed, pii_detector=detector)
    elif spec.dataset is not None:  # with 'path': the dataset's own files, read directly
        default = "regex" if spec.pii_detector is None else detector
        corpus = load_dataset_corpus(
            spec.dataset,
            path=spec.path,
            split=spec.split,
            limit=spec.limit,
            pii_detector=default,
        )
    else:
        default = "regex" if spec.pii_detector is None else detector
        corpus = load_corpus(str(spec.path), pii_detector=default)
    if spec.limit is not None and len(corpus) > spec.limit:
        corpus = corpus.subset(corpus.ids[: spec.limit])
    if spec.redact_pii is not None:
        corpus = redact_corpus(corpus, spec.redact_pii)
    return corpus.require_nonempty()


class RunContext:
    """Per-process builder and memo of the objects a run needs.

    Args:
        config: the experiment config.
        cache_dir: where generator calls are cached (``None`` disables the cache).
        cache: the generation cache itself (instead of ``cache_dir``; e.g. a Ray worker's
            in-memory copy).
    """

    def __init__(
        self,
        config: ExperimentConfig,
        *,
        cache_dir: str | Path | None = None,
        cache: GenerationCache | None = None,
    ) -> None:
        self.config = config
        if cache is None and cache_dir:
            cache = GenerationCache(Path(cache_dir) / "generations.sqlite")
        self.cache = cache
        self._corpora: dict[str, Corpus] = {}
        self._kbs: dict[str, KnowledgeBase] = {}
        self._generators: dict[str, Generator] = {}
        self._vocabularies: dict[str, tuple[str, ...]] = {}
        self._backgrounds: dict[str, list[str]] = {}
        self.progress: Callable[[int], None] | None = None  # units done, set by the runner
        # a remote endpoint's calls as they happen (a CallTally), set by the runner
        self.calls: Callable[[Any], None] | None = None

    def corpus(self, name: str) -> Corpus:
        if name not in self._corpora:
            self._corpora[name] = load_corpus_spec(
                self.config.corpora[name], root_seed=self.config.seed, name=name
            )
        return self._corpora[name]

    def knowledge_base(self, name: str) -> KnowledgeBase:
        if name not in self._kbs:
            models = self.config.models
            self._kbs[name] = KnowledgeBase.build(
                self.corpus(name), embedder=models.embedder, index=models.index
            )
        return self._kbs[name]

    def background_texts(self, name: str) -> list[str]:
        """Non-member text for the reference reader's background model: the same kind of
        synthetic text from an independent seed (plain prose when the corpus is not
        synthetic).

        Generated once per corpus and context (most of a second each time at the default
        ``background_n``): every experiment's generator asks for it, the same texts each
        time. Each call gets a list of its own.
        """
        if name not in self._backgrounds:
            from ragprivacy.corpus import background_texts

            spec = self.config.corpora[name]
            kind = spec.synthetic or "knowledge"
            seed = derive_seed(self.config.seed, "background", name)
            self._backgrounds[name] = background_texts(
                kind, self.config.models.background_n, seed=seed
            )
        return list(self._backgrounds[name])

    def vocabulary(self, name: str) -> tuple[str, ...]:
        """DP voting's word domain for the corpus: its words and its background's (the
        stand-in for an LLM's fixed tokenizer vocabulary; see ``rag.dp_vote``).

        One tuple per corpus and context: DP voting indexes a vocabulary once per tuple.
        """
        if name not in self._vocabularies:
            words = {w for d in self.corpus(name) for w in tokenize(d.text)}
            words |= {w for t in self.background_texts(name) for w in tokenize(t)}
            self._vocabularies[name] = tuple(sorted(words))
        return self._vocabularies[name]

    def generator(self, corpus_name: str) -> Generator:
        """The generator of the config; the reference reader gets a background model
        fitted on non-member text of the corpus's kind."""
        if corpus_name not in self._generators:
            models = self.config.models
            options: dict[str, Any] = dict(models.generator_options)
            if models.generator.partition(":")[0] == "reference" and "background" not in options:
                options["background"] = self.background_texts(corpus_name)
            gen = create_generator(models.generator, **options)
            if self.cache is not None:
                gen = CachedGenerator(gen, self.cache)
            self._generators[corpus_name] = gen
        return self._generators[corpus_name]

    def system(self, spec: str, corpus_name: str, *, k: int = 5, **options: Any) -> RAGSystem:
        """A RAG system by registry name over the corpus's knowledge base
        (:func:`ragprivacy.rag.build_system`); ``retriever`` names its retriever (default
        ``topk``), every other option is the system's."""
        generator = self.generator(corpus_name)
        retriever = options.pop("retriever", None)
        built = SystemSpec(system=spec, retriever=retriever, k=k, options=options)
        kb = self.knowledge_base(corpus_name) if built.needs_knowledge_base else None
        return build_system(built, kb=kb, generator=generator)
