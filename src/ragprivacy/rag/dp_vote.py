"""``dp_vote``: single-query DP-RAG by token voting (Private-RAG Alg. 4 / 7–9), the
vote itself (:func:`dp_vote_generate`) and the system that runs it (:class:`DPVoteRAG`,
registered as ``dp_vote``; the multi-query pipelines of :mod:`ragprivacy.rag.murag` vote
through the same machinery).

Per query with budget ε and per-discovery budget ε_0 (Alg. 4):

1. ε_Expo = ε_Lap = ε_0/2; c = ⌊ε/ε_0⌋; θ̂ = θ + Lap(2/ε_Lap) (line 2);
2. retrieve m·k documents and partition them uniformly at random into m voters (3–4);
3. for t = 1..T_max: y^nonRAG_t = LLM(x, "" | y_<t); every voter votes y^(i)_t =
   LLM(x, D^i | y_<t); Hist_t counts the votes (Alg. 8); if Hist_t[y^nonRAG_t] +
   Lap(4/ε_Lap) ≤ θ̂ (a *discovery*), y_t = expoMech(Hist_t; ε_Expo) (Alg. 9) and c ← c − 1,
   else y_t = y^nonRAG_t; stop at ⟨EOS⟩ or when c = 0 (lines 5–17).

Lines 2 and 11 are exactly :class:`ragprivacy.dp.AboveThreshold` with ε = ε_Lap, at most c
discoveries and ``below=True``; line 12 is :func:`ragprivacy.dp.exponential_mechanism`.
Neighbouring relation: add/remove one document, which changes one voter (Private-RAG F.1),
so every count has sensitivity 1. Guarantee: ε-DP (Lemma 1: c discoveries of ε_0 each);
the response reports ``PureDpEvent(c·ε_0)``, charged whatever the number of discoveries.

**Accounting at a δ > 0** (``delta``, default 0). The c discoveries are then composed by
the tightest accountant, the exact composition of c ε_0-DP steps (Kairouz, Oh & Viswanath
2015; :func:`ragprivacy.dp.calibrate_pure_steps`), instead of the pure sum c·ε_0 ≤ ε: with
``max_discoveries`` = c given, ε_0 is the largest per-discovery ε for which c steps are
(ε, δ)-DP (e.g. ε = 1, δ = 10⁻³, c = 100: ε_0 = 0.0390 instead of 0.01); with only
``epsilon_token`` = ε_0, c is the most steps (ε, δ) affords
(:func:`ragprivacy.dp.max_pure_steps`). That composition needs every discovery to be a
separate ε_0-DP mechanism, which Alg. 4 is not: its line 2 noises the threshold once for
all c discoveries (Lemma 1 then bounds the run by c·ε_0 as a whole). So at δ > 0 the
threshold is re-drawn after each discovery (``AboveThreshold(resample_threshold=True)``,
Dwork & Roth 2014 Alg. 2): each segment up to and including a discovery is AboveThreshold
with one discovery (ε_Lap-DP) followed by the exponential mechanism (ε_Expo-DP), so
ε_0-DP, and the answer is their adaptive composition. The answer's event is then
``SelfComposedEvent(PureDpEvent(ε_0), c)``, stated at δ (≤ ε by construction), charged
whatever the number of discoveries; at δ = 0 everything is as in Alg. 4. The response's
metadata names the accounting (``vote_accounting``: ``pure`` or ``optimal``), ε_0 and c.

**Voters.** ``LLM(x, D^i | y_<t)`` is the greedy next token of the generator given the
voter's documents and the shared prefix, asked through the generator's
:class:`~ragprivacy.generate.GreedySteps` session over the distinct contexts (voters with
identical contexts — in particular all-padding voters, which equal the non-RAG prompt —
share a row and count with their multiplicity). Two ways, the same votes:

* *batched* sessions (``hf:``): every row, the non-RAG prompt included, is asked at every
  step — one left-padded forward pass over all contexts, then one batched single-token
  pass per released token with the key/value cache reused (m + 1 rows, T_max passes),
  instead of a separate model call per voter and token;
* otherwise (the reference reader, remote APIs): each distinct context is answered once
  (``generate_batch`` over all of them in one call), and while the shared prefix agrees
  with a voter's own greedy answer its vote is that answer's next token (or ⟨EOS⟩ at its
  end) — for an autoregressive greedy model this *is* the argmax of its next-token
  distribution, so no further call is needed. Only voters whose answer disagrees with the
  prefix are asked (once per distinct context and token). For the reference reader, whose
  ANSWER rule is not autoregressive, this rule *defines* its conditional continuation.

**Voter partition.** Alg. 4 line 4 pads the m·k retrieved documents with empty ones and
splits them uniformly at random: from the seeded stream in simulation, from the OS
CSPRNG in secure mode (``ragprivacy.dp.simulation_rng`` refuses a seed there). A request
whose generation fails after retrieval is charged like an answer
(:func:`ragprivacy.rag.charged_on_failure`: whether it fails can depend on the documents).
With ``prompt_budget`` each document is cut and padded to its budget, and a query whose
voter prompt could overflow the generator's context is refused before retrieval.

**Vocabulary.** The exponential mechanism ranges over a fixed vocabulary V (Alg. 9), which
must not depend on the private documents: pass ``vocabulary`` (an LLM's tokenizer
vocabulary; for the word-level reference reader, the words of a public word list). Votes
for tokens outside V are dropped (counted for none), which keeps sensitivity 1. Default:
the non-RAG next-token distribution's support at the first step (public: it sees no
document) plus ⟨EOS⟩.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ragprivacy._random import RngLike
from ragprivacy._validation import check_positive, check_positive_int, check_probability
from ragprivacy.dp import (
    ChaCha20Bits,
    PureDpEvent,
    SelfComposedEvent,
    TokenRelease,
    VoteRecorder,
    VoteStep,
    VoteTrace,
    calibrate_pure_steps,
    event_epsilon,
    max_pure_steps,
    simulation_rng,
    vote_histogram,
    voter_slots,
)
from ragprivacy.errors import ConfigError
from ragprivacy.generate import (
    Generator,
    GreedySteps,
    Prompt,
    PromptBudget,
    normalize,
    tokenize,
)
from ragprivacy.rag.base import (
    Query,
    RAGSystem,
    answer_cost,
    charged_on_failure,
    check_prompt,
    register_system,
)
from ragprivacy.retrieval import Retriever
from ragprivacy.types import Completion, PrivacyCost, PrivacyEvent, Response, Retrieval

__all__ = ["EOS", "DPVoteConfig", "DPVoteRAG", "VoteResult", "dp_vote_generate", "voter_count"]

EOS = "</s>"


@dataclass(frozen=True, slots=True, kw_only=True)
class DPVoteConfig:
    """Settings of DP-RAG by token voting (Private-RAG Alg. 4; defaults from App. E).

    Attributes:
        epsilon_token: ε_0, the budget of one discovery (ε_token ∈ {0.5, 1, 2} in App. E);
            not used when ``max_discoveries`` is given.
        theta: the voting threshold θ (default m/2, rounded down: τ_svt = k/2 in App. E).
        max_tokens: T_max.
        simulation: float noise from ``rng`` instead of the secure samplers.
        delta: the δ of each answer's (ε, δ) target, in [0, 1). 0 (default): pure
            composition, c·ε_0 ≤ ε, as Alg. 4. > 0: the discoveries are composed by the
            exact accountant at δ and the threshold is re-drawn after each (module
            docstring).
        max_discoveries: c. When given, ε_0 is calibrated from (ε, δ, c)
            (:func:`ragprivacy.dp.calibrate_pure_steps`: ε/c at δ = 0); when not, c is the
            most discoveries (ε, δ) affords at ``epsilon_token``.
    """

    epsilon_token: float = 2.0
    theta: int | None = None
    max_tokens: int = 16
    simulation: bool = False
    delta: float = 0.0
    max_discoveries: int | None = None

    def __post_init__(self) -> None:
        check_positive("epsilon_token", self.epsilon_token)
        check_positive_int("max_tokens", self.max_tokens)
        if self.theta is not None:
            check_positive_int("theta", self.theta, allow_zero=True)
        if check_probability("delta", self.delta) >= 1:
            raise ConfigError(f"The 'delta' parameter must be in [0, 1); got {self.delta!r}.")
        if self.max_discoveries is not None:
            check_positive_int("max_discoveries", self.max_discoveries)

    @property
    def accounting(self) -> str:
        """``pure`` (δ = 0: c·ε_0, Lemma 1) or ``optimal`` (δ > 0: exact composition of
        the c discoveries, Kairouz, Oh & Viswanath 2015)."""
        return "optimal" if self.delta > 0 else "pure"

    def discoveries(self, epsilon: float) -> int:
        """c: ``max_discoveries`` if given; else ⌊ε/ε_0⌋ (Alg. 4 line 2) at δ = 0, the most
        ε_0-steps that are (ε, δ)-DP at δ > 0 (:func:`ragprivacy.dp.max_pure_steps`)."""
        epsilon = check_positive("epsilon", epsilon)
        if self.max_discoveries is not None:
            return self.max_discoveries
        return max_pure_steps(epsilon, self.delta, self.epsilon_token)

    def step_epsilon(self, epsilon: float) -> float:
        """ε_0 of one discovery at budget ε: ``epsilon_token``, or calibrated from
        (ε, δ, ``max_discoveries``) when that is given."""
        epsilon = check_positive("epsilon", epsilon)
        if self.max_discoveries is None:
            return self.epsilon_token
        return calibrate_pure_steps(epsilon, self.delta, self.max_discoveries)

    def event(self, epsilon: float) -> PrivacyEvent:
        """One answer's event at budget ε: ``PureDpEvent(c·ε_0)`` (δ = 0, Lemma 1) or
        ``SelfComposedEvent(PureDpEvent(ε_0), c)`` (δ > 0, re-drawn thresholds)."""
        c = self.discoveries(epsilon)
        if c == 0:
            raise ConfigError(
                f"The per-query budget {epsilon} is below one discovery's ε_0 = "
                f"{self.epsilon_token} (delta={self.delta:g}); raise epsilon or lower "
                f"epsilon_token."
            )
        step = self.step_epsilon(epsilon)
        if self.delta > 0:
            return SelfComposedEvent(PureDpEvent(step), c)
        return PureDpEvent(c * step)

    def epsilon_of(self, epsilon: float) -> float:
        """The ε one answer at budget ε is charged, at δ (≤ ε)."""
        return event_epsilon(self.event(epsilon), self.delta)[0]


@dataclass(frozen=True, slots=True)
class VoteResult:
    """One DP-RAG answer: its tokens, the discoveries made, the cost, and how many
    generator calls the voting took (``calls``); ``epsilon_token`` is ε_0 of one
    discovery and ``accounting`` the vote's (``pure`` or ``optimal``)."""

    completion: Completion
    discoveries: int
    max_discoveries: int
    event: PrivacyEvent | None
    calls: int
    epsilon_token: float = math.nan
    accounting: str = "pure"
    trace: VoteTrace | None = None


