"""``ragprivacy corpus``: synthesise, inspect and convert corpora."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from ragprivacy._validation import check_positive_int

app = typer.Typer(help="Synthesise, inspect and convert document corpora.", no_args_is_help=True)


@app.command("synth")
def synth(
    kind: str = typer.Option(..., "--kind", help="medical, email, legal or knowledge."),
    n: int = typer.Option(2000, "--n", help="Number of documents."),
    seed: int = typer.Option(0, "--seed", help="Root seed; the same seed gives the same corpus."),
    out: Path = typer.Option(..., "--out", help="Output .jsonl (or .csv) path."),
    force: bool = typer.Option(
        False, "--force", help="Run even if the estimate says it will not fit or takes > 1 h."
    ),
) -> None:
    """Write a deterministic synthetic corpus with PII and QA ground truth."""
    from ragprivacy._resources import check_resources
    from ragprivacy.corpus import synthesis_estimate, synthesize, write_csv, write_jsonl

    check_positive_int("n", n)
    estimate = synthesis_estimate(kind, n)
    if estimate is not None:
        check_resources(estimate, what=f"{n:,} synthetic {kind} documents", knob="--n", force=force)
    corpus = synthesize(kind, n, seed=seed)
    if out.suffix.lower() == ".csv":
        write_csv(corpus, out)
    else:
        write_jsonl(corpus, out)
    extra = f" and {len(corpus.questions)} questions" if corpus.questions else ""
    typer.echo(f"wrote {len(corpus)} {kind} documents{extra} to {out}")


@app.command("load")
def load(
    dataset: str = typer.Option(..., "--dataset", help="Dataset name (see `ragprivacy backends`)."),
    out: Path = typer.Option(..., "--out", help="Output .jsonl (or .csv) path."),
    path: Path | None = typer.Option(
        None, "--path", help="Local file or folder in the dataset's own format."
    ),
    split: str | None = typer.Option(None, "--split", help="Split to read (default: the usual)."),
    limit: int | None = typer.Option(None, "--limit", help="Read at most this many records."),
    pii_detector: str = typer.Option(
        "regex",
        "--pii-detector",
        help="PII detector for the documents' PII ground truth: regex, presidio, "
        "presidio:SPACY_MODEL, or none.",
    ),
) -> None:
    """Convert one of the papers' datasets (local files, or the local Hugging Face cache;
    nothing is downloaded) into a ragprivacy corpus file, with PII spans marked."""
    from ragprivacy.corpus import load_dataset_corpus, write_csv, write_jsonl

    if limit is not None:
        check_positive_int("limit", limit)
    corpus = load_dataset_corpus(
        dataset,
        path=str(path) if path else None,
        split=split,
        limit=limit,
        pii_detector=None if pii_detector == "none" else pii_detector,
    ).require_nonempty()
    (write_csv if out.suffix.lower() == ".csv" else write_jsonl)(corpus, out)
    extra = f" and {len(corpus.questions)} questions" if corpus.questions else ""
    typer.echo(f"wrote {len(corpus)} {dataset} documents{extra} to {out}")


@app.command("info")
def info(
    path: Path = typer.Argument(..., help="A .jsonl or .csv corpus."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Summarise a corpus file: documents, length, PII kinds, questions."""
    from ragprivacy.corpus import load_corpus
    from ragprivacy.generate import tokenize

    corpus = load_corpus(path).require_nonempty()
    lengths = [len(tokenize(d.text)) for d in corpus]
    pii = Counter(s.kind for d in corpus for s in d.pii)
    hops = Counter(q.hops for q in corpus.questions)
    summary: dict[str, Any] = {
        "documents": len(corpus),
        "mean_tokens": sum(lengths) / len(lengths),
        "max_tokens": max(lengths),
        "pii": dict(sorted(pii.items())),
        "questions_by_hops": {str(k): v for k, v in sorted(hops.items())},
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    table = Table(title=str(path))
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("documents", str(summary["documents"]))
    table.add_row("mean / max tokens", f"{summary['mean_tokens']:.1f} / {summary['max_tokens']}")
    for kind, count in summary["pii"].items():
        table.add_row(f"PII: {kind}", str(count))
    for h, count in summary["questions_by_hops"].items():
        table.add_row(f"{h}-hop questions", str(count))
    Console().print(table)
