"""The registry of synthetic corpus kinds, ``synthesize`` and ``background_texts``.

Randomness. One integer ``seed`` fixes everything. It is expanded with
``numpy.random.SeedSequence`` into independent streams: ``spawn_key=(0, ·)`` for the
corpus itself and ``spawn_key=(1, ·)`` for background text, each split into a numpy
stream and a Faker seed. Nothing is seeded globally.

Disjoint names. Person names and invented words are split into two halves by a CRC-32
parity: member corpora (``synthesize``) only use names of parity 0 and background text
(``background_texts``) only names of parity 1, whatever the seeds and sizes. So the
background n-gram model of the reference reader never sees a member's name.
"""

from __future__ import annotations

import inspect
import zlib
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol

import numpy as np

from ragprivacy._resources import ResourceEstimate
from ragprivacy._validation import check_positive_int
from ragprivacy.corpus.collection import Corpus
from ragprivacy.corpus.pii import PIIDetector, annotate_pii, resolve_pii_detector
from ragprivacy.errors import ConfigError, UnknownBackendError

__all__ = [
    "GenerationContext",
    "SyntheticGenerator",
    "background_texts",
    "doc_id",
    "register_synthetic_kind",
    "synthesis_estimate",
    "synthesize",
    "synthetic_kinds",
]

MEMBER = 0
BACKGROUND = 1


class GenerationContext:
    """What a generator needs to make one deterministic corpus.

    Attributes:
        rng: the numpy stream for every choice the generator makes.
        faker_seed: seed for the per-call ``Faker`` instance (``seed_instance``).
        partition: 0 for member corpora, 1 for background text; names are kept to
            their partition with :meth:`allowed`.
        kind: the registered kind name (used for document ids).
    """

    def __init__(self, kind: str, seed: int, partition: int) -> None:
        self.kind = kind
        self.seed = seed
        self.partition = partition
        self.rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(partition, 0)))
        state = np.random.SeedSequence(seed, spawn_key=(partition, 1)).generate_state(1)
        self.faker_seed = int(state[0])

    def allowed(self, name: str) -> bool:
        """Whether ``name`` belongs to this context's half of the name space."""
        return zlib.crc32(name.lower().encode("utf-8")) % 2 == self.partition

    def other_stream(self, label: int) -> np.random.Generator:
        """A further independent numpy stream (for optional features)."""
        return np.random.default_rng(
            np.random.SeedSequence(self.seed, spawn_key=(self.partition, 2 + label))
        )


class SyntheticGenerator(Protocol):
    """Makes ``n`` documents of one kind: ``generator(n, ctx, **options) -> Corpus``."""

    def __call__(self, n: int, ctx: GenerationContext, **options: Any) -> Corpus: ...


_KINDS: dict[str, SyntheticGenerator] = {}


def register_synthetic_kind(
    name: str, generator: SyntheticGenerator | Callable[..., Corpus], *, replace: bool = False
) -> None:
    """Register a generator under ``name`` so ``synthesize(name, ...)`` can build it."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ConfigError(f"A synthetic kind name must be non-empty without ':'; got {name!r}.")
    if name in _KINDS and not replace:
        raise ConfigError(
            f"A synthetic kind named {name!r} is already registered; pass replace=True to "
            "overwrite it."
        )
    _KINDS[name] = generator  # type: ignore[assignment]


def synthetic_kinds() -> list[str]:
    """The registered kinds, sorted.

    >>> synthetic_kinds()
    ['email', 'knowledge', 'legal', 'medical']
    """
    return sorted(_KINDS)


def _generator(kind: str) -> SyntheticGenerator:
    try:
        return _KINDS[kind]
    except (KeyError, TypeError):
        raise UnknownBackendError(
            f"Unknown synthetic corpus kind {kind!r}; choose one of: "
            f"{', '.join(synthetic_kinds())}."
        ) from None


def _check_options(kind: str, generator: SyntheticGenerator, options: dict[str, Any]) -> None:
    """Refuse options the kind's generator does not take, naming the ones it does."""
    try:
        params = inspect.signature(generator).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    accepted = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        takes = ", ".join(repr(a) for a in accepted) if accepted else "no options"
        raise ConfigError(
            f"Synthetic kind {kind!r} has no option {unknown[0]!r}; it takes: {takes}."
        )