class _Vocab:
    """The exponential mechanism's domain V with ⟨EOS⟩, and each normalised token's
    position (built once per vocabulary tuple: normalising V costs more than a vote)."""

    __slots__ = ("_digest", "eos", "pos_of", "source", "tokens")

    def __init__(self, vocabulary: Sequence[str]) -> None:
        self.source = vocabulary  # held so the id used as the cache key stays this object's
        self.tokens = list(dict.fromkeys(vocabulary))
        self.pos_of = {normalize(tok): i for i, tok in enumerate(self.tokens)}
        if normalize(EOS) not in self.pos_of:
            self.pos_of[normalize(EOS)] = len(self.tokens)
            self.tokens.append(EOS)
        self.eos = self.pos_of[normalize(EOS)]
        self._digest = ""

    @property
    def digest(self) -> str:
        """SHA-256 of the domain's tokens in order (what an audited answer's positions
        refer to), computed once."""
        if not self._digest:
            self._digest = hashlib.sha256(
                json.dumps(self.tokens, ensure_ascii=False).encode("utf-8")
            ).hexdigest()
        return self._digest


_VOCABS: OrderedDict[int, _Vocab] = OrderedDict()
_VOCABS_LOCK = threading.Lock()


def _vocab(vocabulary: Sequence[str]) -> _Vocab:
    """The domain of ``vocabulary``, cached for tuples only (a list may change in place
    under the same id; ``DPVoteRAG`` keeps its vocabulary as a tuple)."""
    if not isinstance(vocabulary, tuple):
        return _Vocab(vocabulary)
    with _VOCABS_LOCK:
        hit = _VOCABS.get(id(vocabulary))
        if hit is not None and hit.source is vocabulary:
            _VOCABS.move_to_end(id(vocabulary))
            return hit
    built = _Vocab(vocabulary)
    with _VOCABS_LOCK:
        _VOCABS[id(vocabulary)] = built
        while len(_VOCABS) > 8:
            _VOCABS.popitem(last=False)
    return built


