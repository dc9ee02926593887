"""``SystemSpec`` and ``build_system``: the one way to build a system under test.

A :class:`SystemSpec` names the system and its retriever by their registry names and
holds every setting the system is built with (k, the privacy parameters, the voting
settings, the prompt budget, simulation and its stream); :func:`build_system` builds the
retriever over a knowledge base and then the system, through the registries
(:func:`~ragprivacy.retrieval.create_retriever`, :func:`~ragprivacy.rag.create_system`).
The experiments, the scorecard and the service's voting tenants all build their systems
this way, so a system named the same with the same settings is the same system wherever
it runs.

Which settings a system takes is read from its registered factory: a parameter the
spec is given but the system does not take is refused when the spec is made; the
simulation switch, its stream and the DP-voting vocabulary reach only the systems that
take them (the others have no noise of their own).

Parameters that follow from others are derived here, once:

* MURAG/-ADA's vote budget ε_RAG (:attr:`SystemSpec.epsilon_rag`): ε_q for MURAG, ε_q − ε_thr
  for MURAG-ADA (Private-RAG Thm 1–2; the screening's own split,
  :attr:`ragprivacy.retrieval.ThresholdRetriever.epsilon_rag`), and so the vote's ε_0
  (:attr:`SystemSpec.vote_epsilon_token`): ``epsilon_token``, or ε_RAG when that is
  smaller — a vote whose budget is below one discovery makes one discovery of all of it;
* DP voting's voters: k retrieved documents split ``docs_per_voter`` each must come out
  even (:func:`~ragprivacy.rag.dp_vote.voter_count`, which the voting systems run too).

>>> spec = SystemSpec(system="murag_ada", epsilon_q=2.5, epsilon_thr=1.0)
>>> spec.epsilon_rag, spec.vote_epsilon_token
(1.5, 1.5)
>>> SystemSpec(system="dp_vote", k=5, docs_per_voter=2)  # doctest: +ELLIPSIS
Traceback (most recent call last):
ragprivacy.errors.ConfigError: The 5 retrieved documents cannot be split evenly ...
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from ragprivacy._random import RngLike
from ragprivacy._registry import _option_names
from ragprivacy._validation import (
    check_choice,
    check_positive,
    check_positive_int,
    check_probability,
)
from ragprivacy.dp import BudgetStore
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Generator, PromptBudget
from ragprivacy.rag.base import _REGISTRY, RAGSystem, create_system, system_names
from ragprivacy.rag.dp_vote import voter_count
from ragprivacy.rag.synthetic import SyntheticDatastore
from ragprivacy.retrieval import KnowledgeBase, create_retriever, retriever_names

__all__ = ["SystemSpec", "build_system"]

#: The spec's attributes that are keyword options of the system, passed when given.
_PARAMETERS = (
    "epsilon",
    "epsilon_q",
    "total_epsilon",
    "tau",
    "epsilon_thr",
    "max_retrievals",
    "bin_size",
    "delta",
    "epsilon_token",
    "docs_per_voter",
    "max_tokens",
    "instruction",
    "prompt_budget",
)
_POSITIVE = ("epsilon", "epsilon_q", "total_epsilon", "epsilon_thr", "bin_size", "epsilon_token")
_COUNTS = ("max_retrievals", "docs_per_voter", "max_tokens")
#: MURAG and MURAG-ADA: whether the screening spends ε_thr of each query's ε_q first.
_SCREENING_SPENDS = {"murag": False, "murag_ada": True}


def _factory(name: str) -> Callable[..., RAGSystem]:
    return _REGISTRY.factory(name)


def _takes(name: str) -> frozenset[str] | None:
    """The keyword options the system ``name`` takes (``None``: its factory passes
    unnamed options on, so they cannot be listed)."""
    factory = _factory(name)
    if not inspect.isclass(factory):
        params = inspect.signature(factory).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
            return None
    return frozenset(_option_names(factory))


def _default(name: str, option: str) -> Any:
    """The default of the system ``name``'s keyword option ``option`` (``None``: none)."""
    factory = _factory(name)
    owners = [
        k.__dict__["__init__"] for k in getattr(factory, "__mro__", ()) if "__init__" in k.__dict__
    ]
    for fn in owners or [factory]:
        try:
            param = inspect.signature(fn).parameters.get(option)
        except (TypeError, ValueError):
            continue
        if param is not None and param.default is not inspect.Parameter.empty:
            return param.default
    return None


