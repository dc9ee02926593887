"""``qa``: question-answering utility of each system on a corpus with gold QA.

Per question: match accuracy (Private-RAG section 4), SQuAD exact match and token F1,
retrieval recall and precision at K against the supporting documents, and the answer's
perplexity under the generator. Every system answers the same question sample. A
multi-hop question is asked hop by hop through its chain of sub-questions, each later one
carrying the system's own previous answer (:func:`~ragprivacy.eval.experiments.
private_rag_multihop.ask_chain`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._validation import check_positive_int
from ragprivacy.corpus import QAItem
from ragprivacy.errors import ConfigError, DataError
from ragprivacy.eval.config import ExperimentConfig, ExperimentSpec
from ragprivacy.eval.context import RunContext
from ragprivacy.eval.experiments.base import (
    Experiment,
    ReportSection,
    format_cell,
    register_experiment,
)
from ragprivacy.eval.experiments.plots import grouped_bars
from ragprivacy.eval.experiments.private_rag_multihop import ask_chain
from ragprivacy.eval.metrics import (
    exact_match,
    match,
    perplexity,
    precision_at_k,
    recall_at_k,
    token_f1,
    wilson_interval,
)
from ragprivacy.types import Response

__all__ = ["QAExperiment", "QAOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class QAOptions:
    """Options of the ``qa`` experiment.

    Attributes:
        questions: questions sampled per hop count.
        hops: hop counts evaluated (1 = single-hop, 2 or more = multi-hop chains).
    """

    questions: int = 500
    hops: tuple[int, ...] = (1,)

    def __post_init__(self) -> None:
        check_positive_int("questions", self.questions)
        for h in self.hops:
            check_positive_int("hops", h)


def _mean(xs: Sequence[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return float(np.mean(vals)) if vals else math.nan


class QAExperiment(Experiment):
    """Answer a seeded sample of the corpus's questions with each system."""

    type = "qa"
    options_type = QAOptions

    def __init__(self, spec: ExperimentSpec, config: ExperimentConfig, index: int = 0) -> None:
        super().__init__(spec, config, index)
        self.options: QAOptions = self.parse_options()

    def _sample(self, ctx: RunContext) -> list[QAItem]:
        corpus = ctx.corpus(self.corpus_name)
        if not corpus.questions:
            raise DataError(
                f"Corpus {self.corpus_name!r} has no questions; the 'qa' experiment needs a "
                "corpus with gold QA (e.g. synthetic: knowledge)."
            )
        rng = np.random.default_rng(self.seed)
        chosen: list[QAItem] = []
        for h in self.options.hops:
            pool = [q for q in corpus.questions if q.hops == h]
            if not pool:
                raise ConfigError(
                    f"Corpus {self.corpus_name!r} has no {h}-hop questions; "
                    f"available: {sorted({q.hops for q in corpus.questions})}."
                )
            take = min(self.options.questions, len(pool))
            chosen.extend(pool[i] for i in sorted(rng.choice(len(pool), take, replace=False)))
        return chosen

    def run_cell(
        self, cell: dict[str, Any], ctx: RunContext, rng: np.random.Generator
    ) -> dict[str, Any]:
        questions = self._sample(ctx)
        system = ctx.system(cell["system"], self.corpus_name, k=self.spec.k)
        # multi-hop chains are asked hop by hop (see private_rag_multihop): a single-step
        # reader cannot resolve the composed question, so asked whole every system scored 0
        by_id = {q.id: q for q in ctx.corpus(self.corpus_name).questions}
        single = [q for q in questions if q.hops == 1 or not q.chain]
        asked: dict[str, list[Response]] = {
            q.id: [r] for q, r in zip(single, system.answer_batch([q.question for q in single]))
        }
        for q in questions:
            if q.id not in asked:
                asked[q.id] = ask_chain(system, q, by_id, None)
        records: list[dict[str, Any]] = []
        for q in questions:
            hops = asked[q.id]
            r = hops[-1]
            retrieved = tuple(dict.fromkeys(i for h in hops for i in h.retrieved_ids))
            records.append(
                {
                    "id": q.id,
                    "hops": q.hops,
                    "answer": r.text,
                    "match": match(r.text, q.answers),
                    "em": exact_match(r.text, q.answers),
                    "f1": token_f1(r.text, q.answers),
                    "recall": recall_at_k(retrieved, q.support_ids),
                    "precision": precision_at_k(retrieved, q.support_ids),
                    "perplexity": perplexity(r.logprobs),
                    "epsilon": float(sum(h.privacy.epsilon for h in hops)),
                    "queries": len(hops),
                }
            )
        by_hops = {}
        for h in self.options.hops:
            rows = [x for x in records if x["hops"] == h]
            hits = sum(x["match"] for x in rows)
            lo, hi = wilson_interval(hits, len(rows))
            by_hops[str(h)] = {
                "n": len(rows),
                "match_accuracy": hits / len(rows),
                "match_ci95": [lo, hi],
                "exact_match": _mean([float(x["em"]) for x in rows]),
                "token_f1": _mean([x["f1"] for x in rows]),
                "retrieval_recall": _mean([x["recall"] for x in rows]),
                "precision_at_k": _mean([x["precision"] for x in rows]),
                "answer_perplexity": _mean([x["perplexity"] for x in rows]),
                "epsilon_total": float(sum(x["epsilon"] for x in rows)),
            }
        return {"system": system.describe(), "by_hops": by_hops, "records": records}

    def report(self, results: list[dict[str, Any]], out_dir: Path) -> ReportSection:
        hops = [str(h) for h in self.options.hops]
        lines = [
            f"Corpus `{self.corpus_name}`, top-K = {self.spec.k}, up to "
            f"{self.options.questions} questions per hop count (same sample for every "
            "system). Match accuracy = an answer containing a gold answer; 95% Wilson "
            "intervals. Multi-hop chains are asked hop by hop, each later sub-question "
            "carrying the system's own previous answer (one query per hop); the last hop's "
            "answer is scored, and recall@K and precision@K pool the documents of every "
            "hop.",
            "",
            "| system | hops | n | match accuracy (95% CI) | EM | F1 | recall@K | "
            "precision@K | answer perplexity |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        series: dict[str, list[float]] = {}
        errors: dict[str, list[tuple[float, float]]] = {}
        for item in results:
            name = item["cell"]["system"]
            res = item["result"]
            for h in hops:
                m = res["by_hops"][h]
                lines.append(
                    f"| {name} | {h} | {m['n']} | {m['match_accuracy']:.3f} "
                    f"({m['match_ci95'][0]:.3f}–{m['match_ci95'][1]:.3f}) | "
                    f"{m['exact_match']:.3f} | {m['token_f1']:.3f} | "
                    f"{format_cell(m['retrieval_recall'])} | {format_cell(m['precision_at_k'])} | "
                    f"{format_cell(m['answer_perplexity'], 2)} |"
                )
                series.setdefault(name, []).append(m["match_accuracy"])
                errors.setdefault(name, []).append(tuple(m["match_ci95"]))
        fig = f"qa_{self.index}_accuracy.png"
        grouped_bars(
            out_dir / fig,
            groups=[f"{h}-hop" for h in hops],
            series=series,
            errors=errors,
            ylabel="match accuracy",
            title=f"QA utility on {self.corpus_name}",
        )
        lines += ["", f"![QA match accuracy]({fig})"]
        return ReportSection(f"QA utility ({self.corpus_name})", "\n".join(lines), [fig])


register_experiment("qa", QAExperiment)