_Votes = tuple[list[str], "np.ndarray[Any, np.dtype[np.int64]]", int]


def _batched_votes(steps: GreedySteps, out: list[str], pos_of: dict[str, int]) -> _Votes:
    """Every row's vote after ``out`` in one call of a batched session: (votes, their
    vocabulary positions (−1: outside V), calls made)."""
    votes = steps.next_tokens(out)
    vote_pos = np.array([pos_of.get(normalize(t), -1) for t in votes], dtype=np.int64)
    return votes, vote_pos, 1


class _LazyVotes:
    """Votes from each row's own greedy answer while the released prefix agrees with it;
    the generator is asked only for the rows whose answer disagrees (module docstring)."""

    __slots__ = ("answer_pos", "answers", "eos", "order")

    def __init__(
        self, generator: Generator, prompts: list[Prompt], max_tokens: int, domain: _Vocab
    ) -> None:
        completions = generator.generate_batch(prompts, max_tokens=max_tokens)
        self.answers = [tuple(c.tokens) for c in completions]
        # Each answer as vocabulary positions (−1: outside V, counted for none).
        self.answer_pos = [[domain.pos_of.get(normalize(t), -1) for t in a] for a in self.answers]
        self.eos = domain.eos
        self.order: list[int] = []  # the rows asked last time, in call order

    def __call__(self, steps: GreedySteps, out: list[str], pos_of: dict[str, int]) -> _Votes:
        n = len(self.answers)
        votes = [""] * n
        vote_pos = np.full(n, -1, dtype=np.int64)
        need = []
        step = len(out)
        prefix = tuple(out)
        for i, answer in enumerate(self.answers):
            if prefix == answer[:step]:
                if len(answer) > step:
                    votes[i], vote_pos[i] = answer[step], self.answer_pos[i][step]
                else:
                    votes[i], vote_pos[i] = EOS, self.eos
            else:
                need.append(i)
        if not need:
            return votes, vote_pos, 0
        # Ask in the reverse of the last order: the contexts used most recently come
        # first, so a generator's LRU cache of per-context indices keeps hitting even when
        # the distinct contexts outnumber it (m = 50 voters).
        rank = {i: r for r, i in enumerate(reversed(self.order))}
        need.sort(key=lambda i: rank.get(i, -1))
        self.order = need
        for i, tok in zip(need, steps.next_tokens(out, need)):
            votes[i] = tok
            vote_pos[i] = pos_of.get(normalize(tok), -1)
        return votes, vote_pos, 1


