"""Per-token cost of DP-RAG by token voting (Private-RAG Alg. 4) against plain RAG, for
two readers, in one run.

Every system answers the same questions of the synthetic knowledge corpus: plain RAG
(top-5, one generation) and ``dp_vote`` with m = 50 voters of one document each (the RP
paper's m = 50, §4.1; it measured ~31× plain RAG's latency for its baseline). The cost
per generated token is the answers' wall time divided by their token count.

Readers:

- ``reference``: the reference reader (a released token costs next to nothing; its
  voters vote from their own answers and are asked again only where the released prefix
  leaves them, the path it has always taken);
- ``hf``: an ``hf:`` causal LM the size of GPT-2 small (12 layers, 768 wide, 50,257
  output tokens, 124 M parameters) with random weights, built from a config in a
  temporary directory (offline); its byte-level BPE tokenizer is trained here on the
  corpus, so it splits the corpus' made-up names into fewer tokens than GPT-2's would.
  Three systems: ``plain``; ``dp_vote`` with the batched voters (one forward pass over
  all 51 contexts, then one batched single-token pass per released token, key/value
  cache kept: :meth:`~ragprivacy.generate.HFGenerator.greedy_steps`); and the
  ``unbatched`` baseline, the same vote through a generator that hides its batched steps,
  so voting takes the other path (each voter's own greedy answer from ``generate_batch``,
  then one uncached ``next_token`` call per voter that left it, per token). The unbatched
  baseline is slow, so it answers only the first ``--unbatched-questions`` questions
  (its ratio is to plain RAG on those same questions).

The two voting paths must release the same tokens (checked per question, each run from
a fresh system with the question's own seed). Repeats are interleaved (each question is
answered by every system in turn); figures are medians over repeats. Torch runs on
``--threads`` threads (default 1: on the busy 2-core machine one thread was faster
than two, see benchmarks/README.md).

Usage::

    python benchmarks/bench_dp_vote.py [--n 2000] [--questions 6] [--voters 50]
        [--repeats 1] [--unbatched-questions 1] [--threads 1] [--device cpu|cuda]
        [--quick] [--json PATH]

Timings vary ±30 % on shared machines: compare ratios within one run.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, bench_parser, once, start

from ragprivacy.corpus import background_texts, synthesize
from ragprivacy.generate import (
    Generator,
    Prompt,
    Task,
    TokenDistribution,
    create_generator,
    tokenize,
)
from ragprivacy.rag import DPVoteRAG, RAGSystem, StandardRAG
from ragprivacy.retrieval import KnowledgeBase, TopKRetriever
from ragprivacy.types import Completion


class Unbatched(Generator):
    """``inner`` without its batched greedy steps: DP voting falls back to asking each
    voter on its own (the path ``hf:`` took before its batched steps)."""

    def __init__(self, inner: Generator) -> None:
        self.inner = inner
        self.name = inner.name

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return self.inner.generate(prompt, max_tokens=max_tokens)

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        return self.inner.generate_batch(prompts, max_tokens=max_tokens)

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        return self.inner.next_token_distribution(prompt, prefix)

    def next_token(self, prompt: Prompt, prefix: Sequence[str] | str = ()) -> str:
        return self.inner.next_token(prompt, prefix)

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        return self.inner.score(prompt, continuation)


def _build_hf(path: Path, texts: list[str], *, small: bool) -> Path:
    """A random-weight GPT-2 (small-sized, or tiny for ``--quick``) and a byte-level BPE
    tokenizer trained on ``texts``, saved to ``path``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    from transformers.utils import logging

    logging.disable_progress_bar()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=8000 if small else 500,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(path)
    torch.manual_seed(0)
    eos = fast.eos_token_id
    if small:  # GPT-2 small: 12 layers, 12 heads, 768 wide, 1024 positions
        config = GPT2Config(vocab_size=50257, bos_token_id=eos, eos_token_id=eos)
    else:
        config = GPT2Config(
            vocab_size=len(fast), n_layer=2, n_head=2, n_embd=64, n_positions=512,
            bos_token_id=eos, eos_token_id=eos,
        )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(path)
    return path