def _needs_retriever(name: str) -> bool:
    """Whether the system ``name`` reads documents through a retriever (its factory has
    a ``retriever`` parameter without a default)."""
    param = inspect.signature(_factory(name)).parameters.get("retriever")
    return param is not None and param.default is inspect.Parameter.empty


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemSpec:
    """A system under test, by registry names, with every setting it is built with.

    Settings left at ``None`` are the system's own defaults; a setting given to a system
    that does not take it is refused.

    Attributes:
        system: a registered system (:func:`~ragprivacy.rag.system_names`: ``rag``,
            ``dp_vote``, ``murag``, ``murag_ada``, ``naive_multi``, ``knnlm``, ``pe``, ...).
        retriever: a registered retriever, for systems that read documents through one
            (default ``topk``); refused for those that take none (``non-rag``,
            ``remote``, ``pe``).
        retriever_options: keyword options of the retriever (``epsilon_acc``, ``dim``,
            its own ``simulation`` and ``rng``, ...).
        k: documents retrieved per query: the retriever's k (DP voting's K = m·k_voter
            slots), PE's top-K over its synthetic documents.
        epsilon: ``dp_vote``'s ε per answer.
        epsilon_q: ε per query (``naive_multi``, ``murag``, ``murag_ada``).
        total_epsilon: ``naive_multi``'s cap on one account's ε.
        tau: MURAG's fixed relevance threshold τ.
        epsilon_thr: MURAG-ADA's ε spent on the adaptive threshold.
        max_retrievals: M, how many answers may use one document (MURAG/-ADA).
        bin_size: MURAG-ADA's score bin width.
        delta: the δ of a vote's answers (``dp_vote``, ``naive_multi``); kNN-LM's δ.
        epsilon_token: DP voting's ε_0 per discovery (MURAG/-ADA: at most ε_RAG, see
            :attr:`vote_epsilon_token`).
        docs_per_voter: documents in each voter's prompt (k must be a multiple of it).
        max_tokens: tokens per answer (DP voting, kNN-LM).
        instruction: the prompt's instruction.
        prompt_budget: every retrieved document cut and padded to it, and a query whose
            prompt could overflow the generator's context refused before retrieval.
        simulation: the system's own noise (DP voting's) from a seeded float stream
            instead of the secure samplers; systems without noise of their own ignore
            it (a retriever's mode is one of its ``retriever_options``).
        rng: the system's simulation stream, for systems that take one.
        options: any other keyword option of the system (``theta``, ``reuse_answers``,
            ``lam``, ``target``, ...); a key that names an attribute above is moved to it.
    """

    system: str
    retriever: str | None = None
    retriever_options: Mapping[str, Any] = field(default_factory=dict)
    k: int = 5
    epsilon: float | None = None
    epsilon_q: float | None = None
    total_epsilon: float | None = None
    tau: float | None = None
    epsilon_thr: float | None = None
    max_retrievals: int | None = None
    bin_size: float | None = None
    delta: float | None = None
    epsilon_token: float | None = None
    docs_per_voter: int | None = None
    max_tokens: int | None = None
    instruction: str | None = None
    prompt_budget: PromptBudget | None = None
    simulation: bool = False
    rng: RngLike = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.system, str):
            raise ConfigError(f"The 'system' parameter must be a name; got {self.system!r}.")
        check_choice("system", self.name, system_names())
        self._move_options()
        check_positive_int("k", self.k)
        for key in _POSITIVE:
            if getattr(self, key) is not None:
                check_positive(key, getattr(self, key))
        for key in _COUNTS:
            if getattr(self, key) is not None:
                check_positive_int(key, getattr(self, key))
        if self.delta is not None and check_probability("delta", self.delta) >= 1:
            raise ConfigError(f"The 'delta' parameter must be in [0, 1); got {self.delta!r}.")
        if self.prompt_budget is not None and not isinstance(self.prompt_budget, PromptBudget):
            raise ConfigError(
                f"The 'prompt_budget' parameter must be a PromptBudget; got {self.prompt_budget!r}."
            )
        if self.retriever is not None:
            check_choice("retriever", self.retriever, retriever_names())
            if not self.needs_knowledge_base:
                raise ConfigError(
                    f"System {self.name!r} reads no documents through a retriever; drop "
                    f"retriever={self.retriever!r}."
                )
        self._check_taken()
        if self.docs_per_voter is not None:
            voter_count(self.k, self.docs_per_voter)

    def _move_options(self) -> None:
        options = dict(self.options)
        defaults = {f.name: f.default for f in fields(self)}
        for key in (*_PARAMETERS, "simulation", "rng"):
            if key not in options:
                continue
            if getattr(self, key) != defaults[key]:
                raise ConfigError(
                    f"System {self.name!r} is given {key!r} twice, as an attribute and in "
                    "'options'; give it once."
                )
            object.__setattr__(self, key, options.pop(key))
        object.__setattr__(self, "options", options)
        object.__setattr__(self, "retriever_options", dict(self.retriever_options))

    def _check_taken(self) -> None:
        takes = _takes(self.name)
        if takes is None:
            return
        given = [k for k in _PARAMETERS if getattr(self, k) is not None] + list(self.options)
        wrong = [k for k in given if k not in takes]
        if wrong:
            choices = sorted(takes - {"retriever", "generator", "slots", "datastore", "store"})
            raise ConfigError(
                f"System {self.name!r} takes no {', '.join(repr(w) for w in wrong)}; it "
                f"takes: {', '.join(choices) or 'none'}."
            )

    @property
    def name(self) -> str:
        """The system's registry name (``system`` without a ``:argument``)."""
        return self.system.partition(":")[0]

    @property
    def needs_knowledge_base(self) -> bool:
        """Whether the system reads documents through a retriever, which
        :func:`build_system` builds over the knowledge base it is given."""
        return _needs_retriever(self.name)

    def _given(self, option: str) -> Any:
        value = getattr(self, option)
        return _default(self.name, option) if value is None else value

    @property
    def epsilon_rag(self) -> float | None:
        """MURAG/-ADA's vote budget per answer (Private-RAG Thm 1–2): ε_q (MURAG) or
        ε_q − ε_thr (MURAG-ADA), at the system's defaults where not given; ``None`` for
        other systems."""
        spends = _SCREENING_SPENDS.get(self.name)
        if spends is None:
            return None
        epsilon_q = float(self._given("epsilon_q"))
        return epsilon_q - float(self._given("epsilon_thr")) if spends else epsilon_q

    @property
    def vote_epsilon_token(self) -> float | None:
        """The vote's ε_0 per discovery: for MURAG/-ADA ``epsilon_token`` (its default
        where not given), or ε_RAG when that is smaller, so that a budget below one
        discovery makes one discovery of all of it; else ``epsilon_token`` as given."""
        budget = self.epsilon_rag
        if budget is None or budget <= 0:  # a split the screening refuses, with its reason
            return self.epsilon_token
        token = self._given("epsilon_token")
        return token if token <= budget else budget

    def system_options(self) -> dict[str, Any]:
        """The keyword options :func:`build_system` passes to the system's factory (the
        objects it is built over aside: retriever, generator, store, datastore,
        vocabulary)."""
        takes = _takes(self.name) or frozenset()
        out = dict(self.options)
        out.update({k: getattr(self, k) for k in _PARAMETERS if getattr(self, k) is not None})
        token = self.vote_epsilon_token
        if token is not None:
            out["epsilon_token"] = token
        if self.simulation and "simulation" in takes:
            out["simulation"] = True
        if self.rng is not None and "rng" in takes:
            out["rng"] = self.rng
        if "k" in takes and not self.needs_knowledge_base:  # it retrieves by itself (PE)
            out["k"] = self.k
        return out


