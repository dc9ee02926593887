"""Systems under attack: specs with options, budgets, refusals and the privacy they spent.

The attack experiments (``membership``, ``extraction``) name the systems they attack in
``system_specs``; each entry is a registered system name, or a mapping::

    {name: rag, retriever: noisy_topk, retriever_options: {epsilon_acc: 4}, budget: target}
    {name: murag, epsilon_q: 10, k: 20, label: "MURAG ε_q=10"}

Keys: ``name`` (a registered system), ``retriever`` (a registered retriever; default
``topk``), ``retriever_options``, ``k`` (retrieved documents; default the experiment's),
``budget`` (``run`` or ``target``, below), ``label`` (the name in tables; default built
from the rest); every other key is an option of the system (``epsilon``, ``epsilon_q``,
``tau``, ...). A ``knnlm`` system reads a token-level datastore built from the knowledge
base's documents (:func:`knn_knowledge_base`; ``datastore_stride`` keeps every n-th
position, ``datastore_index`` picks its index, e.g. ``faiss-hnsw`` for large corpora).

**Offline defaults.** Private retrievers and DP-voting systems are built in their
*simulation* mode (float noise from a stream seeded by the run; the secure samplers give
the same distributions, far more slowly), and the exponential mechanism of DP voting
ranges over the words of the corpus and of the background text (a public stand-in for an
LLM's vocabulary, as in the ``private_rag`` experiment). An option given in the spec wins.

**Budgets and refusals.** Budgeted systems refuse once spent
(:class:`~ragprivacy.errors.BudgetExhaustedError`). With ``budget: run`` (default) the
attacker uses one account for the whole cell (evaluation and calibration targets), and
budgets that are sized by a query count are sized for the cell's queries (``noisy_topk``'s
``queries_per_account`` = the cell's query count, so the run's queries compose to exactly
(ε_acc, δ_acc), and its scores are clipped to the paper's
:data:`~ragprivacy.dp.PAPER_SCORE_RANGE` (0, 1), Δ = 1, unless the spec says otherwise; the
library's default is the cosine range, Δ = 2); with ``budget: target`` every target is
attacked from a fresh account of a freshly built system, so each membership test meets the
full per-account budget (and per-document filters start unspent). A budget given in the spec
is kept; a query the system refuses is answered with an empty public response marked refused
and counted.

**Privacy spent.** :class:`PrivacyTally` reads every full response (the attack never
sees it), from the one typed event each answer carries (``Response.privacy.event``):
Gaussian leaves (noisy top-K, DP-RP-G, private kNN-LM) compose exactly in Gaussian DP
(μ² add up; ε at the experiment's δ), pure-DP leaves (DP voting) add up, other leaves
compose by Rényi DP, and per-document filter charges (MURAG) count per document, so the
ε of a filtered system is the largest spend of any document; an answer without a
guarantee (``NonPrivateEvent``: plain top-K, projection, plain kNN-LM) makes the
account's ε infinite, and a system that uses no data (``non-rag``) spends 0. Per account
it gives ε and, where the composition is a pure or a Gaussian one, the largest AUC any
membership test could reach (e^ε/(1+e^ε), Φ(μ/√2)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragprivacy._validation import check_choice, check_positive_int
from ragprivacy.dp import (
    PAPER_SCORE_RANGE,
    GaussianEvent,
    NoOpEvent,
    PureDpEvent,
    SelfComposedEvent,
    compose,
    epsilon_for,
    gaussian_epsilon,
    max_auc_gdp,
    max_auc_pure_dp,
)
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.generate import Generator, Prompt, TokenDistribution
from ragprivacy.rag import (
    KNN_WINDOW,
    Query,
    RAGSystem,
    create_system,
    knn_datastore,
    system_names,
)
from ragprivacy.retrieval import KnowledgeBase, create_retriever, retriever_names
from ragprivacy.types import Completion, PrivacyCost, Response

__all__ = [
    "NO_LOGPROB_SYSTEMS",
    "ONE_BY_ONE_SYSTEMS",
    "VOTING_SYSTEMS",
    "BudgetedSystem",
    "GenerationsOnlyCache",
    "PrivacyTally",
    "SystemSpec",
    "build_system",
    "parse_system_specs",
]

VOTING_SYSTEMS = ("dp_vote", "murag", "murag_ada", "naive_multi")
NO_LOGPROB_SYSTEMS = VOTING_SYSTEMS
ONE_BY_ONE_SYSTEMS = (*VOTING_SYSTEMS, "knnlm")
_SPEC_KEYS = ("budget", "k", "label", "name", "retriever", "retriever_options")
_SIMULATED_RETRIEVERS = ("dp_projection", "noisy_topk", "threshold")


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemSpec:
    """One system under attack (see the module docstring)."""

    name: str
    label: str = ""
    retriever: str = "topk"
    retriever_options: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    k: int | None = None
    budget: str = "run"

    def __post_init__(self) -> None:
        check_choice("system", self.name, system_names())
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
        return self.name.partition(":")[0] != "non-rag"


def parse_system_specs(entries: Sequence[Any], where: str) -> tuple[SystemSpec, ...]:
    """Parse ``system_specs`` entries (names or mappings) into :class:`SystemSpec`\\ s."""
    out: list[SystemSpec] = []
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


def _spec(where: str, **kw: Any) -> SystemSpec:
    try:
        return SystemSpec(**kw)
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

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        return self.cached.score(prompt, continuation)

    @property
    def exposes_logprobs(self) -> bool:
        return self.inner.exposes_logprobs

    def config(self) -> dict[str, Any]:
        return self.inner.config()


_DATASTORES: dict[tuple[int, int, int, str], tuple[KnowledgeBase, KnowledgeBase]] = {}


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


def build_system(
    spec: SystemSpec,
    *,
    kb: KnowledgeBase | None,
    generator: Generator,
    k: int,
    queries: int,
    seed: int,
    vocabulary: Callable[[], Sequence[str]] | None = None,
) -> RAGSystem:
    """Build the system ``spec`` describes (simulation defaults, budgets sized for
    ``queries``; see the module docstring).

    Args:
        spec: the system.
        kb: the knowledge base (``None`` only for ``non-rag``).
        generator: the generator.
        k: retrieved documents when the spec gives none.
        queries: the queries the account will make (sizes ``noisy_topk``'s window).
        seed: seed of the simulation streams.
        vocabulary: the DP-voting word domain, built on demand.
    """
    if not spec.uses_data:
        return create_system(spec.name, generator=generator, **spec.options)
    if kb is None:
        raise ConfigError(f"System {spec.label!r} needs a knowledge base; none was given.")
    sopts = dict(spec.options)
    if spec.name == "knnlm":
        kb = knn_knowledge_base(
            kb,
            window=int(sopts.get("window", KNN_WINDOW)),
            stride=int(sopts.pop("datastore_stride", 1)),
            index=str(sopts.pop("datastore_index", "exact")),
        )
    ropts = dict(spec.retriever_options)
    if spec.retriever in _SIMULATED_RETRIEVERS:
        ropts.setdefault("simulation", True)
    if spec.retriever == "projection" or (
        spec.retriever in _SIMULATED_RETRIEVERS and ropts["simulation"]
    ):
        ropts.setdefault("rng", seed)  # R's seed; in simulation also the noise stream
    if spec.retriever == "noisy_topk":
        ropts.setdefault("queries_per_account", max(1, int(queries)))
        ropts.setdefault("calibration", "exact")
        ropts.setdefault("score_range", PAPER_SCORE_RANGE)
    retriever = create_retriever(spec.retriever, kb, k=spec.k or k, **ropts)
    if spec.name in (*VOTING_SYSTEMS, "knnlm"):
        inner = getattr(generator, "inner", None)
        if isinstance(inner, Generator):
            generator = GenerationsOnlyCache(generator, inner)
    if spec.name in VOTING_SYSTEMS:
        sopts.setdefault("simulation", True)
        sopts.setdefault("rng", seed + 1)
        if vocabulary is not None and "vocabulary" not in sopts:
            sopts["vocabulary"] = tuple(vocabulary())  # one tuple: DP voting caches its index
        if spec.name == "murag_ada" and "epsilon_token" not in sopts:
            eps_q = float(sopts.get("epsilon_q", 10.0))
            thr = float(sopts.get("epsilon_thr", 1.0))
            sopts["epsilon_token"] = min(2.0, eps_q - thr)
    return create_system(spec.name, retriever=retriever, generator=generator, **sopts)


@dataclass(slots=True)
class _Account:
    queries: int = 0
    refused: int = 0
    mu_sq: float = 0.0
    pure: float = 0.0
    others: list[Any] = field(default_factory=list)
    per_document: dict[str, float] = field(default_factory=dict)
    unprotected: bool = False
    retrieval_only: bool = False  # some answer's guarantee covered only its retrieval


class PrivacyTally:
    """The privacy each account spent, read from full responses (see the module docstring).

    Args:
        delta: δ at which Gaussian (and other non-pure) compositions are reported.
    """

    def __init__(self, delta: float = 1e-6) -> None:
        if not 0 < delta < 1:
            raise ConfigError(f"The 'delta' parameter must be in (0, 1); got {delta!r}.")
        self.delta = float(delta)
        self.accounts: dict[str, _Account] = {}

    def record(self, account: str, response: Response, *, refused: bool = False) -> None:
        a = self.accounts.setdefault(account, _Account())
        a.queries += 1
        if refused:
            a.refused += 1
            return
        cost = response.privacy
        a.retrieval_only |= cost.scope == "retrieval"
        if not cost.guaranteed:
            a.unprotected = True  # the documents reached the generator unprotected
            return
        if cost.per_document:  # a filtered system: the filters are the whole guarantee
            for doc, eps in cost.per_document.items():
                a.per_document[doc] = a.per_document.get(doc, 0.0) + float(eps)
            return
        for leaf, count in cost.event.flatten():  # the answer's one typed event
            if isinstance(leaf, GaussianEvent):
                a.mu_sq += count * leaf.mu**2
            elif isinstance(leaf, PureDpEvent):
                a.pure += count * leaf.epsilon
            else:
                a.others.append(leaf if count == 1 else SelfComposedEvent(leaf, count))

    def account_summary(self, account: str) -> dict[str, Any]:
        """ε (at the tally's δ), μ, and the AUC bound of one account."""
        a = self.accounts.get(account, _Account())
        eps_gauss = gaussian_epsilon(math.sqrt(a.mu_sq), self.delta) if a.mu_sq > 0 else 0.0
        eps_other = epsilon_for(compose(a.others), self.delta, "rdp") if a.others else 0.0
        eps_doc = max(a.per_document.values()) if a.per_document else 0.0
        parts = {
            "gaussian": eps_gauss,
            "pure": a.pure + eps_doc,
            "other": eps_other,
        }
        epsilon = sum(parts.values())
        bound: float | None = None
        if a.unprotected:
            epsilon, bound = math.inf, 1.0
        elif parts["other"] == 0 and parts["pure"] == 0:
            bound = max_auc_gdp(math.sqrt(a.mu_sq)) if a.mu_sq > 0 else 0.5
        elif parts["other"] == 0 and parts["gaussian"] == 0:
            bound = max_auc_pure_dp(parts["pure"])
        delta = self.delta if (a.mu_sq > 0 or a.others) else 0.0
        return {
            "epsilon": epsilon,
            "delta": delta,
            "mu": math.sqrt(a.mu_sq) if a.mu_sq > 0 else None,
            "auc_bound": bound,
            "queries": a.queries,
            "refused": a.refused,
            "scope": "retrieval" if a.retrieval_only else "answer",
        }

    def summary(self) -> dict[str, Any]:
        """Over accounts: the largest ε (and its δ and AUC bound), the mean ε, queries and
        refusals in all."""
        rows = [self.account_summary(k) for k in self.accounts]
        if not rows:
            return {"accounts": 0, "epsilon": 0.0, "queries": 0, "refused": 0}
        worst = max(rows, key=lambda r: r["epsilon"])
        bounds = [r["auc_bound"] for r in rows]
        return {
            "accounts": len(rows),
            "epsilon": worst["epsilon"],
            "epsilon_mean": float(sum(r["epsilon"] for r in rows) / len(rows)),
            "delta": worst["delta"],
            "mu": worst["mu"],
            "auc_bound": None if any(b is None for b in bounds) else max(bounds),  # type: ignore[type-var]
            "queries": sum(r["queries"] for r in rows),
            "refused": sum(r["refused"] for r in rows),
        }


def _refusal() -> Response:
    return Response(
        text="",
        tokens=(),
        logprobs=(),
        privacy=PrivacyCost(event=NoOpEvent(), mechanism="refused"),  # nothing released
        metadata={"refused": True},
    )


class BudgetedSystem(RAGSystem):
    """The system under attack as the harness runs it: built on demand, budgets per scope,
    refusals turned into empty responses, and every response's privacy tallied.

    Args:
        build: ``build(queries)`` returns the (defended) system, its budgets sized for
            ``queries`` queries of one account.
        scope: ``"run"`` — one system for every account, built for ``run_queries``;
            ``"target"`` — a fresh system per account, built for that account's first
            batch of queries.
        run_queries: the queries of the whole cell (``scope="run"``).
        tally: where the privacy spent is recorded.
        one_by_one: send queries one at a time (for systems whose batch call is not
            all-or-nothing: a refusal in the middle of a batch would lose the answers
            already paid for).
    """

    name = "budgeted"

    def __init__(
        self,
        build: Callable[[int], RAGSystem],
        *,
        scope: str = "run",
        run_queries: int = 1,
        tally: PrivacyTally | None = None,
        one_by_one: bool = False,
    ) -> None:
        self._build = build
        self.one_by_one = bool(one_by_one)
        self.scope = check_choice("scope", scope, ("run", "target"))
        self.run_queries = max(1, int(run_queries))
        self.tally = tally if tally is not None else PrivacyTally()
        self._system: RAGSystem | None = None
        self._account: str | None = None
        self.refusals = 0

    def _for(self, account: str, count: int) -> RAGSystem:
        if self.scope == "run":
            if self._system is None:
                self._system = self._build(self.run_queries)
            return self._system
        if self._system is None or account != self._account:
            self._system, self._account = self._build(max(1, count)), account
        return self._system

    @property
    def system(self) -> RAGSystem:
        """The system currently built (the run's, or the last account's)."""
        return self._for(self._account or "attacker", self.run_queries)

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self.answer_batch([query], account=account)[0]

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        key = account or "attacker"
        system = self._for(key, len(queries))
        out: list[Response] = []
        refused: list[bool] = []
        try:
            if self.one_by_one:
                raise BudgetExhaustedError("answer one by one")
            out = list(system.answer_batch(list(queries), account=key))
            refused = [False] * len(out)
        except BudgetExhaustedError:  # a batch that does not fit spent nothing
            out, refused = [], []
            for q in queries:
                try:
                    out.append(system.answer(q, account=key))
                    refused.append(False)
                except BudgetExhaustedError:
                    out.append(_refusal())
                    refused.append(True)
        for r, no in zip(out, refused):
            self.tally.record(key, r, refused=no)
        self.refusals += sum(refused)
        return out

    def describe(self) -> dict[str, Any]:
        return {"budget": self.scope, **self.system.describe()}
