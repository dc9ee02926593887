"""``private_rag_medical``: the defenses on free-text answers over the synthetic medical
corpus (Private-RAG's ChatDoctor setting, §4.1 and App. E).

Each test item is one patient–doctor record: the query is the patient's half (the text
before ``metadata["doctor_offset"]``), continued after ``"Doctor:"``; the reference answer
is the doctor's half. As in the paper's ChatDoctor setup, the test records are *removed*
from the external corpus (which holds the other records, ``copies`` times each), so a
good answer comes from records about the same condition, not from the record itself.

Utility, per system: ROUGE-L F of the generated answer against the reference (every
system), and the perplexity of the reference answer under the generator given the
system's context (non-private systems only: ``non-rag``, ``rag``, ``projection``; a DP
voting answer has no likelihood of its own, and scoring the reference with the
non-private context would not describe the private system). The paper scores ChatDoctor
with BERTScore F1; no BERT model can be loaded offline, so ROUGE-L stands in for it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np

from ragprivacy._stats import mean_interval
from ragprivacy.corpus import Corpus
from ragprivacy.eval.context import RunContext
from ragprivacy.eval.experiments.base import ReportSection, format_interval, register_experiment
from ragprivacy.eval.experiments.private_rag import PrivateRAGExperiment, charged_total
from ragprivacy.eval.metrics import perplexity, rouge_l
from ragprivacy.generate import Prompt, Task
from ragprivacy.index import create_index
from ragprivacy.rag import Query
from ragprivacy.retrieval import KnowledgeBase
from ragprivacy.types import Document, Response

__all__ = ["PrivateRAGMedicalExperiment", "medical_split"]

# Weak keys: an entry lives as long as its context (an ``id(ctx)`` key can be reused).
_SPLIT_CACHE: WeakKeyDictionary[
    RunContext, dict[tuple[Any, ...], tuple[KnowledgeBase, list[tuple[str, str]]]]
] = WeakKeyDictionary()
_NON_PRIVATE = ("non-rag", "rag", "projection")


def medical_split(
    ctx: RunContext, corpus_name: str, copies: int, tests: int, seed: int
) -> tuple[KnowledgeBase, list[tuple[str, str]]]:
    """The external knowledge base (the non-test records, ``copies`` each) and the test
    items (patient half ending in ``"Doctor:"``, doctor half) — cached per run."""
    cache = _SPLIT_CACHE.setdefault(ctx, {})
    key = (corpus_name, copies, tests, seed)
    if key not in cache:
        corpus = ctx.corpus(corpus_name)
        usable = [d for d in corpus if "doctor_offset" in d.metadata]
        rng = np.random.default_rng(seed)
        take = min(tests, max(0, len(usable) - 1))
        chosen = set(rng.choice(len(usable), take, replace=False).tolist())
        items = []
        for i in sorted(chosen):
            d = usable[i]
            cut = int(d.metadata["doctor_offset"])
            answer = d.text[cut:].removeprefix("Doctor:").strip()
            items.append((d.text[:cut].rstrip() + "\nDoctor:", answer))
        test_ids = {usable[i].id for i in chosen}
        kept = [d for d in corpus if d.id not in test_ids]
        docs = [
            Document(f"{d.id}~{j}", d.text, {**d.metadata, "source": d.id})
            for d in kept
            for j in range(copies)
        ]
        base = ctx.knowledge_base(corpus_name)
        vectors = np.asarray(base.embedder.encode([d.text for d in kept]), dtype=np.float32)
        index = create_index("exact", dim=base.embedder.dim)
        big = Corpus(docs, name=f"{corpus.name}-external-x{copies}")
        index.add(np.repeat(vectors, copies, axis=0), big.ids)
        cache[key] = (KnowledgeBase(big, base.embedder, index), items)
    return cache[key]


class PrivateRAGMedicalExperiment(PrivateRAGExperiment):
    """Free-text privacy–utility sweep on the medical corpus (see the module docstring).

    Options are :class:`~ragprivacy.eval.experiments.PrivateRAGOptions` (``questions`` =
    test records, ``copies``, ``epsilons``, the voting settings, ``max_tokens``); the
    question set and ablations do not apply.
    """

    type = "private_rag_medical"

    def cells(self) -> list[dict[str, Any]]:
        return [c for c in super().cells() if "ablation" not in c]

    def run_cell(
        self, cell: dict[str, Any], ctx: RunContext, rng: np.random.Generator
    ) -> dict[str, Any]:
        o = self.options
        kb, items = medical_split(ctx, self.corpus_name, o.copies, o.questions, self.seed)
        system = self._system(cell, ctx, kb, len(items), rng)
        gen = ctx.generator(self.corpus_name)
        rouge, ppl, charged = [], [], 0
        responses: list[Response] = []
        for patient, reference in items:
            q = Query(
                patient,
                task=Task.CONTINUE,
                retrieval_text=patient,
                options={"max_tokens": o.max_tokens},
            )
            r = system.answer(q, account="evaluator")
            responses.append(r)
            rouge.append(rouge_l(r.text, reference))
            charged += len(r.privacy.per_document)
            if cell["system"] in _NON_PRIVATE:
                context = kb.texts(r.retrieval.indices) if r.retrieval is not None else ()
                scored = gen.score(Prompt(Task.CONTINUE, patient, tuple(context)), reference)
                ppl.append(perplexity(scored.logprobs))
        total, total_delta = charged_total(system, responses)  # from what was charged
        return {
            "system": system.describe() if hasattr(system, "describe") else {},
            "n": len(items),
            "rouge_l": float(np.mean(rouge)),
            "rouge_l_ci95": list(mean_interval(rouge, unit=True)),
            "perplexity": float(np.exp(np.mean(np.log(ppl)))) if ppl else math.nan,
            "total_epsilon": total,
            "total_delta": total_delta,
            "documents_charged": charged,
        }

    def report(self, results: list[dict[str, Any]], out_dir: Path) -> ReportSection:
        from ragprivacy.eval.experiments.private_rag_plots import privacy_utility_plot

        o = self.options
        title = f"Private RAG, free-text answers ({self.corpus_name})"
        lines = [
            f"{results[0]['result']['n']} held-out patient records (their own records "
            f"removed from the corpus); {o.copies} copies of each other record; K = "
            f"{self.spec.k}, ε_token = {o.epsilon_token}, M = {o.max_retrievals}, "
            f"τ = {o.tau}. Generator: {self.config.models.generator}. ROUGE-L F of the "
            "answer against the doctor's reply (stand-in for BERTScore); perplexity of the "
            "reply given the system's context (geometric mean; non-private systems only). "
            "ROUGE-L with a 95 % Student-t interval over the records.",
            "",
            "| system | ε_q / ε | total ε | ROUGE-L (95% CI) | perplexity | docs charged |",
            "|---|---|---|---|---|---|",
        ]
        series: dict[str, list[tuple[float, ...]]] = {}
        flat: dict[str, tuple[float, ...]] = {}
        for item in results:
            cell, res = item["cell"], item["result"]
            eps = cell.get("epsilon")
            ppl = res["perplexity"]
            lines.append(
                f"| {cell['system']} | {'–' if eps is None else f'{eps:g}'} | "
                f"{res['total_epsilon']:g} | "
                f"{format_interval(res['rouge_l'], *(res.get('rouge_l_ci95') or (None, None)))} | "
                f"{'–' if math.isnan(ppl) else f'{ppl:.1f}'} | {res['documents_charged']} |"
            )
            ci = res.get("rouge_l_ci95") or (math.nan, math.nan)
            point = (res["rouge_l"], float(ci[0]), float(ci[1]))  # with its 95 % interval
            if eps is not None and math.isfinite(res["total_epsilon"]):
                series.setdefault(cell["system"], []).append((res["total_epsilon"], *point))
            else:
                total = "∞" if math.isinf(res["total_epsilon"]) else f"{res['total_epsilon']:g}"
                flat[f"{cell['system']} (ε = {total})"] = point
        fig = f"private_rag_medical_{self.index}.png"
        privacy_utility_plot(out_dir / fig, series, flat, title=title, ylabel="ROUGE-L F")
        lines += ["", f"![privacy-utility (ROUGE-L)]({fig})"]
        return ReportSection(title, "\n".join(lines), [fig])


register_experiment("private_rag_medical", PrivateRAGMedicalExperiment)