def dp_vote_generate(
    generator: Generator,
    prompt: Prompt,
    voter_contexts: Sequence[tuple[str, ...]],
    epsilon: float,
    config: DPVoteConfig,
    *,
    vocabulary: Sequence[str] | None = None,
    rng: RngLike = None,
    bits: ChaCha20Bits | None = None,
    recorder: VoteRecorder | None = None,
) -> VoteResult:
    """Run Alg. 4 lines 1–2 and 5–18 for ``prompt`` with the given voters' documents.

    Args:
        generator: the LLM.
        prompt: the query's prompt (its own context is ignored).
        voter_contexts: D^1..D^m (already retrieved and partitioned; empty strings are
            padding and are dropped from the prompts).
        epsilon: this query's budget ε (c discoveries: :meth:`DPVoteConfig.discoveries`).
        config: the voting settings (with ``delta`` > 0 the threshold is re-drawn after
            each discovery, which Alg. 4 line 2 does not do; see the module docstring).
        vocabulary: the public token domain V of the exponential mechanism.
        rng: simulation stream (``config.simulation``); refused in secure mode.
        bits: secure mode: the release's randomness (:class:`ragprivacy.dp.TokenRelease`),
            derived for an audited answer; default fresh OS entropy.
        recorder: collects the trace as the vote runs (kept when the generator fails
            part way); the result's ``trace`` either way.
    """
    m = len(voter_contexts)
    if m == 0:
        raise ConfigError("DP voting needs at least one voter.")
    event = config.event(epsilon)  # refuses a budget below one discovery
    c = config.discoveries(epsilon)
    step = config.step_epsilon(epsilon)
    theta = m // 2 if config.theta is None else config.theta
    if bits is not None and config.simulation:
        raise ConfigError("Simulation mode draws from 'rng'; do not pass 'bits'.")
    gen = simulation_rng(rng, simulation=config.simulation)  # secure mode refuses a seed
    release = TokenRelease(
        theta,
        step,  # ε_Expo = ε_Lap = ε_0/2 (line 1)
        c,
        resample_threshold=config.delta > 0,  # one ε_0-DP step per discovery (D&R Alg. 2)
        simulation=config.simulation,
        rng=gen,
        bits=bits,
    )  # θ̂ = θ + Lap(2/ε_Lap) now; Count_t + Lap(4/ε_Lap) per token (lines 2, 11)
    log = recorder if recorder is not None else VoteRecorder()

    # Distinct contexts: index 0 is the non-RAG prompt (padding-only voters share it).
    contexts: list[tuple[str, ...]] = [()]
    slot: list[int] = []
    for ctx in voter_contexts:
        clean = tuple(d for d in ctx if d)
        if clean not in contexts:
            contexts.append(clean)
        slot.append(contexts.index(clean))
    prompts = [prompt.with_context(ctx) for ctx in contexts]
    rows = np.array([0, *slot], dtype=np.int64)  # the non-RAG row, then each voter's row
    calls = 0
    if vocabulary is None:
        first = generator.next_token_distribution(prompts[0], [])
        calls += 1
        vocabulary = [*first.tokens, EOS]
    domain = _vocab(vocabulary)
    vocab, pos_of = domain.tokens, domain.pos_of
    log.vocabulary_size, log.eos, log.vocabulary_digest = len(vocab), domain.eos, domain.digest
    out: list[str] = []
    with generator.greedy_steps(prompts) as steps:
        ask: Callable[[GreedySteps, list[str], dict[str, int]], _Votes] = _batched_votes
        if not steps.batched:
            ask = _LazyVotes(generator, prompts, config.max_tokens, domain)
            calls += 1  # its generate_batch over every distinct context
        for _t in range(config.max_tokens):
            votes, vote_pos, asked = ask(steps, out, pos_of)
            calls += asked
            by_voter = vote_pos[rows]
            hist = vote_histogram(by_voter, len(vocab))  # Alg. 8
            pick = release.step(hist, int(by_voter[0]))  # lines 11-12
            token = votes[0] if pick is None else vocab[pick]
            released = int(by_voter[0]) if pick is None else pick
            log.steps.append(
                VoteStep(tuple(int(v) for v in by_voter), pick is not None, released, token)
            )
            if normalize(token) == normalize(EOS):
                break
            out.append(token)
            if release.halted:  # c = 0 (line 16)
                break
    # the generator's own detokenisation: sub-word pieces (``hf:``) are not words
    completion = Completion(text=generator.tokens_to_text(out), tokens=tuple(out))
    return VoteResult(
        completion,
        release.discoveries,
        c,
        event,
        calls,
        epsilon_token=step,
        accounting=config.accounting,
        trace=log.trace(completion.text),
    )


