"""The private_rag extras: fact passages, the multi-hop ablation (RP Table 11) and the
free-text medical experiment (Private-RAG's ChatDoctor setting)."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragprivacy.corpus import Corpus, QAItem, synthesize
from ragprivacy.eval import RunContext, parse_config, run_config
from ragprivacy.eval.experiments import private_rag, private_rag_medical
from ragprivacy.eval.experiments.private_rag_multihop import (
    answer_prf,
    ask_chain,
    multihop_scores,
)
from ragprivacy.eval.metrics import wilson_interval
from ragprivacy.generate import create_generator, tokenize
from ragprivacy.rag import StandardRAG
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Document


def _config(experiment: dict, corpus: str = "knowledge", n: int = 60) -> dict:
    return {
        "name": "private-rag-extras",
        "seed": 5,
        "workers": 1,
        "corpora": {"c": {"synthetic": corpus, "n": n}},
        "models": {"background_n": 60},
        "experiments": [{"corpus": "c", **experiment}],
    }


def test_answer_prf() -> None:
    assert answer_prf("born in Velmora", ["Velmora"]) == pytest.approx((1 / 3, 1.0, 0.5))
    assert answer_prf("nothing", ["Velmora"]) == (0.0, 0.0, 0.0)


def test_multihop_scores_pin_support_and_joint() -> None:
    docs = [
        Document("a", "Marc Bush was born in Velmora."),
        Document("b", "The population of Velmora is 511,549."),
        Document("c", "Ann Lee works as a baker in Trosk."),
    ]
    kb = KnowledgeBase.build(Corpus(docs), embedder="hashing")
    q = QAItem(
        id="q",
        question="What is the population of the place where Marc Bush was born?",
        answers=("511,549",),
        support_ids=("a", "b"),
        hops=2,
    )
    gen = create_generator("reference", background=["a plain background sentence ."])
    scores = multihop_scores(StandardRAG(TopKRetriever(kb, k=2), gen), kb, [q], "t")
    assert set(scores) == {"ans_em", "ans_f1", "sup_em", "sup_f1", "joint_em", "joint_f1", "cos"}
    retrieved = {d for d in TopKRetriever(kb, k=2).retrieve(q.question).ids}
    want = 1.0 if retrieved == {"a", "b"} else 0.0
    assert scores["sup_em"] == want
    assert scores["joint_em"] <= min(scores["ans_em"], scores["sup_em"])
    assert -1.0 <= scores["cos"] <= 1.0 + 1e-9


def test_ask_chain_feeds_each_answer_to_the_next_hop() -> None:
    corpus = synthesize("knowledge", 120, seed=3)
    chain = next(q for q in corpus.questions if q.hops > 1)
    by_id = {q.id: q for q in corpus.questions}
    kb = KnowledgeBase.build(corpus, embedder="lsa")
    gen = create_generator("reference", background=["a plain background sentence ."])
    seen: list[str] = []

    class Recording(StandardRAG):
        def answer(self, query: Any, *, account: str | None = None) -> Any:
            seen.append(str(query))
            return super().answer(query, account=account)

    hops = ask_chain(Recording(TopKRetriever(kb, k=3), gen), chain, by_id, "t")
    assert len(hops) == len(chain.chain) == len(seen)
    assert seen[0] == by_id[chain.chain[0]].question
    for prev, asked, sub in zip(hops, seen[1:], [by_id[i] for i in chain.chain[1:]]):
        assert prev.text.strip().rstrip(".") in asked
        assert sub.question.replace(sub.metadata["subject"], "") == asked.replace(
            prev.text.strip().rstrip("."), ""
        )


def test_multihop_ablation_and_passages_run(tmp_path: Path) -> None:
    cfg = parse_config(
        _config(
            {
                "type": "private_rag",
                "systems": ["non-rag", "rag", "dp_projection"],
                "k": 4,
                "copies": 1,
                "ablation": "multihop",
                "questions": 5,
                "epsilons": [10],
            },
            n=120,
        )
    )
    res = run_config(cfg, tmp_path / "mh", workers=1, progress=False)
    cells = res.results["cells"]
    assert {c["cell"]["system"] for c in cells} == {"non-rag", "rag", "dp_projection"}
    assert all(0.0 <= c["result"]["multihop"]["sup_f1"] <= 1.0 for c in cells)
    by = {c["cell"]["system"]: c["result"] for c in cells}
    # asked hop by hop, non-private RAG answers chains (the one-shot composed question
    # scored 0 for every system); without retrieval nothing is known
    assert by["rag"]["multihop"]["ans_em"] > 0.0
    assert by["rag"]["multihop"]["sup_em"] > 0.0
    assert by["non-rag"]["multihop"]["ans_em"] == 0.0
    assert by["rag"]["queries"] > by["rag"]["n"]  # one query per hop
    assert "Joint EM" in (tmp_path / "mh" / "report.md").read_text()
    for c in cells:  # every figure with a 95 % interval: Wilson for EM, t for F1 and cosine
        res, ci = c["result"]["multihop"], c["result"]["multihop_ci95"]
        n = c["result"]["n"]
        em = round(res["sup_em"] * n)
        assert ci["sup_em"] == pytest.approx(list(wilson_interval(em, n)))
        assert ci["sup_f1"][0] <= res["sup_f1"] <= ci["sup_f1"][1]
    report = (tmp_path / "mh" / "report.md").read_text()
    lo, hi = (100 * x for x in cells[0]["result"]["multihop_ci95"]["joint_em"])
    assert "Joint EM" in report and f"({lo:.1f}–{hi:.1f})" in report
    cfg = parse_config(
        _config(
            {
                "type": "private_rag",
                "systems": ["rag", "murag_ada"],
                "k": 4,
                "copies": 4,
                "passages": True,
                "questions": 6,
                "epsilons": [10],
            }
        )
    )
    res = run_config(cfg, tmp_path / "ps", workers=1, progress=False)
    rag = next(c for c in res.results["cells"] if c["cell"]["system"] == "rag")
    assert rag["result"]["precision_top50"] == pytest.approx(1.0)
    # every accuracy carries its Wilson interval over the questions, and the table prints it
    for c in res.results["cells"]:
        r = c["result"]
        hits = round(r["accuracy"] * r["n"])
        assert r["accuracy_ci95"] == pytest.approx(list(wilson_interval(hits, r["n"])))
        assert r["accuracy_ci95"][0] < r["accuracy_ci95"][1]
    report = (tmp_path / "ps" / "report.md").read_text()
    assert "match accuracy (95% CI)" in report
    lo, hi = rag["result"]["accuracy_ci95"]
    assert f"{rag['result']['accuracy']:.3f} ({lo:.3f}–{hi:.3f})" in report


def test_medical_free_text_run(tmp_path: Path) -> None:
    cfg = parse_config(
        _config(
            {
                "type": "private_rag_medical",
                "systems": ["non-rag", "rag", "dp_vote"],
                "k": 6,
                "copies": 2,
                "questions": 3,
                "epsilons": [10],
                "max_tokens": 8,
            },
            corpus="medical",
        )
    )
    res = run_config(cfg, tmp_path, workers=1, progress=False)
    by = {c["cell"]["system"]: c["result"] for c in res.results["cells"]}
    assert by["rag"]["n"] == 3 and 0.0 <= by["rag"]["rouge_l"] <= 1.0
    assert np.isfinite(by["rag"]["perplexity"]) and by["rag"]["perplexity"] >= 1.0
    assert np.isnan(by["dp_vote"]["perplexity"])  # no likelihood for a DP answer
    lo, hi = by["rag"]["rouge_l_ci95"]
    assert lo <= by["rag"]["rouge_l"] <= hi
    assert "ROUGE-L (95% CI)" in (tmp_path / "report.md").read_text()


def test_derived_objects_belong_to_their_context() -> None:
    knowledge = RunContext(parse_config(_config({"type": "qa"}, n=20)))
    medical = RunContext(parse_config(_config({"type": "qa"}, corpus="medical", n=20)))
    for ctx in (knowledge, medical):
        words = {w for d in ctx.corpus("c") for w in tokenize(d.text)}
        words |= {w for t in ctx.background_texts("c") for w in tokenize(t)}
        assert ctx.vocabulary("c") == tuple(sorted(words))
        assert ctx.vocabulary("c") is ctx.vocabulary("c")  # DP voting indexes it once
        _, big = private_rag.redundant_kb(ctx, "c", 2)
        assert private_rag.redundant_kb(ctx, "c", 2)[1] is big
        assert big.ids[0] == f"{ctx.corpus('c').ids[0]}~0"
    assert knowledge.vocabulary("c") != medical.vocabulary("c")
    private_rag_medical.medical_split(medical, "c", 1, 2, 0)
    # the caches drop a context with it, so a later one reusing its id starts empty
    kbs, splits = len(private_rag._KB_CACHE), len(private_rag_medical._SPLIT_CACHE)
    ref = weakref.ref(medical)
    del medical, ctx
    gc.collect()
    assert ref() is None
    assert len(private_rag._KB_CACHE) == kbs - 1
    assert len(private_rag_medical._SPLIT_CACHE) == splits - 1


def test_qa_two_hop_chains_are_answered_by_non_private_rag(tmp_path: Path) -> None:
    """The qa experiment's multi-hop rows ask each chain hop by hop: non-private RAG
    answers them, the generator alone does not (asked whole, both scored 0)."""
    cfg = parse_config(
        _config(
            {"type": "qa", "systems": ["non-rag", "rag"], "k": 3, "questions": 8, "hops": [2]},
            n=120,
        )
    )
    res = run_config(cfg, tmp_path, workers=1, progress=False)
    by = {c["cell"]["system"]: c["result"] for c in res.results["cells"]}
    assert by["rag"]["by_hops"]["2"]["exact_match"] > 0.0
    assert by["non-rag"]["by_hops"]["2"]["match_accuracy"] == 0.0
    assert all(r["queries"] == 2 for r in by["rag"]["records"])