def _answer(system: RAGSystem, question: str) -> tuple[float, int, tuple[str, ...]]:
    """Seconds of one answer, its token count (at least 1) and its tokens."""
    timing = once(lambda: system.answer(question))
    return timing.seconds, max(1, len(timing.value.tokens)), timing.value.tokens


def _reader(
    label: str,
    gen: Generator,
    kb: KnowledgeBase,
    questions: list[str],
    vocab: tuple[str, ...],
    *,
    voters: int,
    repeats: int,
    unbatched: int,
) -> dict[str, Any]:
    """Interleaved timings of plain RAG, batched dp_vote and (``unbatched`` > 0) the
    unbatched dp_vote on ``questions``; medians over repeats of the per-token costs."""

    def vote(g: Generator, seed: int) -> DPVoteRAG:
        return DPVoteRAG(
            TopKRetriever(kb, k=voters), g, epsilon=20.0, epsilon_token=1.0,
            max_tokens=16, simulation=True, vocabulary=vocab, rng=seed,
        )  # fmt: skip

    plain = StandardRAG(TopKRetriever(kb, k=5), gen)
    slow_gen = Unbatched(gen)
    _answer(plain, questions[0])  # warm-up: first-call costs (tokenizer, caches)
    _answer(vote(gen, 0), questions[0])
    names = ["plain", "dp_vote"] + (["unbatched"] if unbatched else [])
    # seconds[name][repeat][question] and tokens[name][repeat][question]
    seconds: dict[str, list[list[float]]] = {n: [] for n in names}
    tokens: dict[str, list[list[int]]] = {n: [] for n in names}
    same = True
    for _r in range(repeats):
        for n in names:
            seconds[n].append([])
            tokens[n].append([])
        for qi, q in enumerate(questions):
            runs: dict[str, RAGSystem] = {"plain": plain, "dp_vote": vote(gen, qi)}
            if unbatched and qi < unbatched:
                runs["unbatched"] = vote(slow_gen, qi)
            released = {}
            for n, system in runs.items():
                s, k, toks = _answer(system, q)
                seconds[n][-1].append(s)
                tokens[n][-1].append(k)
                released[n] = toks
            if "unbatched" in released:
                same = same and released["unbatched"] == released["dp_vote"]

    def per_token(name: str, r: int, upto: int | None = None) -> float:
        return sum(seconds[name][r][:upto]) / sum(tokens[name][r][:upto])

    row: dict[str, Any] = {"reader": label, "questions": len(questions)}
    for n in names:
        row[f"{n}_ms_per_token"] = 1e3 * statistics.median(per_token(n, r) for r in range(repeats))
        row[f"{n}_tokens_per_answer"] = statistics.median(sum(t) / len(t) for t in tokens[n])
    row["dp_vote_vs_plain"] = statistics.median(
        per_token("dp_vote", r) / per_token("plain", r) for r in range(repeats)
    )
    if unbatched:
        row["unbatched_questions"] = min(unbatched, len(questions))
        for n in ("plain", "dp_vote"):  # on the unbatched path's questions
            row[f"{n}_ms_per_token_unbatched_questions"] = 1e3 * statistics.median(
                per_token(n, r, unbatched) for r in range(repeats)
            )
        row["unbatched_vs_plain"] = statistics.median(
            per_token("unbatched", r) / per_token("plain", r, unbatched) for r in range(repeats)
        )
        row["unbatched_vs_dp_vote"] = statistics.median(
            per_token("unbatched", r) / per_token("dp_vote", r, unbatched) for r in range(repeats)
        )
        row["same_tokens"] = same
    return row


DP_VOTE_GOAL = 3.0  # dp_vote per token ≤ 3× plain RAG on a transformer (the hf: reader)


