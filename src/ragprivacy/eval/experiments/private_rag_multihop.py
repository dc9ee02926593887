"""Multi-hop utility of the defenses (RP paper App. G.1, Table 11), on the knowledge
corpus's chains (questions with ``hops > 1``, their ``support_ids`` and their ``chain`` of
single-hop sub-questions).

Each chain is asked hop by hop (question decomposition, as multi-hop RAG pipelines such
as self-ask and IRCoT do, and as MQuAKE evaluates chains): the first hop is the chain's
first sub-question; every later hop is the corpus's sub-question with its subject (the
gold intermediate entity) replaced by the system's *own* answer to the previous hop, so
an error early in the chain propagates. The composed one-shot question ("Where was the
chief executive of X born?") is not asked: the reference reader, like any single-step
reader, answers one fact from its context and cannot resolve the composed phrase, so
every system, non-private RAG included, scored 0 EM on it and the table compared
nothing. Each hop is one query, so a chain spends ``hops`` queries of the budget.

Per chain, as HotpotQA scores it (Yang et al. 2018):

* **Ans** — exact match and token F1 (precision = matching tokens / generated tokens,
  recall = matching tokens / gold tokens) of the answer against the gold answers.
* **Ans** is scored on the last hop's answer.
* **Sup** — the retrieved supporting documents against the gold support (one document per
  hop): the top source document of each hop's retrieval (copies of a document count
  once); EM when the two sets are equal, F1 over the sets.
* **Joint** — EM when both are exact; F1 from precision P_ans·P_sup and recall
  R_ans·R_sup.
* **Cos** — cosine between the mean embedding of the documents retrieved over the
  chain's hops and the mean
  embedding of the gold support documents (original embedding space, whatever the
  retriever searched in), "retrieved vs reference" of Table 11.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from math import nan
from typing import Any

import numpy as np

from ragprivacy._stats import mean_interval
from ragprivacy.corpus import Corpus, QAItem
from ragprivacy.eval.experiments.base import format_interval
from ragprivacy.eval.metrics import normalize_answer, wilson_interval
from ragprivacy.rag import RAGSystem
from ragprivacy.retrieval import KnowledgeBase
from ragprivacy.types import Response

__all__ = [
    "answer_prf",
    "ask_chain",
    "chain_queries",
    "multihop_intervals",
    "multihop_means",
    "multihop_questions",
    "multihop_rows",
    "multihop_scores",
    "multihop_table",
]

METRICS = ("ans_em", "ans_f1", "sup_em", "sup_f1", "joint_em", "joint_f1", "cos")


def multihop_questions(corpus: Corpus, count: int, seed: int) -> list[QAItem]:
    """Up to ``count`` questions with more than one hop (a seeded sample, in id order)."""
    pool = [q for q in corpus.questions if q.hops > 1 and q.support_ids]
    if len(pool) <= count:
        return pool
    pick = np.random.default_rng(seed).choice(len(pool), count, replace=False)
    return [pool[i] for i in sorted(pick.tolist())]


def answer_prf(prediction: str, answers: Sequence[str]) -> tuple[float, float, float]:
    """(precision, recall, F1) of the prediction's tokens against the best gold answer."""
    pred = normalize_answer(prediction).split()
    best = (0.0, 0.0, 0.0)
    for answer in answers:
        gold = normalize_answer(answer).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if not pred or not gold or common == 0:
            continue
        p, r = common / len(pred), common / len(gold)
        f = 2 * p * r / (p + r)
        if f > best[2]:
            best = (p, r, f)
    return best


def chain_queries(questions: Sequence[QAItem]) -> int:
    """Queries the chains cost when asked hop by hop (one per hop)."""
    return sum(max(1, len(q.chain)) for q in questions)


def _hop_answer(text: str) -> str:
    """The reply as the next hop's subject (trailing punctuation and spaces dropped)."""
    return text.strip().rstrip(".?!").strip()


def ask_chain(
    system: RAGSystem, question: QAItem, by_id: Mapping[str, QAItem], account: str | None
) -> list[Response]:
    """Ask ``question``'s chain hop by hop (module doc): each later sub-question with its
    subject replaced by the previous hop's answer. A chain whose sub-questions the corpus
    does not hold is asked as one composed question."""
    subs = [by_id[i] for i in question.chain if i in by_id]
    if not subs or len(subs) != len(question.chain):
        return [system.answer(question.question, account=account)]
    out: list[Response] = []
    previous: str | None = None
    for sub in subs:
        text = sub.question
        subject = str(sub.metadata.get("subject", ""))
        if previous is not None and subject and subject in text:
            text = text.replace(subject, previous or "it")
        r = system.answer(text, account=account)
        out.append(r)
        previous = _hop_answer(r.text)
    return out


def _source(doc_id: str) -> str:
    """The source document of a (copied or split) knowledge-base document id."""
    return doc_id.split("~", 1)[0].split("#", 1)[0]