def _partition(
    texts: Sequence[str],
    voters: int,
    per_voter: int,
    gen: np.random.Generator | None,
    bits: ChaCha20Bits | None = None,
) -> list[tuple[str, ...]]:
    """Alg. 4 line 4: pad to m·k slots with empty documents, split uniformly at random
    (from ``gen`` in simulation; from ``bits.child("partition")`` in an audited answer,
    :func:`ragprivacy.dp.voter_slots`; from the OS CSPRNG otherwise)."""
    slots = list(texts)[: voters * per_voter]
    slots += [""] * (voters * per_voter - len(slots))
    if bits is not None:
        return [
            tuple(slots[s] for s in group)
            for group in voter_slots(bits.child("partition"), voters, per_voter)
        ]
    order = (
        gen.permutation(len(slots)).tolist()
        if gen is not None
        else secrets.SystemRandom().sample(range(len(slots)), len(slots))
    )
    shuffled = [slots[i] for i in order]
    return [tuple(shuffled[i * per_voter : (i + 1) * per_voter]) for i in range(voters)]


def voter_count(slots: int, docs_per_voter: int) -> int:
    """m, the voters of Alg. 4 line 4: ``slots`` retrieved documents (the retriever's k)
    split ``docs_per_voter`` each; refuses a split that is not even."""
    check_positive_int("docs_per_voter", docs_per_voter)
    if slots % docs_per_voter:
        raise ConfigError(
            f"The {slots} retrieved documents cannot be split evenly into voters of "
            f"{docs_per_voter}; choose k as a multiple of docs_per_voter."
        )
    return slots // docs_per_voter