# Cost of the built-in kinds per document (seconds, bytes of the finished corpus in
# memory), over a fixed memory for Faker and the name pools: measured on a 2-core machine
# at n = 2,000-250,000 and rounded up (docs/scale.md, "The resource guards' cost models").
_COSTS = {
    "email": (1.5e-3, 4e3),
    "knowledge": (1.3e-3, 6e3),
    "legal": (1.5e-3, 5e3),
    "medical": (2.0e-3, 4e3),
}
_BASE_MEMORY = 100e6


def synthesis_estimate(kind: str, n: int) -> ResourceEstimate | None:
    """About how much memory and time ``synthesize(kind, n, ...)`` needs (None for a
    kind registered without a cost model).

    >>> est = synthesis_estimate("medical", 10**8)
    >>> round(est.memory / 1e9), round(est.seconds / 86400, 1)
    (400, 2.3)
    """
    if kind not in _COSTS:
        return None
    seconds, size = _COSTS[kind]
    n = check_positive_int("n", n)
    return ResourceEstimate(memory=_BASE_MEMORY + size * n, seconds=seconds * n)


def doc_id(kind: str, i: int, n: int) -> str:
    """The id of document ``i`` of ``n`` ("medical-000042")."""
    return f"{kind}-{i:0{max(6, len(str(n)))}d}"


def _faker_version() -> str:
    try:
        return version("faker")
    except PackageNotFoundError:  # pragma: no cover
        return "unknown"


def synthesize(
    kind: str,
    n: int,
    *,
    seed: int,
    pii_detector: str | PIIDetector | None = None,
    **options: Any,
) -> Corpus:
    """A deterministic synthetic corpus of ``n`` documents with PII and QA ground truth.

    The same ``(kind, n, seed, options)`` gives the same corpus in every run and process
    (with the same Faker version); different seeds give different corpora.

    Args:
        kind: one of :func:`synthetic_kinds` ("medical", "email", "legal", "knowledge").
        n: number of documents, >= 1.
        seed: non-negative integer seed.
        pii_detector: also mark what this PII detector finds (a registered name or a
            detector) where the generator marked nothing: the generator's spans are
            exact and kept; detected ones add PII the templates carry unmarked (e.g. a
            date in a sentence). None (default) keeps the generator's spans only.
        **options: kind-specific settings (e.g. ``misspelling_rate`` for "medical",
            ``question_fraction`` and ``n_chains`` for "knowledge").

    Raises:
        UnknownBackendError: ``kind`` is not registered.
        ConfigError: ``n`` < 1, a bad seed, or a bad option.

    >>> c = synthesize("medical", 3, seed=7)
    >>> len(c), c[0].id
    (3, 'medical-000000')
    """
    generator = _generator(kind)
    n = check_positive_int("n", n)
    seed = check_positive_int("seed", seed, allow_zero=True)
    _check_options(kind, generator, options)
    detector = resolve_pii_detector(pii_detector)
    corpus = generator(n, GenerationContext(kind, seed, MEMBER), **options)
    if detector is not None:
        corpus = annotate_pii(corpus, detector)
        corpus.metadata["pii_detector"] = detector.config()
    corpus.name = f"synthetic-{kind}"
    corpus.metadata.update(
        {"kind": kind, "n": n, "seed": seed, "source": "synthetic", "faker": _faker_version()}
    )
    if options:
        corpus.metadata["options"] = dict(options)
    return corpus


def background_texts(kind: str, n: int, *, seed: int, **options: Any) -> list[str]:
    """``n`` texts of ``kind`` from a stream independent of the member corpus.

    Meant for the reference reader's background n-gram model, which must hold no member
    document: the texts come from ``SeedSequence(seed, spawn_key=(1, ...))`` and use only
    names of the other half of the name space (see the module docstring), so no member
    document and no member's name or invented entity appears in them.

    >>> texts = background_texts("knowledge", 4, seed=7)
    >>> len(texts), set(texts) & set(synthesize("knowledge", 4, seed=7).texts)
    (4, set())
    """
    generator = _generator(kind)
    n = check_positive_int("n", n)
    seed = check_positive_int("seed", seed, allow_zero=True)
    _check_options(kind, generator, options)
    return generator(n, GenerationContext(kind, seed, BACKGROUND), **options).texts