def multihop_scores(
    system: RAGSystem,
    kb: KnowledgeBase,
    questions: Sequence[QAItem],
    account: str,
    by_id: Mapping[str, QAItem] | None = None,
) -> dict[str, float]:
    """Mean Ans/Sup/Joint EM and F1 and the retrieved-vs-reference cosine of the chains
    asked hop by hop (module doc); ``by_id`` maps the corpus's question ids to its
    questions (the sub-questions of the chains)."""
    return multihop_means(multihop_rows(system, kb, questions, account, by_id))


def multihop_means(rows: dict[str, list[float]]) -> dict[str, float]:
    """The mean of each metric over the questions (NaN where none was scored)."""
    return {m: float(np.mean(v)) if v else float("nan") for m, v in rows.items()}


def multihop_intervals(rows: dict[str, list[float]]) -> dict[str, list[float]]:
    """95 % intervals of the means: Wilson for the 0/1 exact matches, Student t over the
    questions for F1 and cosine."""
    out = {}
    for m, v in rows.items():
        if m.endswith("_em"):
            lo, hi = wilson_interval(round(sum(v)), len(v))
        else:  # F1 lies in [0, 1]; a cosine may be negative
            lo, hi = mean_interval(v, unit=m != "cos")
        out[m] = [lo, hi]
    return out


def multihop_rows(
    system: RAGSystem,
    kb: KnowledgeBase,
    questions: Sequence[QAItem],
    account: str,
    by_id: Mapping[str, QAItem] | None = None,
) -> dict[str, list[float]]:
    """Per chain, each metric of :func:`multihop_scores` (cosine only where both the
    retrieved and the reference documents exist)."""
    ids = kb.index.ids
    first_pos: dict[str, int] = {}
    for pos, doc_id in enumerate(ids):
        first_pos.setdefault(_source(doc_id), pos)
    vectors = kb.index.vectors()
    lookup = by_id or {}
    rows: dict[str, list[float]] = {m: [] for m in METRICS}
    for q in questions:
        hops = ask_chain(system, q, lookup, account)
        final = hops[-1].text
        gold = set(q.support_ids)
        pa, ra, fa = answer_prf(final, q.answers)
        em_a = float(normalize_answer(final) in {normalize_answer(a) for a in q.answers})
        got: list[str] = []
        positions: list[int] = []
        for r in hops:
            if r.retrieval is None:
                continue
            hop_sources = [_source(ids[int(p)]) for p in r.retrieval.indices]
            positions += [int(p) for p in r.retrieval.indices]
            if len(hops) == 1:  # one composed question: its first |S| distinct sources
                for src in hop_sources:
                    if src not in got and len(got) < len(gold):
                        got.append(src)
            else:  # hop by hop: each hop's top source
                top = next((s for s in hop_sources if s not in got), None)
                if top is not None:
                    got.append(top)
        pred = set(got)
        common = len(pred & gold)
        ps = common / len(pred) if pred else 0.0
        rs = common / len(gold)
        fs = 2 * ps * rs / (ps + rs) if common else 0.0
        em_s = float(pred == gold)
        pj, rj = pa * ps, ra * rs
        rows["ans_em"].append(em_a)
        rows["ans_f1"].append(fa)
        rows["sup_em"].append(em_s)
        rows["sup_f1"].append(fs)
        rows["joint_em"].append(em_a * em_s)
        rows["joint_f1"].append(2 * pj * rj / (pj + rj) if pj + rj > 0 else 0.0)
        ref = [first_pos[s] for s in gold if s in first_pos]
        if positions and ref:
            a = np.asarray(vectors[positions], dtype=np.float64).mean(axis=0)
            b = np.asarray(vectors[ref], dtype=np.float64).mean(axis=0)
            rows["cos"].append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12)))
    return rows


def _percent(value: float, ci: Sequence[float]) -> str:
    return format_interval(100 * value, 100 * ci[0], 100 * ci[1], digits=1)


def multihop_table(results: list[dict[str, Any]]) -> list[str]:
    """Markdown rows of Table 11 (percent, cosine as is), each with its 95 % interval
    where the cell recorded one."""
    lines = [
        "| system | ε | Ans EM | Ans F1 | Sup EM | Sup F1 | Joint EM | Joint F1 | Cos |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for item in results:
        cell, res = item["cell"], item["result"]["multihop"]
        ci = item["result"].get("multihop_ci95", {})
        eps = cell.get("epsilon")
        vals = " | ".join(_percent(res[m], ci.get(m, (nan, nan))) for m in METRICS[:-1])
        lo, hi = ci.get("cos", (nan, nan))
        cos = format_interval(res["cos"], lo, hi, digits=2)
        lines.append(
            f"| {cell['system']} | {'–' if eps is None else f'{eps:g}'} | {vals} | {cos} |"
        )
    return lines
