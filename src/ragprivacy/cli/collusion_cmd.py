"""``ragprivacy collusion``: the k-account attack sweeps (collusion paper §4, App. A)."""

from __future__ import annotations

import json

import typer

from ragprivacy.cli._parsing import parse_list

__all__ = ["app"]

app = typer.Typer(help="The k-account collusion attack and its sweeps.", no_args_is_help=True)


@app.command("sweep")
def sweep(
    mechanism: str = typer.Option("scalar", "--mechanism", help="scalar or topk."),
    eps: str = typer.Option("1,2,4", "--eps", help="Per-account epsilons, comma-separated."),
    k: str = typer.Option("1,2,5,10,20", "--k", help="Coalition sizes, comma-separated."),
    n: int = typer.Option(10_000, "--n", help="Queries per account (the rate limit)."),
    trials: int = typer.Option(10_000, "--trials", help="Trials per world and cell."),
    seed: int = typer.Option(0, "--seed", help="Root seed of the sweep."),
    delta_acc: float = typer.Option(1e-6, "--delta-acc", help="Per-account delta."),
    adversary: str = typer.Option(
        "pooled-mean", "--adversary", help="scalar: pooled-mean, bayes-llr or split."
    ),
    rho: float = typer.Option(0.5, "--rho", help="split: fraction of colluders on target."),
    regime: str = typer.Option(
        "same-tenant", "--regime", help="topk: same-tenant, external-m4 or external."
    ),
    mode: str = typer.Option("exact", "--mode", help="topk: exact (binomial) or service."),
    out: str | None = typer.Option(None, "--out", help="Directory for the PNG figure and JSON."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
    force: bool = typer.Option(
        False, "--force", help="Run even if the estimate says it will not fit or takes > 1 h."
    ),
) -> None:
    """AUC vs k against eq. (3.11), with the P1/P3 gate verdicts."""
    from ragprivacy._resources import check_resources
    from ragprivacy._validation import check_positive_int
    from ragprivacy.errors import ConfigError
    from ragprivacy.eval import scalar_sweep, sweep_estimate, topk_sweep

    if mechanism in ("scalar", "topk"):
        rows, ks = parse_list(eps, float), parse_list(k, int)
        trials = check_positive_int("trials", trials)
        n = check_positive_int("n", n)
        check_resources(
            sweep_estimate(
                mechanism=mechanism, rows=len(rows), ks=ks, n=n, trials=trials, mode=mode
            ),
            what=f"A {mechanism} sweep of {len(rows) * len(ks)} cells x {trials:,} trials",
            knob="--trials",
            force=force,
        )
    if mechanism == "scalar":
        res = scalar_sweep(
            eps=parse_list(eps, float),
            ks=parse_list(k, int),
            n=n,
            trials=trials,
            seed=seed,
            delta_acc=delta_acc,
            adversary=adversary,
            rho=rho,
        )
    elif mechanism == "topk":
        res = topk_sweep(
            eps=parse_list(eps, float),
            ks=parse_list(k, int),
            n=n,
            trials=trials,
            seed=seed,
            delta_acc=delta_acc,
            regime=regime,
            mode=mode,
        )
    else:
        raise ConfigError(f"The '--mechanism' must be scalar or topk; got {mechanism!r}.")
    record = res.to_dict()
    if out:
        from pathlib import Path

        from ragprivacy.eval import plot_sweep

        d = Path(out)
        fig = plot_sweep(res, d / f"collusion_{mechanism}.png")
        (d / f"collusion_{mechanism}.json").write_text(json.dumps(record, indent=1))
        record["figure"] = str(fig)
    if as_json:
        typer.echo(json.dumps(record, indent=1))
        return
    typer.echo(f"{'k':>4} {'eps':>5} {'auc':>8} {'se':>7} {'pred':>8} {'z':>6}")
    for c in res.cells:
        z = "-" if c.z is None else f"{c.z:6.2f}"
        typer.echo(f"{c.k:>4} {c.eps_acc:>5g} {c.auc:8.4f} {c.se:7.4f} {c.predicted:8.4f} {z:>6}")
    for g in res.gates:
        typer.echo(f"gate {g.name}: {'PASS' if g.passed else 'FAIL'}")
    typer.echo(f"{len(res.cells)} cells in {res.seconds:.2f} s")


@app.command("embedder")
def embedder_check(
    pairs: int = typer.Option(10, "--pairs", help="Target/decoy pairs closest to the gap."),
    trials: int = typer.Option(2000, "--trials", help="Trials per world and cell."),
    gap: float = typer.Option(0.4, "--gap", help="Target score gap Δ."),
) -> None:
    """§A.1: the scalar attack with MiniLM over a fixed 50-paragraph corpus (JSON)."""
    from ragprivacy.eval import trained_embedder_check

    typer.echo(
        json.dumps(trained_embedder_check(pairs=pairs, trials=trials, target_gap=gap), indent=1)
    )


@app.command("production")
def production_check(
    passages: int = typer.Option(100_000, "--passages", help="Synthetic passages (>= 1e5)."),
    eps: str = typer.Option("8,16", "--eps", help="Per-account epsilons."),
    k: str = typer.Option("1,2,5,10,20", "--k", help="Coalition sizes, comma-separated."),
    trials: int = typer.Option(2000, "--trials", help="Trials per world and cell."),
    embedder: str = typer.Option(
        "minilm", "--embedder", help="minilm (reported figure) or lsa (fast, for trying)."
    ),
    cache_dir: str | None = typer.Option(
        None, "--cache-dir", help="Cache the passage embeddings here (encode once, resume)."
    ),
    threads: int | None = typer.Option(None, "--threads", help="torch/FAISS/BLAS threads."),
    batch_size: int = typer.Option(256, "--batch-size", help="Texts per embedder call."),
    check_queries: int = typer.Option(
        2000, "--check-queries", help="Full noise-then-select queries checking p_b (0: skip)."
    ),
    seed: int = typer.Option(0, "--seed", help="Corpus and sampling seed."),
    out: str | None = typer.Option(None, "--out", help="Also write the JSON to this file."),
) -> None:
    """§4.5: MiniLM + FAISS HNSW, hit indicator vs instrumented score (JSON)."""
    from pathlib import Path

    from ragprivacy.eval import production_scale_check

    record = production_scale_check(
        passages=passages,
        eps=parse_list(eps, float),
        ks=parse_list(k, int),
        trials=trials,
        embedder=embedder,
        cache_dir=cache_dir,
        num_threads=threads,
        batch_size=batch_size,
        check_queries=check_queries,
        seed=seed,
        log=lambda m: typer.echo(m, err=True),
    )
    text = json.dumps(record, indent=1)
    if out:
        Path(out).write_text(text)
    typer.echo(text)
