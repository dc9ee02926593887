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
        [--batch 4] [--json OUT]

Needs the model (``make realmodel``). Timings vary ±30 % on shared machines (the load
average is printed): compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(max(args.threads))
    start = time.perf_counter()
    gen = create_generator("smollm2", max_tokens=args.tokens)
    load_s = time.perf_counter() - start
    prompts = [Prompt(Task.ANSWER, q, CONTEXT) for q in QUESTIONS[: max(args.batch, 1)]]
    print(f"load: {load_s:.1f} s  (load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs)")

    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        gen.generate(prompts[0], max_tokens=2)  # warm-up
        prefill = min(_timed(lambda: gen.generate(prompts[0], max_tokens=1))[0] for _ in "12")
        single, batch = [], []
        for _ in range(args.repeats):
            seconds, outs = _timed(lambda: [gen.generate(prompts[0])])
            single.append(sum(len(o.tokens) for o in outs) / seconds)
            seconds, outs = _timed(lambda: gen.generate_batch(prompts))
            batch.append(sum(len(o.tokens) for o in outs) / seconds)
        rows.append(
            {
                "threads": threads,
                "prefill_s": prefill,
                "tokens_per_s": statistics.median(single),
                "batch_tokens_per_s": statistics.median(batch),
            }
        )
    base = rows[0]
    head = ("threads", "prefill s", "tok/s", "ratio", "batch tok/s", "ratio")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (7, 9, 7, 6, 11, 6))))
    for r in rows:
        print(
            f"{r['threads']:>7} {r['prefill_s']:>9.2f} {r['tokens_per_s']:>7.1f} "
            f"{r['tokens_per_s'] / base['tokens_per_s']:>6.2f} {r['batch_tokens_per_s']:>11.1f} "
            f"{r['batch_tokens_per_s'] / base['tokens_per_s']:>6.2f}"
        )
    print(f"(ratios to one prompt at {base['threads']} thread(s); batch of {len(prompts)})")
    print("answer:", repr(gen.generate(prompts[0]).text))
    if args.json is not None:
        info = {"python": platform.python_version(), "torch": torch.__version__}
        args.json.write_text(json.dumps({"load_s": load_s, "rows": rows, **info}, indent=2))


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


if __name__ == "__main__":
    main()
