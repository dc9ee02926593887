"""The membership-attack harness: the black-box view of a system, the attack interface,
the attack registry, the member/non-member split and the batched scoring loop.

An attack sees a :class:`~ragprivacy.rag.RAGSystem` only through :class:`BlackBox`, which
returns :meth:`Response.public` (text, tokens and log-probabilities when the deployment
exposes them) and never what was retrieved. The harness (:func:`score_targets`) keeps
the retrieved ids of every query for evaluation only (retrieval recall, MBA Section 5.3).

An attack is two pure steps, so the harness can batch the queries of many targets into
one ``answer_batch`` call: :meth:`MembershipAttack.queries` (what to send for a target)
and :meth:`MembershipAttack.decide` (a membership score from the public answers; higher
means member). Attacks that learn implement :meth:`MembershipAttack.fit` on a
:class:`ShadowData` (a system the attacker controls, with known members).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._registry import Registry
from ragprivacy._validation import check_positive_int, check_probability
from ragprivacy.corpus import Corpus
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.rag import Query, RAGSystem
from ragprivacy.types import Document, Response

__all__ = [
    "AttackScores",
    "BlackBox",
    "MembershipAttack",
    "MembershipSplit",
    "ShadowData",
    "attack_factory",
    "attack_names",
    "create_attack",
    "register_attack",
    "score_targets",
    "split_membership",
]


class BlackBox(RAGSystem):
    """What an attack may call: ``answer`` returns only the public part of a response.

    Args:
        system: the system under attack.
        observe: called with every full response (evaluation-only bookkeeping, e.g. which
            documents were retrieved); the attack never sees what it records.
    """

    name = "black-box"

    def __init__(
        self, system: RAGSystem, *, observe: Callable[[Response], None] | None = None
    ) -> None:
        self._system = system
        self._observe = observe

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self.answer_batch([query], account=account)[0]

    def answer_batch(
        self, queries: Sequence[str | Query], *, account: str | None = None
    ) -> list[Response]:
        full = self._system.answer_batch(list(queries), account=account)
        if self._observe is not None:
            for r in full:
                self._observe(r)
        return [r.public() for r in full]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "system": self._system.describe()}


@dataclass(frozen=True, slots=True)
class ShadowData:
    """A system the attacker built and controls, with its known members and non-members
    (S-RAG Section 4.2.1: the auxiliary set split into ``D_s,i`` and ``D_s,o``)."""

    system: RAGSystem
    members: tuple[Document, ...]
    non_members: tuple[Document, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(self.members))
        object.__setattr__(self, "non_members", tuple(self.non_members))
        if not self.members or not self.non_members:
            raise DataError(
                "Shadow data needs members and non-members; got "
                f"{len(self.members)} and {len(self.non_members)}."
            )


class MembershipAttack(ABC):
    """A membership-inference attack on a black-box RAG system.

    Subclasses set :attr:`name`, implement :meth:`queries` and :meth:`decide`, and, when
    they learn, :meth:`fit`. :attr:`requires_logprobs` says whether :meth:`decide` needs
    token log-probabilities in the responses.
    """

    name: str = "attack"
    requires_logprobs: bool = False
    learns: bool = False

    def fit(self, shadow: ShadowData) -> MembershipAttack:
        """Learn from a shadow system (no-op for attacks that do not learn)."""
        return self

    @abstractmethod
    def queries(self, target: Document) -> list[Query]:
        """The queries sent to the system for ``target`` (at least one)."""

    @abstractmethod
    def decide(self, target: Document, responses: Sequence[Response]) -> float:
        """The membership score of ``target`` from the public ``responses`` to
        :meth:`queries` (same order); higher means member."""

    def score(self, target: Document, system: RAGSystem) -> float:
        """Score one target against ``system`` (seen through :class:`BlackBox`)."""
        view = system if isinstance(system, BlackBox) else BlackBox(system)
        return self.decide(target, view.answer_batch(self.queries(target)))

    def predict(self, score: float) -> bool | None:
        """The attack's own member/non-member decision for a score, when it has one
        (MBA's γ·M rule, RAG-MIA's yes/no); ``None`` otherwise."""
        return None

    def config(self) -> dict[str, Any]:
        """JSON-ready settings (recorded in results)."""
        return {"name": self.name}

    def _need_logprobs(self, responses: Sequence[Response]) -> None:
        if any(r.logprobs is None for r in responses):
            raise DataError(
                f"The {self.name!r} attack needs token log-probabilities, but the system's "
                "responses carry none; choose an attack that reads text only (mba, srag, "
                "rag-mia, s2mia-s, interrogation) or expose log-probabilities."
            )


@dataclass(slots=True)
class AttackScores:
    """Scores of a batch of targets, with what the harness observed for evaluation.

    ``retrieved[i]`` is whether target ``i`` was among the documents retrieved for its
    first query, ``retrieved_any[i]`` for any of its queries (evaluation-only view).
    """

    ids: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    retrieved: list[bool] = field(default_factory=list)
    retrieved_any: list[bool] = field(default_factory=list)
    queries: int = 0

    def retrieval_recall(self) -> float:
        """Share of members retrieved by their first query (MBA Section 5.3)."""
        got = [r for r, y in zip(self.retrieved, self.labels) if y == 1]
        return float(np.mean(got)) if got else float("nan")

    def records(self) -> list[dict[str, Any]]:
        return [
            {"id": i, "label": y, "score": s, "retrieved": r, "retrieved_any": a}
            for i, s, y, r, a in zip(
                self.ids, self.scores, self.labels, self.retrieved, self.retrieved_any
            )
        ]


def score_targets(
    attack: MembershipAttack,
    system: RAGSystem,
    targets: Sequence[Document],
    labels: Sequence[int] | None = None,
    *,
    batch_size: int = 64,
    progress: Callable[[int], None] | None = None,
    account: str | Callable[[int, Document], str] | None = None,
) -> AttackScores:
    """Score ``targets`` with ``attack`` against ``system``, batching their queries.

    Args:
        attack: the attack (fitted already when it learns).
        system: the system under attack; the attack sees it through :class:`BlackBox`.
        targets: the documents to score.
        labels: 1 for members, 0 for non-members (recorded; ``None`` records -1).
        batch_size: targets whose queries go in one ``answer_batch`` call.
        progress: called with the number of targets finished after each batch.
        account: the attacker's account for every query, or ``account(i, target)`` for
            one account per target (each target's queries then go in their own
            ``answer_batch`` call, so per-account budgets apply per target).
    """
    batch_size = check_positive_int("batch_size", batch_size)
    if labels is not None and len(labels) != len(targets):
        raise DataError(
            f"Got {len(targets)} targets but {len(labels)} labels; give one label per target."
        )
    out = AttackScores()
    for start in range(0, len(targets), batch_size):
        chunk = list(targets[start : start + batch_size])
        plans = [attack.queries(t) for t in chunk]
        if any(not p for p in plans):
            raise DataError(f"The {attack.name!r} attack produced no query for a target.")
        flat = [q for p in plans for q in p]
        seen: list[tuple[str, ...]] = []
        view = BlackBox(system, observe=_recorder(seen))
        if callable(account):
            responses = []
            for k, (doc, plan) in enumerate(zip(chunk, plans)):
                responses += view.answer_batch(plan, account=account(start + k, doc))
        else:
            responses = view.answer_batch(flat, account=account)
        if len(seen) != len(responses):  # a system that bypassed answer_batch's contract
            seen = [()] * len(responses)
        pos = 0
        for k, (doc, plan) in enumerate(zip(chunk, plans)):
            rs = responses[pos : pos + len(plan)]
            ids = seen[pos : pos + len(plan)]
            pos += len(plan)
            out.ids.append(doc.id)
            out.scores.append(float(attack.decide(doc, rs)))
            out.labels.append(int(labels[start + k]) if labels is not None else -1)
            out.retrieved.append(doc.id in ids[0])
            out.retrieved_any.append(any(doc.id in i for i in ids))
        out.queries += len(flat)
        if progress is not None:
            progress(len(chunk))
    return out


def _recorder(seen: list[tuple[str, ...]]) -> Callable[[Response], None]:
    return lambda r: seen.append(r.retrieved_ids)


@dataclass(frozen=True, slots=True)
class MembershipSplit:
    """The member/non-member protocol of MBA 5.1 and S-RAG 5.1.

    ``members`` go into the system's knowledge base (``member_fraction`` of the corpus,
    80% by default), ``non_members`` are held out. ``evaluation`` and ``calibration``
    are disjoint balanced target sets (half members, half non-members) with their labels;
    the calibration set chooses thresholds, the evaluation set is reported.
    """

    members: Corpus
    non_members: Corpus
    evaluation: tuple[Document, ...]
    evaluation_labels: tuple[int, ...]
    calibration: tuple[Document, ...]
    calibration_labels: tuple[int, ...]


def split_membership(
    corpus: Corpus,
    *,
    targets: int,
    calibration: int = 0,
    member_fraction: float = 0.8,
    rng: RngLike = None,
    members: Sequence[str] | None = None,
) -> MembershipSplit:
    """Split ``corpus`` into members and non-members and draw balanced target sets.

    Args:
        corpus: all documents.
        targets: size of the evaluation set (even; half members, half non-members).
        calibration: size of the calibration set (even, may be 0).
        member_fraction: share of the corpus stored in the knowledge base.
        rng: seed or generator (fixes the split and the draws).
        members: the ids of the members where they are known (a deployed system under
            audit: the candidates it holds); ``member_fraction`` is then unused.

    Raises:
        ConfigError: the corpus holds too few non-members for the requested sets, or
            ``members`` names an id the corpus lacks (the message counts them; it does not
            quote private ids).
    """
    check_probability("member_fraction", member_fraction, open_interval=True)
    targets = check_positive_int("targets", targets)
    calibration = check_positive_int("calibration", calibration, allow_zero=True)
    gen = make_rng(rng)
    if members is None:
        members_c, non_members = corpus.split(member_fraction, rng=gen)
    else:
        known = set(members)
        missing = len(known - set(corpus.ids))
        if missing:
            raise ConfigError(
                f"{missing} of the {len(known)} member ids are not in the corpus of "
                f"{len(corpus)} documents; list ids of the corpus, one per line."
            )
        members_c = corpus.subset([i for i in corpus.ids if i in known])
        non_members = corpus.subset([i for i in corpus.ids if i not in known])
    half_e, half_c = targets // 2, calibration // 2
    need = half_e + half_c
    if need > len(non_members) or need > len(members_c) or half_e == 0:
        raise ConfigError(
            f"The corpus of {len(corpus)} documents has {len(non_members)} non-members and "
            f"{len(members_c)} members"
            + (f" at member_fraction={member_fraction}; " if members is None else "; ")
            + f"{targets} targets and {calibration} calibration documents need {need} of each "
            f"(at least 1). Use a larger corpus or fewer targets."
        )
    mi = gen.permutation(len(members_c))[:need]
    ni = gen.permutation(len(non_members))[:need]
    m_docs = [members_c[int(i)] for i in mi]
    n_docs = [non_members[int(i)] for i in ni]
    ev = m_docs[:half_e] + n_docs[:half_e]
    ev_y = [1] * half_e + [0] * half_e
    ca = m_docs[half_e:] + n_docs[half_e:]
    ca_y = [1] * half_c + [0] * half_c
    return MembershipSplit(members_c, non_members, tuple(ev), tuple(ev_y), tuple(ca), tuple(ca_y))


_REGISTRY: Registry[MembershipAttack] = Registry("attack")


def register_attack(name: str, factory: Any, *, replace: bool = False) -> None:
    """Register a membership attack factory (called with keyword options)."""
    _REGISTRY.register(name, factory, replace=replace)


def create_attack(spec: str, **options: Any) -> MembershipAttack:
    """Build a membership attack by registry name (``"mba"``, ``"srag"``, ...)."""
    try:
        return _REGISTRY.create(spec, **options)
    except TypeError as exc:
        raise ConfigError(f"Bad options for attack {spec!r}: {exc}.") from None


def attack_factory(name: str) -> Any:
    """The factory registered as ``name`` (to inspect the options it takes)."""
    return _REGISTRY.factory(name)


def attack_names() -> list[str]:
    """The registered membership attacks, sorted."""
    return _REGISTRY.names()
