"""RAGCrawler: an adaptive, budgeted crawl of a RAG system's corpus guided by an
attacker-side knowledge graph (Yao et al., "Connect the Dots: Knowledge Graph–Guided
Crawler Attack on Retrieval-Augmented Generation Systems", arXiv:2601.15678, USENIX
Security 2026).

**Problem (paper §4–5).** Extraction is an adaptive stochastic coverage problem: each
query retrieves a hidden set D_k(q) of the corpus D, and the attacker, who sees only the
answers, picks B queries to maximise the covered share |∪_t D_k(q_t)| / |D|. Coverage is
adaptively monotone and submodular, so the greedy policy that takes the query of largest
conditional marginal gain (CMG) is within 1 − 1/e of the best adaptive policy. The CMG is
unobservable, so the attacker keeps a knowledge graph of what the answers revealed and
estimates it from the graph. Each round (Fig. 4): the answer updates the graph
(*KG-Constructor*), the *Strategy Scheduler* picks an anchor (entity, relation) and the
*Query Generator* turns it into the next query.

**Strategy Scheduler (§5.3), as in the paper.** For every entity e of the graph,

* EmpiricalPayoff(e) = ḡ_e + c·√(log(N + 1) / (n_e + 1)) (eq. 6, with N + 1 so that the
  first round's log is 0, not −∞), n_e the rounds e was the anchor, N all anchor
  selections, c = 0.5 (App. 9.3); ḡ_e the mean over e's rounds of
  ΔE_i / max ΔE + ΔR_i / max ΔR, new entities and relations normalised by their largest
  value in a sliding window of rounds (eq. 7); a refused, empty or duplicate round records
  −``penalty`` instead (§5.4, 3);
* GraphPrior(e) = DegreeScore(e) + AdjScore(e) (eq. 8) with DegreeScore = 1 − deg(e) /
  (max deg + ε) (eq. 9) and AdjScore = max_r Deficit(e, r) (eq. 10), where Deficit(e, r) is
  0 when e has an edge of relation r and otherwise the mean number of r-edges of the
  entities of e's type (eq. 11);
* Score(e) = α_t·EmpiricalPayoff(e) + β_t·GraphPrior(e) (eq. 12), the anchor entity drawn
  from a softmax over the ``top_k`` scores; its relation is the one of largest deficit if
  that deficit exceeds the 90th percentile of the open (non-zero) deficits, else none
  (eq. 13–14).

**Query Generator (§5.4).** A relation-driven query when the anchor has a relation, a
neighbourhood-based one (the entity with the neighbour it was least asked with) when not;
a candidate whose similarity to a past query is at least τ = 0.8 is dropped, the anchor
penalised and another drawn, up to ``max_resamples`` (M) times; when all M are duplicates
the crawl has converged and stops (the paper's stopping rule besides the budget B).

**Where this differs from the paper** (no attacker LLM runs offline):

* *KG-Constructor.* The paper prompts an LLM with a topic-specific schema, with an
  extraction and a reflection pass, and merges entities whose embeddings have cosine above
  τ. Here :func:`extract_triples` is deterministic: entities are runs of up to three
  content words (not stop words, punctuation or bare numbers) of an answer sentence, typed
  ``name`` (capitalised inside the sentence) or ``term``; consecutive entities in a
  sentence are joined by a relation named by the function words between them (``of``,
  ``is``, ``with``…; coordinators, articles and pronouns dropped), or by an untyped
  co-occurrence edge when nothing is left (it counts for the degree, not as a relation
  type). Merging is by normal form (case-folded, a plural
  ``s`` dropped), not by embeddings. The topic prior is the topic's own content words,
  which seed the graph before the first answer.
* *Query realisation* is by fixed templates, not by an LLM: "Tell me more about <entity>
  <relation>" (relation-driven), "Tell me more about <neighbour> and <entity>"
  (neighbourhood), "Tell me about <topic>" (first query). They are requests rather than
  questions and are not fluent; this package makes no claim about their stealth.
  Similarity for de-duplication is the cosine of the queries' content-word counts, not of
  sentence embeddings.
* α_t = ½ + ½·t/B rises with the round t and β_t = 1; the paper gives only their
  direction. The score cache is left out: it changes the cost, not the choices.
* Coverage is measured by the experiment (:mod:`ragprivacy.eval.experiments.extraction`),
  never seen by the attack: the paper's coverage rate (documents retrieved at least once by
  an answered query, an evaluation-only view) and, for endpoints that hide retrieval, the
  documents an answer reproduces verbatim.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from ragprivacy._random import RngLike, make_rng
from ragprivacy._validation import check_in_range, check_positive, check_positive_int
from ragprivacy.attacks.stopwords import is_punctuation, is_stop_word
from ragprivacy.errors import ConfigError
from ragprivacy.generate import Task, tokenize
from ragprivacy.rag import Query, is_non_answer
from ragprivacy.types import Response

__all__ = [
    "Anchor",
    "CrawlGraph",
    "CrawlResult",
    "CrawlScheduler",
    "RAGCrawler",
    "Triple",
    "extract_triples",
    "query_similarity",
]

_SENTENCE_END = {".", "!", "?", ";", ":"}
# coordinators, determiners and pronouns name no relation (co-occurrence only)
_UNTYPED = {
    *("and", "or", "a", "an", "the", "my", "your", "his", "her", "its", "our", "their"),
    *("this", "that", "these", "those", "some", "any", "i", "you", "he", "she", "it"),
    *("we", "they", "me", "him", "us", "them"),
}
_TEMPLATE_WORDS = {"tell", "more", "about", "me"}  # the query templates' own words


@dataclass(frozen=True, slots=True)
class Triple:
    """One fact of the attacker's graph: ``head`` is linked to ``tail`` by ``relation``
    (entity keys)."""

    head: str
    relation: str
    tail: str


@dataclass(frozen=True, slots=True)
class Anchor:
    """The scheduler's choice: an entity, and the relation to probe (None: explore its
    neighbourhood)."""

    entity: str
    relation: str | None = None


def _key(words: list[str]) -> str:
    """An entity's normal form: case-folded words, the plural ``s`` of a last word written
    in lower case dropped (names keep theirs)."""
    parts = [w.casefold() for w in words]
    last = parts[-1]
    if len(last) > 4 and last.endswith("s") and not last.endswith("ss") and last == words[-1]:
        parts[-1] = last[:-1]
    return " ".join(parts)


def _is_content(token: str) -> bool:
    return (
        not is_punctuation(token)
        and not is_stop_word(token.casefold())
        and any(c.isalpha() for c in token)  # so no number either
    )


def extract_triples(text: str) -> tuple[dict[str, str], list[Triple]]:
    """The entities (key → type) and facts an answer reveals (see the module docstring).

    >>> ents, facts = extract_triples("The mayor of Lustane is Donna Beck.")
    >>> ents
    {'mayor': 'term', 'lustane': 'name', 'donna beck': 'name'}
    >>> [(t.head, t.relation, t.tail) for t in facts]
    [('mayor', 'of', 'lustane'), ('lustane', 'is', 'donna beck')]
    """
    entities: dict[str, str] = {}
    triples: list[Triple] = []
    for sentence in _sentences(tokenize(text)):
        found: list[tuple[str, str]] = []  # (entity key, relation words before it)
        for start, run, glue in _runs(sentence):
            capital = start > 0 and all(w[:1].isupper() for w in run)
            key = _key(run)
            entities.setdefault(key, "name" if capital else "term")
            found.append((key, " ".join([w for w in glue if w not in _UNTYPED][-2:])))
        for (head, _), (tail, words) in itertools.pairwise(found):
            if head != tail:
                triples.append(Triple(head, words, tail))
    return entities, triples


def _runs(sentence: list[str]) -> list[tuple[int, list[str], list[str]]]:
    """The runs of at most three content words of a sentence: (position, words, the
    function words between the previous run and this one)."""
    out: list[tuple[int, list[str], list[str]]] = []
    glue: list[str] = []
    for pos, tok in enumerate(sentence):
        if _is_content(tok):
            last = out[-1] if out else None
            if last is not None and last[0] + len(last[1]) == pos and len(last[1]) < 3:
                last[1].append(tok)
            else:
                out.append((pos, [tok], glue))
                glue = []
        elif not is_punctuation(tok):
            glue.append(tok.casefold())
    return out


def _sentences(tokens: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for tok in tokens:
        if tok in _SENTENCE_END:
            out.append([])
        else:
            out[-1].append(tok)
    return [s for s in out if s]


def _bag(text: str) -> Counter[str]:
    words = (t for t in tokenize(text) if t.casefold() not in _TEMPLATE_WORDS)
    return Counter(_key([t]) for t in words if _is_content(t))


def query_similarity(a: str, b: str) -> float:
    """Cosine of two queries' content-word counts (0 when either has none).

    >>> query_similarity("What about scaly plaques?", "Tell me about scaly plaques.")
    1.0
    """
    return _cosine(_bag(a), _bag(b))


def _cosine(x: Counter[str], y: Counter[str]) -> float:
    dot = sum(c * y[w] for w, c in x.items())
    norm = math.sqrt(sum(c * c for c in x.values()) * sum(c * c for c in y.values()))
    return dot / norm if norm else 0.0


@dataclass
class CrawlGraph:
    """The attacker-side knowledge graph G_t: typed entities and labelled edges."""

    types: dict[str, str] = field(default_factory=dict)
    edges: set[Triple] = field(default_factory=set)
    relations: dict[str, Counter[str]] = field(default_factory=dict)  # entity → r → edges
    neighbours: dict[str, set[str]] = field(default_factory=dict)

    def merge(self, entities: dict[str, str], triples: Iterable[Triple]) -> tuple[int, int]:
        """Add a subgraph ΔG_t; returns (new entities, new relation edges)."""
        new_e = 0
        for key, kind in entities.items():
            if key not in self.types:
                self.types[key] = kind
                self.relations[key] = Counter()
                self.neighbours[key] = set()
                new_e += 1
        new_r = 0
        for t in triples:
            if t in self.edges:
                continue
            self.edges.add(t)
            new_r += 1
            for a, b in ((t.head, t.tail), (t.tail, t.head)):
                if t.relation:
                    self.relations[a][t.relation] += 1
                self.neighbours[a].add(b)
        return new_e, new_r

    def __len__(self) -> int:
        return len(self.types)

    def deficits(self) -> tuple[list[str], list[str], np.ndarray]:
        """Entities, relation types and the matrix Deficit(e, r) of eq. 11."""
        names = list(self.types)
        rels = sorted({r for c in self.relations.values() for r in c})
        counts = np.zeros((len(names), len(rels)))
        col = {r: j for j, r in enumerate(rels)}
        for i, e in enumerate(names):
            for r, c in self.relations[e].items():
                counts[i, col[r]] = c
        deficit = np.zeros_like(counts)
        kinds = np.array([self.types[e] for e in names])
        for kind in set(kinds.tolist()):
            rows = kinds == kind
            deficit[rows] = counts[rows].mean(axis=0)
        deficit[counts > 0] = 0.0
        return names, rels, deficit


@dataclass
class CrawlScheduler:
    """Anchor selection of §5.3 (see the module docstring for the formulas)."""

    c: float = 0.5
    top_k: int = 5
    window: int = 20
    percentile: float = 90.0
    epsilon: float = 1e-9
    gains: dict[str, list[float]] = field(default_factory=dict)
    selections: int = 0
    _recent: list[tuple[int, int]] = field(default_factory=list)

    def record(self, entity: str, new_entities: int, new_relations: int) -> float:
        """Record a round in which ``entity`` was the anchor; returns its normalised gain."""
        self._recent = [*self._recent, (new_entities, new_relations)][-self.window :]
        max_e = max(e for e, _ in self._recent) or 1
        max_r = max(r for _, r in self._recent) or 1
        gain = new_entities / max_e + new_relations / max_r
        self._add(entity, gain)
        return gain

    def penalise(self, entity: str, penalty: float) -> None:
        """Record a refused, empty or duplicate round of ``entity`` as a payoff of −penalty."""
        self._add(entity, -penalty)

    def _add(self, entity: str, gain: float) -> None:
        self.gains.setdefault(entity, []).append(gain)
        self.selections += 1

    def scores(
        self,
        graph: CrawlGraph,
        progress: float,
        deficits: tuple[list[str], list[str], np.ndarray] | None = None,
    ) -> tuple[list[str], np.ndarray]:
        """Score(e) of every entity at ``progress`` = t / B ∈ [0, 1] (eq. 6–12);
        ``deficits``: ``graph.deficits()``, when the caller has it already."""
        names, _, deficit = deficits or graph.deficits()
        n = np.array([len(self.gains.get(e, ())) for e in names], dtype=np.float64)
        mean = np.array([np.mean(self.gains[e]) if e in self.gains else 0.0 for e in names])
        bonus = self.c * np.sqrt(math.log(self.selections + 1) / (n + 1.0))
        degree = np.array([len(graph.neighbours[e]) for e in names], dtype=np.float64)
        degree_score = 1.0 - degree / (degree.max(initial=0.0) + self.epsilon)
        adj = deficit.max(axis=1, initial=0.0)
        alpha, beta = 0.5 + 0.5 * progress, 1.0
        return names, alpha * (mean + bonus) + beta * (degree_score + adj)

    def select(
        self,
        graph: CrawlGraph,
        progress: float,
        rng: np.random.Generator,
        exclude: set[str] | None = None,
    ) -> Anchor | None:
        """Draw an anchor from the top-K softmax, then its relation (eq. 13–14); None when
        the graph has no entity left to try."""
        names, rels, deficit = deficits = graph.deficits()
        _, score = self.scores(graph, progress, deficits)
        keep = [i for i, e in enumerate(names) if not exclude or e not in exclude]
        if not keep:
            return None
        idx = np.array(keep)
        top = idx[np.argsort(-score[idx], kind="stable")[: self.top_k]]
        w = np.exp(score[top] - score[top].max())
        row = int(top[rng.choice(len(top), p=w / w.sum())])
        entity = names[row]
        open_ = deficit[deficit > 0]
        if not rels or open_.size == 0 or deficit[row].max() <= 0:
            return Anchor(entity)
        threshold = float(np.percentile(open_, self.percentile))
        best = int(np.argmax(deficit[row]))
        return Anchor(entity, rels[best] if deficit[row, best] > threshold else None)


@dataclass(frozen=True, slots=True)
class CrawlResult:
    """What a crawl sent and got: queries, responses (in order), each round's anchor, and
    why it stopped (``budget`` or ``converged``)."""

    queries: tuple[Query, ...]
    responses: tuple[Response, ...]
    anchors: tuple[Anchor | None, ...]
    stopped: str


class RAGCrawler:
    """The RAGCrawler attack (see the module docstring).

    Args:
        topic: what the attacker knows of the corpus (a short phrase); its content words
            seed the graph and the first query asks about it.
        budget: queries B the crawl may send.
        c: UCB exploration coefficient (paper: 0.5).
        top_k: candidates of the softmax anchor draw.
        window: rounds over which gains are normalised.
        dedup_threshold: τ, similarity at which a candidate repeats a past query (0.8).
        max_resamples: M, draws per round before the crawl is declared converged (the
            paper gives no value; 20 here).
        penalty: payoff recorded for a refused, empty or duplicate round.
        max_tokens: tokens asked per answer.

    >>> crawler = RAGCrawler(topic="patients' symptoms", budget=3)
    >>> replies = iter(["Scaly plaques on the elbows of Erik Perry.", "Eczema.", "No."])
    >>> got = crawler.crawl(lambda q: Response(next(replies)), rng=0)
    >>> [q.text for q in got.queries]
    ["Tell me about patients' symptoms", 'Tell me more about symptom', 'Tell me more about patient']
    """

    def __init__(
        self,
        *,
        topic: str,
        budget: int = 100,
        c: float = 0.5,
        top_k: int = 5,
        window: int = 20,
        dedup_threshold: float = 0.8,
        max_resamples: int = 20,
        penalty: float = 0.5,
        max_tokens: int = 128,
    ) -> None:
        if not topic.strip():
            raise ConfigError(
                "The 'topic' parameter must name what the corpus is about (e.g. 'patients' "
                "symptoms'); got an empty string."
            )
        self.topic = topic.strip()
        self.budget = check_positive_int("budget", budget)
        self.c = check_positive("c", c, allow_zero=True)
        self.top_k = check_positive_int("top_k", top_k)
        self.window = check_positive_int("window", window)
        self.dedup_threshold = check_in_range("dedup_threshold", dedup_threshold, 0.0, 1.0)
        self.max_resamples = check_positive_int("max_resamples", max_resamples)
        self.penalty = check_positive("penalty", penalty, allow_zero=True)
        self.max_tokens = check_positive_int("max_tokens", max_tokens)

    def query(self, text: str) -> Query:
        """A crawl query as the system receives it: a question in a chat turn."""
        return Query(text, task=Task.CHAT, options={"max_tokens": self.max_tokens})

    @staticmethod
    def realise(
        graph: CrawlGraph, anchor: Anchor, asked: Counter[tuple[str, str]]
    ) -> tuple[str, str | None]:
        """The query text of an anchor (relation-driven, else neighbourhood-based) and the
        neighbour it pairs the anchor with (None: none), counted in ``asked`` only once
        the query is sent."""
        if anchor.relation is not None:
            return f"Tell me more about {anchor.entity} {anchor.relation}", None
        around = sorted(graph.neighbours.get(anchor.entity, ()))
        if around:
            partner = min(around, key=lambda n: (asked[(anchor.entity, n)], n))
            return f"Tell me more about {partner} and {anchor.entity}", partner
        return f"Tell me more about {anchor.entity}", None

    def crawl(self, answer: Callable[[Query], Response], *, rng: RngLike = None) -> CrawlResult:
        """Run the crawl: ``answer`` sends one query to the system and returns its public
        response (the crawl reads only its text)."""
        gen = make_rng(rng)
        graph = CrawlGraph()
        scheduler = CrawlScheduler(c=self.c, top_k=self.top_k, window=self.window)
        graph.merge({_key([w]): "term" for w in tokenize(self.topic) if _is_content(w)}, ())
        asked: Counter[tuple[str, str]] = Counter()
        history: list[Counter[str]] = []  # the content words of every query sent
        queries: list[Query] = []
        responses: list[Response] = []
        anchors: list[Anchor | None] = []
        text: str | None = f"Tell me about {self.topic}"
        anchor: Anchor | None = None
        stopped = "budget"
        while len(queries) < self.budget:
            if text is None:
                text, anchor = self._plan(graph, scheduler, gen, asked, history, len(queries))
                if text is None:
                    stopped = "converged"
                    break
            q = self.query(text)
            reply = answer(q)
            queries.append(q)
            responses.append(reply)
            anchors.append(anchor)
            history.append(_bag(text))
            failed = _failed(reply.text)
            new_e, new_r = (0, 0) if failed else graph.merge(*extract_triples(reply.text))
            if anchor is not None:
                if failed:
                    scheduler.penalise(anchor.entity, self.penalty)
                else:
                    scheduler.record(anchor.entity, new_e, new_r)
            text, anchor = None, None
        return CrawlResult(tuple(queries), tuple(responses), tuple(anchors), stopped)

    def _plan(
        self,
        graph: CrawlGraph,
        scheduler: CrawlScheduler,
        gen: np.random.Generator,
        asked: Counter[tuple[str, str]],
        history: list[Counter[str]],
        t: int,
    ) -> tuple[str | None, Anchor | None]:
        """The next query, with history-aware de-duplication (§5.4, 2); (None, None) when
        every one of M draws repeats a past query (convergence)."""
        tried: set[str] = set()
        for _ in range(self.max_resamples):
            anchor = scheduler.select(graph, t / self.budget, gen, exclude=tried)
            if anchor is None:
                return None, None
            text, partner = self.realise(graph, anchor, asked)
            words = _bag(text)
            if all(_cosine(words, h) < self.dedup_threshold for h in history):
                if partner is not None:
                    asked[(anchor.entity, partner)] += 1
                return text, anchor
            scheduler.penalise(anchor.entity, self.penalty)
            tried.add(anchor.entity)
        return None, None


def _failed(text: str) -> bool:
    """A refused, empty or "I don't know" answer (it reveals nothing to the graph)."""
    return is_non_answer(text)
