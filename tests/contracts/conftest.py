"""Small shared fixtures of the contract suites: a tiny corpus and its knowledge bases
(``hashing`` embedder), a deterministic offline generator, a generator that fails on
demand, a leak detector, and one factory entry per retriever.

The suites enumerate the registries (``retriever_names``, ``system_names``,
``generator_names``, ``attack_names``); a name without a factory entry here or in its
suite fails with a message that says so, so a new backend cannot go untested.
"""

from __future__ import annotations

import traceback
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from ragprivacy.corpus import Corpus
from ragprivacy.dp import AccountPolicy, PrivacyEvent
from ragprivacy.errors import BackendError
from ragprivacy.generate import Generator, Prompt, TokenDistribution, tokenize
from ragprivacy.rag import knn_datastore
from ragprivacy.retrieval import (
    KnowledgeBase,
    Retriever,
    TenantRetriever,
    create_retriever,
    retriever_names,
)
from ragprivacy.types import Completion, Document, NonPrivateEvent

ACCOUNT = "alice"
K = 2  # documents per query everywhere: small, and a multiple of docs_per_voter = 1
KNN_WINDOW = 3

# Ids and secrets never occur in a query or in another document, so finding one in an
# error or a public response can only mean that it leaked from the corpus.
SECRETS = [f"zq{i}x{7 * i + 3}v" for i in range(10)]
TOPICS = ["asthma", "diabetes", "migraine", "fracture", "anemia"]
DOCS = [
    Document(
        f"rec-{i:02d}k",
        f"Patient {name} was treated for {TOPICS[i % 5]} and holds access code {SECRETS[i]}.",
    )
    for i, name in enumerate(
        ["Ana", "Boris", "Chen", "Dalia", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jana"]
    )
]
QUERIES = [
    "Who was treated for asthma?",
    "Which patient was treated for migraine?",
    "Who was treated for anemia?",
]
#: A query word the failing generator reacts to (``FailingGenerator(trigger=...)``).
TRIGGER = "kaboom"


def leaks(text: str) -> list[str]:
    """The document ids, secrets and whole document texts of the corpus found in ``text``."""
    found = [d.id for d in DOCS if d.id in text]
    found += [s for s in SECRETS if s in text]
    return found + [d.text for d in DOCS if d.text in text]


def error_leaks(err: BaseException) -> list[str]:
    """What of the corpus the caller can read from ``err``: its message and the traceback
    Python prints (which follows ``__cause__`` and unsuppressed ``__context__``)."""
    printed = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    return leaks(f"{err}\n{err!r}\n{printed}")


# --------------------------------------------------------------------------- generators


class StubGenerator(Generator):
    """A deterministic offline generator: its answer is ``"alpha <tag>"``, the tag a hash
    of the prompt's text and context (so answers differ between prompts, and a batch
    answered out of order shows); the next token is ``alpha`` (60%), ``beta`` or ``</s>``."""

    name = "stub"

    def _tag(self, prompt: Prompt) -> str:
        return f"t{zlib.crc32(repr((prompt.text, prompt.context)).encode()) % 997}"

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        tokens = ("alpha", self._tag(prompt))
        return Completion(" ".join(tokens), tokens, (-0.5, -1.5))

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        return TokenDistribution(("alpha", "beta", "</s>"), (0.6, 0.3, 0.1))

    def score(self, prompt: Prompt, continuation: str | Sequence[str]) -> Completion:
        toks = tokenize(continuation) if isinstance(continuation, str) else list(continuation)
        return Completion(" ".join(toks), tuple(toks), tuple(-1.0 for _ in toks))


class FailingGenerator(StubGenerator):
    """The stub, failing like an HTTP backend whose error quotes the request (context
    included), as a 400 body or a context-length error may.

    ``down``: every call fails. ``trigger``: only calls whose prompt text holds it fail.
    ``fail_after``: the first ``fail_after`` calls succeed, the later ones fail.
    """

    name = "failing"

    def __init__(
        self, *, down: bool = True, trigger: str | None = None, fail_after: int = 0
    ) -> None:
        self.down = down
        self.trigger = trigger
        self.fail_after = fail_after
        self.calls = 0

    def _check(self, prompts: Sequence[Prompt], prefix: object = ()) -> None:
        self.calls += 1
        if not self.down:
            return
        if self.trigger is not None and not any(self.trigger in p.text for p in prompts):
            return
        if self.calls <= self.fail_after:
            return
        quoted = [(p.text, p.context) for p in prompts]
        raise BackendError(f"HTTP 400: context too long for request {quoted!r} after {prefix!r}")

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return self.generate_batch([prompt], max_tokens=max_tokens)[0]

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        self._check(prompts)
        return [super(FailingGenerator, self).generate(p) for p in prompts]

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        self._check([prompt], prefix)
        return super().next_token_distribution(prompt, prefix)

    def next_token(self, prompt: Prompt, prefix: Sequence[str] | str = ()) -> str:
        self._check([prompt], prefix)
        return super().next_token(prompt, prefix)

    def score(self, prompt: Prompt, continuation: str | Sequence[str]) -> Completion:
        self._check([prompt])
        return super().score(prompt, continuation)


# --------------------------------------------------------------------------- retrievers


@dataclass(frozen=True)
class RetrieverSpec:
    """How to build one retriever for the contracts, and what it promises.

    ``build(kb, budget=, simulation=, rng=)`` builds it over ``kb`` with a budget of
    ``budget`` queries (per account, or per document for per-document filters).
    ``private``: its retrievals carry a DP event. ``seed``: what a user seed does in
    secure mode — ``"refused"`` (ConfigError), ``"public"`` (it seeds only public
    randomness; the noise stays secure) or ``None`` (the retriever draws no noise).
    ``spent(r)``: the budget used so far (``None``: it keeps no budget). ``refuses``: a
    query over budget is refused (rather than screened down). ``exact_scores``: its scores
    are the index's scores. ``deterministic``: the same query gives the same documents.
    ``full``: it always returns ``K`` documents. ``event_of(r)``: the event each
    retrieval must report, built independently of the retrieval.
    """

    build: Callable[..., Retriever]
    private: bool
    event_of: Callable[[Retriever], PrivacyEvent]
    seed: str | None = None
    spent: Callable[[Retriever], float] | None = None
    refuses: bool = False
    exact_scores: bool = False
    deterministic: bool = False
    full: bool = True


def _non_private(r: Retriever) -> PrivacyEvent:
    return NonPrivateEvent()


def _topk(kb: KnowledgeBase, *, budget: int, simulation: bool, rng: object) -> Retriever:
    return create_retriever("topk", kb, k=K)


def _noisy(kb: KnowledgeBase, *, budget: int, simulation: bool, rng: object) -> Retriever:
    return create_retriever(
        "noisy_topk",
        kb,
        k=K,
        epsilon_acc=4.0,
        delta_acc=1e-5,
        queries_per_account=budget,
        simulation=simulation,
        rng=rng,
    )


def _threshold(mode: str) -> Callable[..., Retriever]:
    def build(kb: KnowledgeBase, *, budget: int, simulation: bool, rng: object) -> Retriever:
        return create_retriever(
            "threshold",
            kb,
            k=K,
            mode=mode,
            tau=-1.0,  # every document passes: each query charges all of them
            epsilon_q=2.0,
            epsilon_thr=1.0,
            max_retrievals=budget,
            bin_size=0.1,
            simulation=simulation,
            rng=rng,
        )

    return build


def _projection(kb: KnowledgeBase, *, budget: int, simulation: bool, rng: object) -> Retriever:
    return create_retriever("projection", kb, k=K, dim=16, rng=0)


def _dp_projection(kb: KnowledgeBase, *, budget: int, simulation: bool, rng: object) -> Retriever:
    return create_retriever(
        "dp_projection",
        kb,
        k=K,
        dim=16,
        epsilon=5.0,
        delta=1e-4,
        simulation=simulation,
        rng=rng,
    )


def _tenant(kb: KnowledgeBase, *, budget: int, simulation: bool, rng: object) -> Retriever:
    svc = TenantRetriever(k=K, simulation=simulation, rng=rng)
    svc.add_tenant("acme", kb)
    svc.add_account(ACCOUNT, "acme", AccountPolicy(rate_limit=budget, epsilon=8.0, delta=1e-5))
    return svc


def _store_spent(r: Retriever) -> float:
    return float(r.filter.store.spent(list(r.kb.index.ids)).sum())  # type: ignore[attr-defined]


def _counter_spent(r: Retriever) -> float:
    return float(r.counter.used(ACCOUNT))  # type: ignore[attr-defined]


def _account_event(r: Retriever) -> PrivacyEvent:
    if isinstance(r, TenantRetriever):
        return r.policy_of(ACCOUNT).mechanism(r.k, simulation=r.simulation).event
    return r.policy.mechanism(r.k, simulation=r.simulation).event  # type: ignore[attr-defined]


def _threshold_spec(mode: str) -> RetrieverSpec:
    return RetrieverSpec(
        _threshold(mode),
        private=False,  # the screened set goes to the reader as it is: no DP guarantee alone
        event_of=_non_private,
        seed="refused",
        spent=_store_spent,
        exact_scores=True,
        deterministic=mode == "fixed",
        full=False,  # up to K: the noisy adaptive threshold may release fewer (Alg. 3 pads)
    )


#: Factory entries, by registry name (``tenant``: the multi-tenant router, built by hand
#: since it holds one knowledge base per tenant). A name may have several variants,
#: ``name[variant]``.
RETRIEVERS: dict[str, RetrieverSpec] = {
    "topk": RetrieverSpec(
        _topk, private=False, event_of=_non_private, exact_scores=True, deterministic=True
    ),
    "noisy_topk": RetrieverSpec(
        _noisy,
        private=True,
        event_of=_account_event,
        seed="refused",
        spent=_counter_spent,
        refuses=True,
    ),
    "threshold[fixed]": _threshold_spec("fixed"),
    "threshold[adaptive]": _threshold_spec("adaptive"),
    "projection": RetrieverSpec(
        _projection, private=False, event_of=_non_private, deterministic=True
    ),
    "dp_projection": RetrieverSpec(
        _dp_projection,
        private=True,
        event_of=lambda r: r.event,  # type: ignore[attr-defined]
        seed="public",
    ),
    "tenant": RetrieverSpec(
        _tenant,
        private=True,
        event_of=_account_event,
        seed="refused",
        spent=_counter_spent,
        refuses=True,
    ),
}
UNREGISTERED = {"tenant"}


def registered_retrievers() -> list[str]:
    """Every registered retriever's factory entries (its bare name when it has none, so
    that its tests fail asking for one), and the unregistered ones built by hand."""
    out: list[str] = []
    for name in retriever_names():
        variants = [v for v in RETRIEVERS if v == name or v.startswith(f"{name}[")]
        out += variants or [name]
    return out + sorted(UNREGISTERED)


def retriever_spec(name: str) -> RetrieverSpec:
    """The factory entry ``name`` (a bare registry name picks its first variant)."""
    spec = RETRIEVERS.get(name) or next(
        (s for v, s in RETRIEVERS.items() if v.startswith(f"{name}[")), None
    )
    if spec is None:
        pytest.fail(
            f"Retriever {name!r} is registered but has no factory entry: add it to RETRIEVERS "
            "in tests/contracts/conftest.py (how to build it, whether it is private, its "
            "budget) so that the contract suites cover it."
        )
    return spec


#: Retriever parameters by fixture name: each test asks for the subset it needs. A
#: registered name without a factory entry is in every subset, so every test fails on it.
RETRIEVER_SUBSETS: dict[str, Callable[[RetrieverSpec], bool]] = {
    "retriever_name": lambda s: True,
    "budgeted_retriever": lambda s: s.spent is not None,
    "refusing_retriever": lambda s: s.refuses,
    "noisy_retriever": lambda s: s.seed is not None,
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, keep in RETRIEVER_SUBSETS.items():
        if fixture in metafunc.fixturenames:
            names = [
                n for n in registered_retrievers() if n not in RETRIEVERS or keep(RETRIEVERS[n])
            ]
            metafunc.parametrize(fixture, names)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def contract() -> SimpleNamespace:
    """The shared constants and helpers, for the suites to read (``contract.ACCOUNT``)."""
    return SimpleNamespace(
        ACCOUNT=ACCOUNT,
        K=K,
        KNN_WINDOW=KNN_WINDOW,
        DOCS=DOCS,
        SECRETS=SECRETS,
        QUERIES=QUERIES,
        TRIGGER=TRIGGER,
        leaks=leaks,
        error_leaks=error_leaks,
        spec=retriever_spec,
    )


@pytest.fixture(scope="session")
def corpus() -> Corpus:
    return Corpus(DOCS, name="contracts")


@pytest.fixture(scope="session")
def kb(corpus: Corpus) -> KnowledgeBase:
    return KnowledgeBase.build(corpus, embedder="hashing")


@pytest.fixture(scope="session")
def knn_kb(corpus: Corpus) -> KnowledgeBase:
    """A kNN-LM datastore over the corpus (one entry per token position)."""
    return KnowledgeBase.build(knn_datastore(corpus, window=KNN_WINDOW), embedder="hashing")


@pytest.fixture
def generator() -> StubGenerator:
    """The deterministic offline generator (stateless: one instance serves many systems)."""
    return StubGenerator()


@pytest.fixture
def failing_generator() -> Callable[..., FailingGenerator]:
    """``failing_generator(down=True, trigger=None, fail_after=0)``."""
    return FailingGenerator