def build_system(
    spec: SystemSpec,
    *,
    generator: Generator,
    kb: KnowledgeBase | None = None,
    store: BudgetStore | None = None,
    datastore: SyntheticDatastore | None = None,
    vocabulary: Sequence[str] | Callable[[], Sequence[str]] | None = None,
) -> RAGSystem:
    """Build the system ``spec`` describes: its retriever over ``kb`` (for systems that
    read documents through one), then the system over ``generator``.

    Args:
        spec: the system.
        generator: the generator.
        kb: the knowledge base (needed where :attr:`SystemSpec.needs_knowledge_base`).
        store: MURAG/-ADA's per-document budget store (default: the system's, in memory).
        datastore: PE's DP synthetic datastore (``pe``).
        vocabulary: DP voting's public word domain, or a function that makes it (called
            only for systems that take one, and only when ``spec.options`` names none).
    """
    options = spec.system_options()
    if store is not None:
        options["store"] = store
    if datastore is not None:
        options["datastore"] = datastore
    takes = _takes(spec.name) or frozenset()
    if vocabulary is not None and "vocabulary" in takes and "vocabulary" not in options:
        words = vocabulary() if callable(vocabulary) else vocabulary
        options["vocabulary"] = words if isinstance(words, tuple) else tuple(words)
    if not spec.needs_knowledge_base:
        return create_system(spec.system, generator=generator, **options)
    if kb is None:
        raise ConfigError(
            f"System {spec.name!r} reads documents through a retriever; build it over a "
            "knowledge base (kb=...)."
        )
    retriever = create_retriever(spec.retriever or "topk", kb, k=spec.k, **spec.retriever_options)
    return create_system(spec.system, retriever=retriever, generator=generator, **options)
