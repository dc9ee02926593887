"""RAGCrawler (arXiv:2601.15678): the knowledge graph an answer adds, the scheduler's
scores (eq. 6–14), de-duplication and the convergence stop, the coverage measure, and
crawls of a small leaky system and of systems that copy nothing."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from ragprivacy.attacks import (
    Anchor,
    CrawlGraph,
    CrawlScheduler,
    RAGCrawler,
    Triple,
    extract_triples,
    query_similarity,
)
from ragprivacy.corpus import synthesize
from ragprivacy.errors import ConfigError
from ragprivacy.eval import parse_config, run_config
from ragprivacy.eval.metrics import CorpusCoverage, DisclosureIndex
from ragprivacy.generate import create_generator
from ragprivacy.rag import REFUSAL_PATTERN, NonRAG, StandardRAG
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Response


def test_an_answer_becomes_typed_entities_and_relations() -> None:
    ents, facts = extract_triples(
        "The mayor of Lustane is Donna Beck. Donna Beck was born in Lustane, and plays chess."
    )
    assert ents["donna beck"] == "name" and ents["mayor"] == "term"
    assert Triple("mayor", "of", "lustane") in facts
    assert Triple("lustane", "is", "donna beck") in facts
    assert Triple("donna beck", "was", "born") in facts  # "born" is a content word
    assert Triple("born", "in", "lustane") in facts
    # "and" names no relation: the edge is an untyped co-occurrence
    assert Triple("lustane", "", "plays chess") in facts
    graph = CrawlGraph()
    assert graph.merge(ents, facts) == (len(ents), len(set(facts)))
    assert graph.merge(ents, facts) == (0, 0)  # nothing new the second time
    assert "" not in graph.relations["lustane"]  # counts for the degree only
    assert graph.neighbours["lustane"] >= {"mayor", "donna beck", "plays chess"}


def test_plural_and_case_merge_but_names_keep_their_s() -> None:
    ents, _ = extract_triples("Scaly plaques. scaly plaque. He lives in Werkmis.")
    assert "scaly plaque" in ents and "werkmis" in ents and "werkmi" not in ents


def test_query_similarity_ignores_the_templates_own_words() -> None:
    assert query_similarity("Tell me more about scaly plaques", "scaly plaque?") == 1.0
    assert query_similarity("Tell me more about gout", "Tell me more about eczema") == 0.0
    assert query_similarity("Tell me more", "gout") == 0.0


def _graph() -> CrawlGraph:
    g = CrawlGraph()
    g.merge(
        {"a": "term", "b": "term", "c": "term", "d": "term"},
        [Triple("a", "of", "b"), Triple("a", "of", "c"), Triple("b", "in", "c")],
    )
    return g


def test_deficit_is_the_peer_mean_of_a_missing_relation() -> None:
    names, rels, deficit = _graph().deficits()
    d = dict(zip(names, deficit, strict=True))
    assert rels == ["in", "of"]
    # r-edges per entity: of: a 2, b 1, c 1, d 0 (mean 1); in: b 1, c 1 (mean 0.5)
    assert d["a"].tolist() == [0.5, 0.0]  # a lacks "in" only
    assert d["d"].tolist() == [0.5, 1.0]  # d lacks both
    assert d["b"].tolist() == [0.0, 0.0]


def test_scores_follow_eq_6_to_12() -> None:
    g = _graph()
    s = CrawlScheduler(c=0.5)
    s.record("a", 4, 2)  # the window's maxima: the gain is 1 + 1
    s.record("b", 2, 0)
    s.penalise("c", 0.5)
    names, score = s.scores(g, progress=0.0)
    got = dict(zip(names, score, strict=True))
    n_sel = 3
    degree = {"a": 2, "b": 2, "c": 2, "d": 0}
    adj = {"a": 0.5, "b": 0.0, "c": 0.0, "d": 1.0}
    mean = {"a": 2.0, "b": 0.5, "c": -0.5, "d": 0.0}
    times = {"a": 1, "b": 1, "c": 1, "d": 0}
    for e in names:
        payoff = mean[e] + 0.5 * math.sqrt(math.log(n_sel + 1) / (times[e] + 1))
        prior = 1 - degree[e] / (2 + s.epsilon) + adj[e]
        assert got[e] == pytest.approx(0.5 * payoff + prior)  # α_0 = ½, β = 1
    late = dict(zip(*s.scores(g, progress=1.0), strict=True))
    assert late["a"] - got["a"] == pytest.approx(0.5 * (2.0 + 0.5 * math.sqrt(math.log(4) / 2)))


def test_relation_is_probed_only_above_the_90th_percentile_of_deficits() -> None:
    g = CrawlGraph()
    for i in range(20):  # forty terms with one "of" edge each
        g.merge({f"x{i}": "term", f"y{i}": "term"}, [Triple(f"x{i}", "of", f"y{i}")])
    lonely = [f"z{i}" for i in range(5)]  # five without: Deficit(z, of) = 40 / 45
    g.merge(dict.fromkeys(lonely, "term"), [])
    # four names with two "near" edges each, one without: Deficit(r, near) = 8 / 5
    near = [("p", "q"), ("s", "t"), ("p", "s"), ("q", "t")]
    g.merge(dict.fromkeys("pqstr", "name"), [Triple(a, "near", b) for a, b in near])
    s = CrawlScheduler(top_k=1)
    rng = np.random.default_rng(0)
    # the open deficits are 0.89 (five times) and 1.6: the 90th percentile lies between
    assert s.select(g, 0.0, rng, exclude=set(g.types) - {"r"}) == Anchor("r", "near")
    assert s.select(g, 0.0, rng, exclude=set(g.types) - {"z0"}) == Anchor("z0", None)


def test_a_crawl_converges_when_every_draw_repeats_a_past_query() -> None:
    crawler = RAGCrawler(topic="gout", budget=50, max_resamples=3)
    got = crawler.crawl(lambda q: Response("Gout attacks the toe."), rng=1)
    assert got.stopped == "converged" and len(got.queries) < 50
    texts = [q.text for q in got.queries]
    for i, a in enumerate(texts):
        assert all(query_similarity(a, b) < 0.8 for b in texts[:i])


def test_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="topic"):
        RAGCrawler(topic=" ")
    with pytest.raises(ConfigError, match="budget"):
        RAGCrawler(topic="x", budget=0)


def test_coverage_counts_retrieval_of_answers_and_unique_verbatim_runs() -> None:
    texts = [
        "Erik Perry has scaly plaques on his elbows and pitted nails since May.",
        "Sierra Clark has an itchy rash on her arms since June and no fever.",
        "Kelsey Williamson has peeling skin between the toes since March.",
    ]
    index = DisclosureIndex(texts, min_run=4)
    cov = CorpusCoverage(["a", "b", "c"], index)  # by default: rag.is_non_answer
    cov.add("I cannot share that.", ["a", "b"])  # refused: counts for nothing
    cov.add("I don't know.", ["c"])  # no answer: not counted
    cov.add("It seems scaly plaques on his elbows.", ["a", "b"])
    cov.add("Peeling skin between the toes, twice.", None)  # an endpoint: retrieval unknown
    got = cov.summary()
    assert got["retrieved"] == 2 and got["disclosed"] == 2 and got["documents"] == 3
    assert got["curve_retrieved"] == [0, 0, 2, 2] and got["curve_disclosed"] == [0, 0, 1, 2]
    # a run shared by two documents identifies neither
    assert index.disclosed("has an itchy rash") == {1}
    assert DisclosureIndex(["a b c d e", "a b c d f"], min_run=4).disclosed("a b c d") == set()
    blind = CorpusCoverage(["a"], DisclosureIndex(["x y z"], min_run=2))
    blind.add("x y", None)
    assert blind.summary()["retrieved"] is None and blind.summary()["disclosed"] == 1


@pytest.fixture(scope="module")
def medical() -> Any:
    corpus = synthesize("medical", 150, seed=5)
    return corpus, KnowledgeBase.build(corpus, embedder="lsa"), DisclosureIndex(corpus.texts)


def _crawl(system: Any, corpus: Any, index: DisclosureIndex, budget: int) -> CorpusCoverage:
    cov = CorpusCoverage(corpus.ids, index, refused=lambda t: bool(REFUSAL_PATTERN.match(t)))

    def ask(q: Any) -> Response:
        r: Response = system.answer(q)
        cov.add(r.text, r.retrieved_ids if r.retrieval is not None else None)
        return r.public()

    RAGCrawler(topic="patients' health problems", budget=budget).crawl(ask, rng=3)
    return cov


def test_a_crawl_of_a_leaky_system_spreads_beyond_its_first_query(medical: Any) -> None:
    corpus, kb, index = medical
    rag = StandardRAG(TopKRetriever(kb, k=3), create_generator("reference"))
    cov = _crawl(rag, corpus, index, 25)
    got = cov.summary()
    assert got["queries"] == 25
    assert got["retrieved"] >= 4 * got["curve_retrieved"][0]  # it adapts, not repeats
    assert got["disclosed"] >= 5  # answers copy the retrieved records


def test_a_system_that_copies_nothing_gives_the_crawl_nearly_nothing(medical: Any) -> None:
    corpus, kb, index = medical
    no_rag = _crawl(NonRAG(create_generator("reference")), corpus, index, 15).summary()
    assert no_rag["retrieved"] is None and no_rag["disclosed"] == 0
    # retrieves as before, but the reader writes only from its background model
    quiet = StandardRAG(TopKRetriever(kb, k=3), create_generator("reference", copy_strength=0.0))
    got = _crawl(quiet, corpus, index, 15).summary()
    assert got["retrieved"] > 0 and got["disclosed"] <= 1


def test_the_extraction_experiment_runs_a_crawl_beside_the_baselines(tmp_path: Any) -> None:
    config = {
        "name": "crawl-test",
        "seed": 3,
        "workers": 1,
        "corpora": {"med": {"synthetic": "medical", "n": 60}},
        "models": {"background_n": 60, "embedder": "hashing"},
        "experiments": [
            {
                "type": "extraction",
                "corpus": "med",
                "k": 3,
                "systems": ["rag"],
                "modes": ["ragcrawler", "untargeted"],
                "prompts": 8,
                "scale": 1.0,
                "max_tokens": 48,
            }
        ],
    }
    result = run_config(parse_config(config), tmp_path, progress=False)
    cells = {c["cell"]["mode"]: c["result"] for c in result.results["cells"]}
    crawl = cells["ragcrawler"]["metrics"]
    assert crawl["budget"] == 8 and crawl["queries"] <= 8 and crawl["documents"] == 60
    assert crawl["rate"] == crawl["disclosed"] / 60 and crawl["retrieved"] >= 3
    assert len(cells["ragcrawler"]["coverage_curve"]["curve_retrieved"]) == crawl["queries"]
    assert cells["ragcrawler"]["privacy"]["queries"] == crawl["queries"]
    base = cells["untargeted"]["metrics"]["coverage"]
    assert base["queries"] == 8 and base["retrieved"] >= 3
    report = (tmp_path / "report.md").read_text()
    assert "| rag | none | ragcrawler |" in report and "corpus disclosed" in report