def rows(res: dict[str, Any]) -> list[Row]:
    """Per reader, DP voting per token against plain RAG (with the goal on the ``hf:``
    reader); where the unbatched path ran, it against plain RAG and against the batched
    vote on the same questions."""
    out = []
    for r in res["readers"]:
        hf = str(r["reader"]).startswith("hf")
        config = {
            "reader": r["reader"],
            "voters": res["voters"],
            "questions": r["questions"],
            "repeats": res["repeats"],
            "threads": res["threads"],
            "device": res["device"],
        }
        ratio = r["dp_vote_ms_per_token"] / r["plain_ms_per_token"]
        out.append(
            Row(
                name=f"DP voting per token, {r['reader']} reader, m = {res['voters']}",
                config={**config, "path": "batched"},
                measured=r["dp_vote_ms_per_token"],
                unit="ms/token",
                baseline="plain RAG (top-5)",
                baseline_measured=r["plain_ms_per_token"],
                goal=f"≤ {DP_VOTE_GOAL:g}×" if hf else None,
                met=ratio <= DP_VOTE_GOAL if hf else None,
                notes=f"{r['dp_vote_tokens_per_answer']:.1f} tokens per answer, plain "
                f"{r['plain_tokens_per_answer']:.1f}",
            )
        )
        if "unbatched_questions" not in r:
            continue
        q = r["unbatched_questions"]
        unbatched = {**config, "path": "unbatched", "questions": q}
        same = f"same tokens as batched: {r['same_tokens']}"
        for base, label in (("plain", "plain RAG (top-5)"), ("dp_vote", "batched DP voting")):
            out.append(
                Row(
                    name=f"DP voting per token, unbatched, {r['reader']} reader, "
                    f"m = {res['voters']}, vs {label}",
                    config=unbatched,
                    measured=r["unbatched_ms_per_token"],
                    unit="ms/token",
                    baseline=f"{label}, same {q} question{'s' * (q > 1)}",
                    baseline_measured=r[f"{base}_ms_per_token_unbatched_questions"],
                    notes=same,
                )
            )
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = bench_parser(__doc__, repeats=1)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--questions", type=int, default=6)
    p.add_argument("--voters", type=int, default=50)
    p.add_argument("--unbatched-questions", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument(
        "--device", default="cpu", help="torch device of the hf reader (cpu, cuda, auto)"
    )
    run = start("dp_vote", p, argv)
    a = run.args
    n, nq, voters = (300, 2, 10) if a.quick else (a.n, a.questions, a.voters)
    corpus = synthesize("knowledge", n, seed=1)
    kb = KnowledgeBase.build(corpus, embedder="lsa")
    bg = background_texts("knowledge", 1000, seed=2)
    qs = [q.question for q in corpus.questions[:nq]]
    result: dict[str, Any] = {
        "voters": voters,
        "repeats": a.repeats,
        "threads": a.threads,
        "device": a.device,
        "readers": [],
    }

    ref = create_generator("reference", background=bg)
    words = {w for d in corpus for w in tokenize(d.text)}
    ref_vocab = tuple(sorted(words | {w for t in bg for w in tokenize(t)}))
    result["readers"].append(
        _reader("reference", ref, kb, qs, ref_vocab, voters=voters, repeats=a.repeats, unbatched=0)
    )
    with tempfile.TemporaryDirectory() as tmp:
        texts = [d.text for d in corpus] + list(bg)
        path = _build_hf(Path(tmp), texts, small=not a.quick)
        hf = create_generator(f"hf:{path}", max_tokens=16, threads=a.threads, device=a.device)
        hf_vocab = tuple(hf.next_token_distribution(Prompt(Task.ANSWER, qs[0])).tokens)
        label = "hf-tiny-random" if a.quick else "hf-gpt2-small-random"
        row = _reader(
            label, hf, kb, qs, hf_vocab, voters=voters, repeats=a.repeats,
            unbatched=a.unbatched_questions,
        )  # fmt: skip
        result["readers"].append(row)
    for row in result["readers"]:
        print(json.dumps(row))
    return run.finish(rows(result), result)


if __name__ == "__main__":
    main()
