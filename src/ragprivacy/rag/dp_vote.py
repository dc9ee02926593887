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
whose generation fails gives back what its retriever reserved (spend only on success).

**Vocabulary.** The exponential mechanism ranges over a fixed vocabulary V (Alg. 9), which
must not depend on the private documents: pass ``vocabulary`` (an LLM's tokenizer
vocabulary; for the word-level reference reader, the words of a public word list). Votes
for tokens outside V are dropped (counted for none), which keeps sensitivity 1. Default:
the non-RAG next-token distribution's support at the first step (public: it sees no
document) plus ⟨EOS⟩.
"""

from __future__ import annotations

import math
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragprivacy._random import RngLike
from ragprivacy._validation import check_positive, check_positive_int
from ragprivacy.dp import AboveThreshold, PureDpEvent, exponential_mechanism, simulation_rng
from ragprivacy.errors import ConfigError
from ragprivacy.generate import (
    Generator,
    GreedySteps,
    Prompt,
    normalize,
    tokenize,
)
from ragprivacy.rag.base import (
    Query,
    RAGSystem,
    answer_cost,
    register_system,
    released_on_failure,
)
from ragprivacy.retrieval import Retriever
from ragprivacy.types import Completion, PrivacyCost, PrivacyEvent, Response, Retrieval

__all__ = ["EOS", "DPVoteConfig", "DPVoteRAG", "VoteResult", "dp_vote_generate"]

EOS = "</s>"


@dataclass(frozen=True, slots=True, kw_only=True)
class DPVoteConfig:
    """Settings of DP-RAG by token voting (Private-RAG Alg. 4; defaults from App. E).

    Attributes:
        epsilon_token: ε_0, the budget of one discovery (ε_token ∈ {0.5, 1, 2} in App. E).
        theta: the voting threshold θ (default m/2, rounded down: τ_svt = k/2 in App. E).
        max_tokens: T_max.
        simulation: float noise from ``rng`` instead of the secure samplers.
    """

    epsilon_token: float = 2.0
    theta: int | None = None
    max_tokens: int = 16
    simulation: bool = False

    def __post_init__(self) -> None:
        check_positive("epsilon_token", self.epsilon_token)
        check_positive_int("max_tokens", self.max_tokens)
        if self.theta is not None:
            check_positive_int("theta", self.theta, allow_zero=True)

    def discoveries(self, epsilon: float) -> int:
        """c = ⌊ε/ε_0⌋ (Alg. 4 line 2)."""
        return int(math.floor(check_positive("epsilon", epsilon) / self.epsilon_token + 1e-12))


@dataclass(frozen=True, slots=True)
class VoteResult:
    """One DP-RAG answer: its tokens, the discoveries made, the cost, and how many
    generator calls the voting took (``calls``)."""

    completion: Completion
    discoveries: int
    max_discoveries: int
    event: PureDpEvent | None
    calls: int


class _Vocab:
    """The exponential mechanism's domain V with ⟨EOS⟩, and each normalised token's
    position (built once per vocabulary tuple: normalising V costs more than a vote)."""

    __slots__ = ("eos", "pos_of", "source", "tokens")

    def __init__(self, vocabulary: Sequence[str]) -> None:
        self.source = vocabulary  # held so the id used as the cache key stays this object's
        self.tokens = list(dict.fromkeys(vocabulary))
        self.pos_of = {normalize(tok): i for i, tok in enumerate(self.tokens)}
        if normalize(EOS) not in self.pos_of:
            self.pos_of[normalize(EOS)] = len(self.tokens)
            self.tokens.append(EOS)
        self.eos = self.pos_of[normalize(EOS)]


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
) -> VoteResult:
    """Run Alg. 4 lines 1–2 and 5–18 for ``prompt`` with the given voters' documents.

    Args:
        generator: the LLM.
        prompt: the query's prompt (its own context is ignored).
        voter_contexts: D^1..D^m (already retrieved and partitioned; empty strings are
            padding and are dropped from the prompts).
        epsilon: this query's budget ε (c = ⌊ε/ε_0⌋ discoveries).
        config: the voting settings.
        vocabulary: the public token domain V of the exponential mechanism.
        rng: simulation stream (``config.simulation``); refused in secure mode.
    """
    m = len(voter_contexts)
    if m == 0:
        raise ConfigError("DP voting needs at least one voter.")
    c = config.discoveries(epsilon)
    if c == 0:
        raise ConfigError(
            f"The per-query budget {epsilon} is below one discovery's ε_0 = "
            f"{config.epsilon_token}; raise epsilon or lower epsilon_token."
        )
    eps_half = config.epsilon_token / 2  # ε_Expo = ε_Lap = ε_0/2 (line 1)
    theta = m // 2 if config.theta is None else config.theta
    gen = simulation_rng(rng, simulation=config.simulation)  # secure mode refuses a seed
    sv = AboveThreshold(
        theta, eps_half, max_discoveries=c, below=True, simulation=config.simulation, rng=gen
    )  # θ̂ = θ + Lap(2/ε_Lap) now; Count_t + Lap(4/ε_Lap) per token (lines 2, 11)

    # Distinct contexts: index 0 is the non-RAG prompt (padding-only voters share it).
    contexts: list[tuple[str, ...]] = [()]
    slot: list[int] = []
    for ctx in voter_contexts:
        clean = tuple(d for d in ctx if d)
        if clean not in contexts:
            contexts.append(clean)
        slot.append(contexts.index(clean))
    prompts = [prompt.with_context(ctx) for ctx in contexts]
    weights = np.bincount(np.array(slot, dtype=np.int64), minlength=len(contexts))
    calls = 0
    if vocabulary is None:
        first = generator.next_token_distribution(prompts[0], [])
        calls += 1
        vocabulary = [*first.tokens, EOS]
    domain = _vocab(vocabulary)
    vocab, pos_of = domain.tokens, domain.pos_of
    weights_f = weights.astype(np.float64)
    out: list[str] = []
    with generator.greedy_steps(prompts) as steps:
        ask: Callable[[GreedySteps, list[str], dict[str, int]], _Votes] = _batched_votes
        if not steps.batched:
            ask = _LazyVotes(generator, prompts, config.max_tokens, domain)
            calls += 1  # its generate_batch over every distinct context
        for _t in range(config.max_tokens):
            votes, vote_pos, asked = ask(steps, out, pos_of)
            calls += asked
            counted = vote_pos >= 0
            hist: Any = np.bincount(  # Alg. 8: weighted votes per vocabulary token
                vote_pos[counted], weights=weights_f[counted], minlength=len(vocab)
            ).astype(np.int64)
            non_rag = votes[0]
            j0 = int(vote_pos[0])  # the non-RAG vote's position (−1: outside V)
            count = int(hist[j0]) if j0 >= 0 else 0
            if sv.test(count):  # discovery (line 11)
                if config.simulation:
                    pick = int(exponential_mechanism(hist, eps_half, simulation=True, rng=gen))
                else:
                    pick = int(exponential_mechanism(hist, eps_half))
                token = vocab[pick]
            else:
                token = non_rag
            if normalize(token) == normalize(EOS):
                break
            out.append(token)
            if sv.halted:  # c = 0 (line 16)
                break
    # the generator's own detokenisation: sub-word pieces (``hf:``) are not words
    completion = Completion(text=generator.tokens_to_text(out), tokens=tuple(out))
    return VoteResult(completion, sv.discoveries, c, PureDpEvent(c * config.epsilon_token), calls)


def _partition(
    texts: Sequence[str], voters: int, per_voter: int, gen: np.random.Generator | None
) -> list[tuple[str, ...]]:
    """Alg. 4 line 4: pad to m·k slots with empty documents, split uniformly at random
    (from ``gen`` in simulation, from the OS CSPRNG in secure mode)."""
    slots = list(texts)[: voters * per_voter]
    slots += [""] * (voters * per_voter - len(slots))
    order = (
        gen.permutation(len(slots)).tolist()
        if gen is not None
        else secrets.SystemRandom().sample(range(len(slots)), len(slots))
    )
    shuffled = [slots[i] for i in order]
    return [tuple(shuffled[i * per_voter : (i + 1) * per_voter]) for i in range(voters)]


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
        vocabulary: Sequence[str] | None = None,
        instruction: str | None = None,
        reuse_answers: bool = False,
        rng: RngLike = None,
    ) -> None:
        self.generator = generator
        self.docs_per_voter = check_positive_int("docs_per_voter", docs_per_voter)
        if slots % self.docs_per_voter:
            raise ConfigError(
                f"The {slots} retrieved documents cannot be split evenly into voters of "
                f"{self.docs_per_voter}; choose k as a multiple of docs_per_voter."
            )
        self.voters = slots // self.docs_per_voter
        self.vote = DPVoteConfig(
            epsilon_token=epsilon_token, theta=theta, max_tokens=max_tokens, simulation=simulation
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

    def _answer_with(
        self, q: Query, texts: Sequence[str], epsilon: float
    ) -> tuple[VoteResult, list[tuple[str, ...]]]:
        contexts = _partition(texts, self.voters, self.docs_per_voter, self._gen)
        extra = self._remembered(q.text)
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
        )
        if self.reuse_answers and result.completion.text:
            self._memory.append((q.text, result.completion.text))
        return result, contexts

    def _settings(self) -> dict[str, Any]:
        return {
            "voters": self.voters,
            "docs_per_voter": self.docs_per_voter,
            "epsilon_token": self.vote.epsilon_token,
            "theta": self.vote.theta if self.vote.theta is not None else self.voters // 2,
            "max_tokens": self.vote.max_tokens,
            "generator": self.generator.name,
            "reuse_answers": self.reuse_answers,
            "simulation": self.vote.simulation,
        }


def _response(result: VoteResult, retrieval: Retrieval | None, cost: PrivacyCost) -> Response:
    return Response(
        text=result.completion.text,
        tokens=result.completion.tokens,
        logprobs=None,
        privacy=cost,
        retrieval=retrieval,
        metadata={"discoveries": result.discoveries, "generator_calls": result.calls},
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

    def answer(self, query: str | Query, *, account: str | None = None) -> Response:
        return self._answer_refundable(query, account, [])

    def _answer_refundable(
        self, query: str | Query, account: str | None, refunds: list[Callable[[], None]]
    ) -> Response:
        q = Query.of(query)
        retrieval = self.retriever.retrieve(q.search_text, account=account)
        with released_on_failure(self.retriever, [retrieval], account):
            texts = self.retriever.knowledge_base_for(account).texts(retrieval.indices)
            result, _ = self._answer_with(q, texts, self.epsilon)
        refunds.append(lambda: self.retriever.release([retrieval], account=account))
        eps = result.max_discoveries * self.vote.epsilon_token
        return _response(result, retrieval, self._cost(eps, retrieval, account))

    def _cost(
        self,
        epsilon: float,
        retrieval: Retrieval,
        account: str | None,
        cumulative: float | None = None,
    ) -> PrivacyCost:
        events: list[PrivacyEvent] = [PureDpEvent(epsilon)]
        if retrieval.event.guaranteed:  # a private retriever's own event adds to the vote's
            events.append(retrieval.event)
        return answer_cost(
            events,
            mechanism=self.name,
            delta=self.retriever.delta_for(account),
            cumulative_epsilon=cumulative,
        )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "epsilon": self.epsilon,
            "retriever": self.retriever.config(),
            **self._settings(),
        }


register_system("dp_vote", DPVoteRAG)