class _Voting(RAGSystem):
    """Shared machinery: voter settings, the vote, the optional answer memory."""

    def __init__(
        self,
        generator: Generator,
        *,
        slots: int,
        docs_per_voter: int = 1,
        epsilon_token: float = 2.0,
        theta: int | None = None,
        max_tokens: int = 16,
        simulation: bool = False,
        delta: float = 0.0,
        max_discoveries: int | None = None,
        vocabulary: Sequence[str] | None = None,
        instruction: str | None = None,
        reuse_answers: bool = False,
        prompt_budget: PromptBudget | None = None,
        rng: RngLike = None,
    ) -> None:
        self.generator = generator
        self.prompt_budget = prompt_budget
        self.docs_per_voter = check_positive_int("docs_per_voter", docs_per_voter)
        self.voters = voter_count(slots, self.docs_per_voter)
        self.vote = DPVoteConfig(
            epsilon_token=epsilon_token,
            theta=theta,
            max_tokens=max_tokens,
            simulation=simulation,
            delta=delta,
            max_discoveries=max_discoveries,
        )
        self.vocabulary = tuple(vocabulary) if vocabulary is not None else None
        self.instruction = instruction
        self.reuse_answers = bool(reuse_answers)
        self._memory: list[tuple[str, str]] = []
        # In secure mode (no seed) the voter partition draws from the OS CSPRNG.
        self._gen = simulation_rng(rng, simulation=simulation)
        self._lock = threading.Lock()

    def _remembered(self, question: str) -> tuple[str, ...]:
        if not self.reuse_answers or not self._memory:
            return ()
        words = {w.casefold() for w in tokenize(question)}
        best, best_overlap = None, 0.0
        for q, a in self._memory:
            qw = {w.casefold() for w in tokenize(q)}
            overlap = len(words & qw) / max(1, len(words | qw))
            if overlap > best_overlap:
                best, best_overlap = f"{q} {a}", overlap
        return (best,) if best is not None and best_overlap >= 0.3 else ()

    def _check_prompt(self, q: Query) -> None:
        """Refuse ``q`` before retrieval if a voter's prompt (its documents at the budget,
        an earlier answer when answers are reused) could overflow the context."""
        if self.prompt_budget is None:
            return
        extra = 1 if self.reuse_answers else 0
        options = {**q.options, "max_tokens": self.vote.max_tokens}
        sized = Query(q.text, q.task, q.retrieval_text, options)
        check_prompt(
            self.prompt_budget, self.generator, self.instruction, sized, self.docs_per_voter + extra
        )

    def _vote_epsilon(self) -> float:
        """The ε one answer's vote runs at (ε_q, or ε_RAG after MURAG-ADA's threshold)."""
        raise NotImplementedError

    def answer_documents(
        self,
        query: str | Query,
        texts: Sequence[str],
        *,
        bits: ChaCha20Bits,
        recorder: VoteRecorder | None = None,
    ) -> VoteResult:
        """Vote an answer to ``query`` over ``texts`` someone else retrieved, the voter
        partition and the release drawn from ``bits``: an audited window's answer, which
        retrieves the documents itself and derives ``bits`` from its committed seed and
        the public record (:meth:`ragprivacy.audit.AuditWindow.vote`; for MURAG/-ADA the
        window's screening chose ``texts`` and charged their filters). Secure mode only,
        without answer reuse (an earlier answer in the context is not in the trace a
        verifier replays). Check the prompt first (:meth:`check_query`)."""
        if self.vote.simulation or self.reuse_answers:
            raise ConfigError(
                "An audited vote derives its randomness and replays from its trace: build "
                "the system in secure mode without reuse_answers."
            )
        result, _ = self._answer_with(Query.of(query), texts, self._vote_epsilon(), bits, recorder)
        return result

    def check_query(self, query: str | Query) -> None:
        """Refuse ``query`` before any retrieval when a voter's prompt could overflow the
        generator's context (depends on the query alone: refusing it spends nothing)."""
        self._check_prompt(Query.of(query))

    def _answer_with(
        self,
        q: Query,
        texts: Sequence[str],
        epsilon: float,
        bits: ChaCha20Bits | None = None,
        recorder: VoteRecorder | None = None,
    ) -> tuple[VoteResult, list[tuple[str, ...]]]:
        if self.prompt_budget is not None:
            texts = self.prompt_budget.fit(texts)
        contexts = _partition(texts, self.voters, self.docs_per_voter, self._gen, bits)
        extra = self._remembered(q.text)
        if extra and self.prompt_budget is not None:
            extra = self.prompt_budget.fit(extra)
        if extra:
            contexts = [ctx + extra for ctx in contexts]
        prompt = Prompt(q.task, q.text, (), self.instruction, q.options)
        result = dp_vote_generate(
            self.generator,
            prompt,
            contexts,
            epsilon,
            self.vote,
            vocabulary=self.vocabulary,
            rng=self._gen if self.vote.simulation else None,
            bits=bits,
            recorder=recorder,
        )
        if self.reuse_answers and result.completion.text:
            self._memory.append((q.text, result.completion.text))
        return result, contexts

    def _vote_settings(self, epsilon: float) -> dict[str, Any]:
        """The vote's accounting at budget ε: ε_0 and c in use, δ and the accountant."""
        return {
            "epsilon_token": self.vote.step_epsilon(epsilon),
            "max_discoveries": self.vote.discoveries(epsilon),
            "delta": self.vote.delta,
            "vote_accounting": self.vote.accounting,
        }

    def _settings(self) -> dict[str, Any]:
        return {
            "voters": self.voters,
            "docs_per_voter": self.docs_per_voter,
            "epsilon_token": self.vote.epsilon_token,
            "theta": self.vote.theta if self.vote.theta is not None else self.voters // 2,
            "max_tokens": self.vote.max_tokens,
            "generator": self.generator.name,
            "reuse_answers": self.reuse_answers,
            "prompt_budget": None if self.prompt_budget is None else asdict(self.prompt_budget),
            "simulation": self.vote.simulation,
        }


