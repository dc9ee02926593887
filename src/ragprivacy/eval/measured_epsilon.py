"""Measured ε: a lower confidence bound on a system's privacy loss, from a canary.

A DP claim says how little any one document can change what the system releases. An
auditor tests it the way DP training is audited (Jagielski et al. 2020; Nasr et al.
2021), here for retrieval-augmented generation:

1. **Neighbours.** ``D`` is a corpus with a canary document (a secret in a sentence no
   other document has) at one slot; ``D'`` is the same corpus with a filler document at
   that slot, under the same id — the replace-one neighbours every ragprivacy guarantee
   is stated for. Both are embedded by one embedder fitted on the corpus without either
   (an embedder fitted on ``D`` would move every score, and the two would not be
   neighbours); by default the hashing embedder, which learns nothing from any corpus.
2. **Fresh accounts attack.** Each of ``trials`` accounts on ``D`` and as many on ``D'``
   spends its whole budget on the canary: every query the account may make asks for it.
   Its attack score is what the release shows of the canary: for a retrieval release
   (``noisy_topk``, whose guarantee covers *which* documents are retrieved) how many of
   its retrievals selected the canary's slot — or, where the release carries the noisy
   scores as the library's retriever does, the canary's noisy score summed over them; for
   an answer release (``dp_vote``; the non-private ``rag`` baseline) how many of its
   answers hold the secret.
3. **The bound.** :func:`ragprivacy.dp.threshold_epsilon` turns the two samples of scores
   into ε ≥ log((TPR − δ)/FPR) at the best threshold, with Clopper–Pearson bounds valid
   together with probability 1 − ``alpha``: a correct mechanism's claimed ε is exceeded at
   most that often, and a bound above the claim refutes it.

The claimed ε is the account's, as the system itself reports it: ``noisy_topk``'s
(ε_acc, δ_acc) over its ``queries_per_account``; ``dp_vote``'s cumulative ε after the
account's answers (read from the responses' :class:`~ragprivacy.types.PrivacyCost`); ∞
for ``rag``.

Deviation, stated: ``noisy_topk``'s trials are drawn by the retriever's own mechanism
(:meth:`~ragprivacy.dp.GaussianNoisyTopK.select`, every query's scores noised and the top
K taken) in simulation mode, batched over the accounts, rather than through one
:meth:`~ragprivacy.retrieval.Retriever.retrieve` call per query: the same distribution
(the secure sampler draws the same Gaussian on a grid), at a cost that allows the tens of
thousands of trials a bound near the claim needs. The answer systems run query by query.

What a bound can show depends on what the release shows. The top-K ids of a large tenant
say little about one document's score (it competes with every other), so the measured ε
of a ``noisy_topk`` tenant is far below its claim however many accounts attack; the same
mechanism with the noisy scores released and K covering the corpus is the Gaussian
mechanism itself, where a few ten thousand trials come close to the claim and refute a
σ that is too small.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ragprivacy._random import make_rng
from ragprivacy._validation import check_choice, check_positive_int
from ragprivacy.corpus import Canary, Corpus, make_canary
from ragprivacy.dp import MeasuredEpsilon, threshold_epsilon
from ragprivacy.embed import create_embedder
from ragprivacy.errors import BudgetExhaustedError, ConfigError
from ragprivacy.rag import RAGSystem
from ragprivacy.retrieval import KnowledgeBase, NoisyTopKRetriever
from ragprivacy.types import Document

__all__ = [
    "CHANNELS",
    "MEASURED_SYSTEMS",
    "canary_neighbours",
    "measure_answers",
    "measure_epsilon",
    "measure_noisy_topk",
    "summary_rows",
]

#: what an attack on a ``noisy_topk`` release reads: the selected ids, or also their
#: noisy scores (the library's retriever returns them; the service does not)
CHANNELS = ("ids", "scores")
_CHUNK_SCORES = 4_000_000  # scores noised at once: bounds the memory of the batched draws


def canary_neighbours(
    base: Corpus, canary: Canary, *, embedder: str = "hashing", index: str = "exact"
) -> tuple[KnowledgeBase, KnowledgeBase]:
    """``D`` (``base`` and the canary, last) and ``D'`` (``base`` and the filler at the
    same slot, same id), embedded by one ``embedder`` fitted on ``base`` alone (the
    default, ``hashing``, learns nothing: it embeds the canary's unseen words too)."""
    base.require_nonempty()
    if canary.id in base.ids:
        raise ConfigError(f"The corpus already holds a document {canary.id!r}; rename the canary.")
    emb = create_embedder(embedder)
    emb.fit(base.texts)
    out = []
    for text in (canary.text, canary.filler):
        corpus = Corpus([*base, Document(canary.id, text)], name=base.name)
        out.append(KnowledgeBase.build(corpus, embedder=emb, index=index))
    return out[0], out[1]


def measure_noisy_topk(
    retriever_in: NoisyTopKRetriever,
    retriever_out: NoisyTopKRetriever,
    canary: Canary,
    *,
    trials: int = 20_000,
    channel: str = "ids",
    alpha: float = 0.05,
    seed: int = 0,
    label: str = "noisy_topk",
) -> MeasuredEpsilon:
    """The measured ε of a ``noisy_topk`` retrieval release: ``trials`` accounts on each
    of ``D`` (``retriever_in``'s knowledge base) and ``D'``, each making its
    ``queries_per_account`` retrievals of the canary through the retriever's mechanism
    (module docstring). ``channel``: ``"ids"`` (the selected slots: what the service
    releases) or ``"scores"`` (also their noisy scores: what the library's retriever
    returns). The claim is the retriever's (ε_acc, δ_acc)."""
    trials = _check_trials(trials)
    channel = check_choice("channel", channel, CHANNELS)
    r = retriever_in.queries_per_account
    mechanism = retriever_in.policy.mechanism(retriever_in.k, simulation=True)
    if retriever_in.policy != retriever_out.policy or retriever_in.k != retriever_out.k:
        raise ConfigError("The two retrievers must have the same policy and k (only D differs).")
    rng = make_rng(seed)
    scores = []
    for retriever in (retriever_in, retriever_out):
        kb = retriever.kb
        slot = list(kb.corpus.ids).index(canary.id)  # the index holds the corpus in order
        row = kb.index.scores(kb.embedder.encode([canary.query]))[0]
        scores.append(_account_scores(mechanism, row, slot, trials, r, channel, rng))
    bound = threshold_epsilon(scores[0], scores[1], delta=retriever_in.delta_acc, alpha=alpha)
    release = "retrieved ids" if channel == "ids" else "retrieved ids and noisy scores"
    return MeasuredEpsilon(
        system=label,
        release=release,
        claimed_epsilon=retriever_in.epsilon_acc,
        claimed_delta=retriever_in.delta_acc,
        bound=bound,
        trials=trials,
        queries=r,
        alpha=alpha,
    )


def _account_scores(
    mechanism: Any,
    scores: np.ndarray,
    slot: int,
    trials: int,
    queries: int,
    channel: str,
    rng: np.random.Generator,
) -> np.ndarray:
    """Each account's attack score: over its ``queries`` draws of the mechanism on
    ``scores``, how often ``slot`` was selected (``ids``), or the sum of its noisy score
    where selected and, where not, the lowest selected noisy score, which bounds it
    (``scores``)."""
    out = np.zeros(trials)
    per_chunk = max(1, _CHUNK_SCORES // (queries * scores.size))
    for start in range(0, trials, per_chunk):
        n = min(per_chunk, trials - start)
        sel = mechanism.select(np.tile(scores, (n * queries, 1)), rng=rng)
        hit = sel.indices == slot  # [rows, K]
        if channel == "ids":
            value = hit.any(axis=1).astype(np.float64)
        else:
            noisy = np.asarray(sel.noisy_scores, dtype=np.float64)
            value = np.where(hit.any(axis=1), (noisy * hit).sum(axis=1), noisy.min(axis=1))
        out[start : start + n] = value.reshape(n, queries).sum(axis=1)
    return out


def measure_answers(
    system_in: RAGSystem | Callable[[int], RAGSystem],
    system_out: RAGSystem | Callable[[int], RAGSystem],
    canary: Canary,
    *,
    trials: int = 100,
    queries: int = 1,
    alpha: float = 0.05,
    label: str = "",
    progress: Callable[[int, int], None] | None = None,
) -> MeasuredEpsilon:
    """The measured ε of an answer release: ``trials`` fresh accounts on each of
    ``system_in`` (over ``D``) and ``system_out`` (over ``D'``) — or, where they are
    factories (trial index → system), each account on a fresh system, for systems whose
    state outlives an account (MURAG's per-document filters) — ask for the canary up to
    ``queries`` times each (fewer where the account's budget ends first), scored by the
    answers that hold the secret. The claim is the largest ε an account spent as the
    system reports it: its cumulative ε where the responses carry one, else the sum of
    its answers' (ε, δ) (basic composition); ∞ where the system gives no guarantee.
    ``progress(done, total)`` is called after each account."""
    trials = _check_trials(trials)
    queries = check_positive_int("queries", queries)
    secret = canary.secret.lower()
    claimed, delta, asked = 0.0, 0.0, 0
    samples: list[np.ndarray] = []
    total = 2 * trials
    for side, system in enumerate((system_in, system_out)):
        got = np.zeros(trials)
        for t in range(trials):
            account = f"canary-auditor-{side}-{t}"
            answering = system if isinstance(system, RAGSystem) else system(t)
            summed = (0.0, 0.0)  # the answers' (ε, δ) composed, where none says its total
            for q in range(queries):
                try:
                    resp = answering.answer(canary.query, account=account)
                except BudgetExhaustedError:
                    break
                got[t] += secret in resp.text.lower()
                cost = resp.privacy
                summed = (summed[0] + cost.epsilon, summed[1] + cost.delta)
                spent = (
                    summed
                    if cost.cumulative_epsilon is None
                    else (cost.cumulative_epsilon, cost.delta)
                )
                if spent[0] >= claimed:
                    claimed, delta = float(spent[0]), float(spent[1])
                asked = max(asked, q + 1)
            if progress is not None:
                progress(side * trials + t + 1, total)
        samples.append(got)
    bound = threshold_epsilon(samples[0], samples[1], delta=delta, alpha=alpha)
    return MeasuredEpsilon(
        system=label or str(getattr(system_in, "name", "system")),
        release="answers",
        claimed_epsilon=claimed,
        claimed_delta=delta,
        bound=bound,
        trials=trials,
        queries=asked,
        alpha=alpha,
    )


def summary_rows(results: Sequence[MeasuredEpsilon]) -> list[list[str]]:
    """The results as table rows: system, release, claimed ε (δ), measured ε ≥, TPR at
    FPR, accounts × queries, verdict."""
    rows = []
    for m in results:
        b = m.bound
        claim = "∞" if not math.isfinite(m.claimed_epsilon) else f"{m.claimed_epsilon:.3g}"
        rows.append(
            [
                m.system,
                m.release,
                f"{claim} (δ={m.claimed_delta:.0e})" if m.claimed_delta else claim,
                f"{b.epsilon_lower:.2f}",
                "no signal" if b.threshold is None else f"{b.tpr:.3f} at {b.fpr:.3f}",
                f"{m.trials} × {m.queries}",
                "REFUTED" if m.refuted else "consistent",
            ]
        )
    return rows


#: the systems :func:`measure_epsilon` knows how to attack
MEASURED_SYSTEMS = ("rag", "noisy_topk", "dp_vote", "murag")


def measure_epsilon(
    base: Corpus,
    *,
    systems: Sequence[str] = MEASURED_SYSTEMS,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    vote_epsilon: float = 4.0,
    queries: int = 2,
    k: int = 3,
    trials: int = 20_000,
    answer_trials: int = 100,
    channels: Sequence[str] = CHANNELS,
    alpha: float = 0.05,
    seed: int = 0,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[MeasuredEpsilon]:
    """The measured ε of each of ``systems`` over ``base`` with a canary
    (:func:`make_canary` of ``seed``), beside its claim:

    * ``noisy_topk``: K = ``k``, (ε_acc, δ_acc) = (``epsilon``, ``delta``) over
      ``queries`` retrievals, σ calibrated exactly, scores clipped to (0, 1); ``trials``
      accounts a side, once per channel of ``channels``;
    * ``dp_vote``: ``vote_epsilon`` per answer, ``queries`` answers an account (the claim
      is their sum), ``answer_trials`` accounts a side;
    * ``murag``: ``vote_epsilon`` per query, a document retrievable ``queries`` times
      (its filter), τ = 0; each account on a fresh system (the filters outlive
      accounts, so accounts on one system are not independent trials);
    * ``rag``: top-``k`` RAG without a guarantee, ``answer_trials`` accounts a side.

    The answer systems read with the reference reader. ``progress(system, done, total)``
    follows the answer systems' accounts."""
    from ragprivacy.eval.experiments._systems import SystemEntry
    from ragprivacy.generate import create_generator

    unknown = sorted(set(systems) - set(MEASURED_SYSTEMS))
    if unknown:
        raise ConfigError(
            f"Unknown system(s) {unknown} for a measured ε; choose from {list(MEASURED_SYSTEMS)}."
        )
    for channel in channels:
        check_choice("channel", channel, CHANNELS)
    canary = make_canary(seed)
    kb_in, kb_out = canary_neighbours(base, canary)
    # DP voting's public word domain: the same on D and D', with the secret in it
    words = tuple(sorted({w for t in (*base.texts, canary.text) for w in t.split()}))
    out: list[MeasuredEpsilon] = []
    for name in systems:
        if name == "noisy_topk":
            opts: dict[str, Any] = {
                "k": k,
                "epsilon_acc": epsilon,
                "delta_acc": delta,
                "queries_per_account": queries,
                "calibration": "exact",
                "score_range": (0.0, 1.0),
                "simulation": True,
            }
            pair = (NoisyTopKRetriever(kb_in, **opts), NoisyTopKRetriever(kb_out, **opts))
            for channel in channels:
                out.append(
                    measure_noisy_topk(
                        *pair,
                        canary,
                        trials=trials,
                        channel=channel,
                        alpha=alpha,
                        seed=seed,
                        label=f"noisy_topk (K={k})",
                    )
                )
            continue
        reader = create_generator("reference")
        entry, label = {
            "rag": (SystemEntry(name="rag", k=k), f"rag (top-{k}, no guarantee)"),
            "dp_vote": (
                SystemEntry(name="dp_vote", options={"epsilon": vote_epsilon}),
                f"dp_vote (ε={vote_epsilon:g})",
            ),
            "murag": (
                SystemEntry(
                    name="murag",
                    options={"epsilon_q": vote_epsilon, "max_retrievals": queries, "tau": 0.0},
                ),
                f"murag (ε_q={vote_epsilon:g}, M={queries})",
            ),
        }[name]

        factories = [
            _Systems(entry, kb, reader, k, queries, seed + side, words)
            for side, kb in enumerate((kb_in, kb_out))
        ]
        # MURAG's filters outlive an account: each account gets a fresh system
        built: list[RAGSystem | Callable[[int], RAGSystem]] = (
            list(factories) if name == "murag" else [f(0) for f in factories]
        )
        out.append(
            measure_answers(
                built[0],
                built[1],
                canary,
                trials=answer_trials,
                queries=queries,
                alpha=alpha,
                label=label,
                progress=None if progress is None else partial(progress, name),
            )
        )
    return out


@dataclass(frozen=True)
class _Systems:
    """Builds the system of ``entry`` over ``kb``: ``self(t)`` is a fresh one whose
    simulation streams are seeded by ``seed`` and ``t``."""

    entry: Any
    kb: KnowledgeBase
    reader: Any
    k: int
    queries: int
    seed: int
    words: tuple[str, ...]

    def __call__(self, trial: int) -> RAGSystem:
        from ragprivacy.eval.experiments._systems import build_entry

        words = self.words
        return build_entry(
            self.entry,
            kb=self.kb,
            generator=self.reader,
            k=self.k,
            queries=self.queries,
            seed=self.seed + 2 * trial,
            vocabulary=lambda: words,
        )


def _check_trials(trials: int) -> int:
    """At least 2 accounts a side: half choose the threshold, half measure it."""
    trials = check_positive_int("trials", trials)
    if trials < 2:
        raise ConfigError(
            f"The audit needs at least 2 attacking accounts a side; got {trials} (hundreds "
            "give a bound worth reading)."
        )
    return trials
