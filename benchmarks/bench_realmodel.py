"""The ``smollm2`` generator (SmolLM2-135M-Instruct, GGUF via transformers): load time and
greedy decoding speed, all in one run.

1. Load: seconds for ``create_generator("smollm2")`` (the tokenizer and the weights read
   from the GGUF file and dequantised to float32), wall clock.
2. Decoding: new tokens per second of greedy ``generate`` on a RAG answer prompt (one
   prompt at a time, then a left-padded batch of ``--batch`` prompts) at each thread
   count in ``--threads``, with the ratio to the first thread count (the baseline), and
   the prompt's prefill time.

Usage::

    python benchmarks/bench_realmodel.py [--threads 1 2] [--tokens 32] [--repeats 3]
        [--batch 4] [--quick] [--json PATH]

``--quick``: the first thread count, 4 tokens, a batch of 2, one repeat.

Needs the model (``make realmodel``). Timings vary ±30 % on shared machines (the load
average is printed): compare ratios within one run.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Row, Timing, bench_parser, once, start, time_call

from ragprivacy.generate import Prompt, Task, create_generator

CONTEXT = (
    "Marta Olsen was born in Velmora in 1961. She works as a radio engineer at Halden "
    "Clinic and lives in Tarsk.",
    "Jon Berg, a pottery enthusiast, is the chief executive of Queirgick Dynamics.",
)
QUESTIONS = (
    "Where was Marta Olsen born?",
    "Who is the chief executive of Queirgick Dynamics?",
    "Which occupation is that of Marta Olsen?",
    "What is Jon Berg's favourite pastime?",
)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = bench_parser(__doc__, repeats=3, quick_repeats=1)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer")
    parser.add_argument("--batch", type=int, default=4)
    run = start("realmodel", parser, argv)
    args = run.args
    if args.quick:
        args.threads, args.tokens, args.batch = args.threads[:1], 4, 2

    import torch

    torch.set_num_threads(max(args.threads))
    loaded = once(lambda: create_generator("smollm2", max_tokens=args.tokens))
    gen, load_s = loaded.value, loaded.seconds
    prompts = [Prompt(Task.ANSWER, q, CONTEXT) for q in QUESTIONS[: max(args.batch, 1)]]
    print(f"load: {load_s:.1f} s")

    def rate(outs: Timing[Any]) -> float:
        return sum(len(o.tokens) for o in outs.value) / outs.seconds

    per_threads: list[dict[str, Any]] = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        gen.generate(prompts[0], max_tokens=2)  # warm-up
        prefill = time_call(lambda: gen.generate(prompts[0], max_tokens=1), repeats=2, warmup=0)
        single, batch = [], []
        for _ in range(args.repeats):
            single.append(rate(once(lambda: [gen.generate(prompts[0])])))
            batch.append(rate(once(lambda: gen.generate_batch(prompts))))
        per_threads.append(
            {
                "threads": threads,
                "prefill_s": prefill.min,
                "tokens_per_s": statistics.median(single),
                "batch_tokens_per_s": statistics.median(batch),
            }
        )
    base = per_threads[0]
    head = ("threads", "prefill s", "tok/s", "ratio", "batch tok/s", "ratio")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (7, 9, 7, 6, 11, 6))))
    for r in per_threads:
        print(
            f"{r['threads']:>7} {r['prefill_s']:>9.2f} {r['tokens_per_s']:>7.1f} "
            f"{r['tokens_per_s'] / base['tokens_per_s']:>6.2f} {r['batch_tokens_per_s']:>11.1f} "
            f"{r['batch_tokens_per_s'] / base['tokens_per_s']:>6.2f}"
        )
    print(f"(ratios to one prompt at {base['threads']} thread(s); batch of {len(prompts)})")
    print("answer:", repr(gen.generate(prompts[0]).text))
    baseline = f"one prompt at {base['threads']} thread{'s' * (base['threads'] > 1)}"
    rows = []
    for r in per_threads:
        config = {"threads": r["threads"], "tokens": args.tokens, "repeats": args.repeats}
        for what, key, size in (
            ("one prompt", "tokens_per_s", 1),
            (f"a batch of {len(prompts)}", "batch_tokens_per_s", len(prompts)),
        ):
            if r is base and size == 1:
                continue  # the baseline itself
            rows.append(
                Row(
                    name=f"greedy decoding, {what}, {r['threads']} thread"
                    f"{'s' * (r['threads'] > 1)}",
                    config={**config, "batch": size},
                    measured=r[key],
                    unit="new tokens/s",
                    baseline=baseline,
                    baseline_measured=base["tokens_per_s"],
                    notes=f"prefill {r['prefill_s']:.2f} s",
                )
            )
    result = {"load_s": load_s, "tokens": args.tokens, "threads": per_threads}
    return run.finish(rows, result)


if __name__ == "__main__":
    main()