def _response(result: VoteResult, retrieval: Retrieval | None, cost: PrivacyCost) -> Response:
    return Response(
        text=result.completion.text,
        tokens=result.completion.tokens,
        logprobs=None,
        privacy=cost,
        retrieval=retrieval,
        metadata={
            "discoveries": result.discoveries,
            "max_discoveries": result.max_discoveries,
            "epsilon_token": result.epsilon_token,
            "vote_accounting": result.accounting,
            "generator_calls": result.calls,
        },
    )


class DPVoteRAG(_Voting):
    """Single-query DP-RAG by token voting (Private-RAG Alg. 4).

    The retriever's k is m·k_voter (``docs_per_voter`` = k_voter); any retriever works.
    The vote's guarantee covers the whole answer, retrieval included (one document changes
    one voter's context, whatever retrieved it), and the retrieved set itself is never
    released; so a plain retriever adds nothing to the cost, and a private one adds its
    own event (a conservative sum).
    """

    name = "dp_vote"

    def __init__(
        self, retriever: Retriever, generator: Generator, *, epsilon: float = 10.0, **kw: Any
    ) -> None:
        super().__init__(generator, slots=retriever.k, **kw)
        self.retriever = retriever
        self.epsilon = check_positive("epsilon", epsilon)
        self.vote.discoveries(self.epsilon)

    def _vote_epsilon(self) -> float:
        return self.epsilon

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        q = Query.of(query)
        self._check_prompt(q)
        retrieval = self.retriever.retrieve(q.search_text, account=account)
        with charged_on_failure(self.retriever, [retrieval], account):
            texts = self.retriever.knowledge_base_for(account).texts(retrieval.indices)
            result, _ = self._answer_with(q, texts, self.epsilon)
        return _response(result, retrieval, self._cost(retrieval, account))

    def _cost(
        self,
        retrieval: Retrieval,
        account: str | None,
        cumulative: float | None = None,
    ) -> PrivacyCost:
        """The answer's cost: the vote's event (charged whatever the discoveries made),
        composed with a private retriever's own event, stated at the vote's δ plus the
        retriever's (the retriever's alone when the vote is pure)."""
        events: list[PrivacyEvent] = [self.vote.event(self.epsilon)]
        delta = self.retriever.delta_for(account)
        if retrieval.event.guaranteed:  # a private retriever's own event adds to the vote's
            events.append(retrieval.event)
        if self.vote.delta > 0:
            extra = delta if delta is not None and retrieval.event.guaranteed else 0.0
            delta = self.vote.delta + extra
        return answer_cost(events, mechanism=self.name, delta=delta, cumulative_epsilon=cumulative)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "epsilon": self.epsilon,
            "retriever": self.retriever.config(),
            **self._settings(),
            **self._vote_settings(self.epsilon),
        }


register_system("dp_vote", DPVoteRAG)
