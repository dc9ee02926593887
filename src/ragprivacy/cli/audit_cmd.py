"""``ragprivacy audit``: run, verify and report an audit window (collusion paper §5)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import typer

__all__ = ["app"]

_IN_PLACE = "changed-record-in-place"

#: ``ragprivacy audit verify``'s exit code per verdict; 2 is a usage or input error (a bad
#: option, a missing or unreadable window), as for every command
VERIFY_EXIT = {"PASS": 0, "LIVE_OK": 0, "FAIL": 1, "INCOMPLETE": 3}

app = typer.Typer(
    help="The verifiable audit protocol (commit, verify, report).", no_args_is_help=True
)


@app.command("commit")
def commit(
    out: Path = typer.Option(..., "--out", help="Directory to write the window to."),
    tamper: str = typer.Option(
        "none",
        "--tamper",
        help="none, changed-record, changed-record-in-place, dropped-record, wrong-seed, "
        "select-before-noise, cross-tenant, coalition, low-sigma, over-rate, tenant-switch, "
        "ground-noise, decoy-vectors or withheld-witnesses (a provider cheating with its own "
        "keys; the verifier must FAIL each).",
    ),
    k_max: int = typer.Option(4, "--k-max", help="Declared coalition cap."),
    colluders: int = typer.Option(3, "--colluders", help="Same-tenant colluding accounts."),
    queries: int = typer.Option(6, "--queries", help="Queries per account (= rate limit)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the synthetic workload."),
    queries_mode: str = typer.Option(
        "vector",
        "--queries-mode",
        help="vector (accounts send embeddings) or text (query texts, embedded by the "
        "committed hashing embedder and re-embedded by the verifier).",
    ),
) -> None:
    """Run a synthetic window as a provider: commitments, ledger, receipts, ĉ."""
    from ragprivacy._validation import check_choice
    from ragprivacy.audit import save_window
    from ragprivacy.audit.cheats import TAMPER_CASES, tamper_ledger_file
    from ragprivacy.audit.demo import demo_window

    # Editing a record after publication is not a window the provider runs but a change
    # to the saved files, so it is applied to an honest window once written.
    in_place = check_choice("tamper", tamper, (*TAMPER_CASES, _IN_PLACE)) == _IN_PLACE
    w = demo_window(
        tamper="none" if in_place else tamper,
        k_max=k_max,
        colluders=colluders,
        queries_per_account=queries,
        seed=seed,
        queries=queries_mode,
    )
    save_window(out, w.transcript, w.receipts, w.package)
    if in_place:
        tamper_ledger_file(out, len(w.transcript.records) // 2)
    typer.echo(
        f"window {w.transcript.commitments.policy['window_id']}: "
        f"{len(w.transcript.records)} records, {len(w.receipts)} receipts -> {out}"
    )


def _remote(
    url: str,
    window: str | None,
    receipts_dir: Path | None,
    auditor_dir: Path | None,
    live: bool = False,
) -> tuple:  # type: ignore[type-arg]
    """The transcript of a service's window, the receipts accounts kept, the package."""
    from ragprivacy.audit import Receipt, load_window
    from ragprivacy.service import fetch_window, load_receipts, load_unanswered

    transcript = fetch_window(url, window, live=live)
    receipts = [Receipt.from_dict(r) for r in load_receipts(receipts_dir)] if receipts_dir else []
    window_id = str(transcript.commitments.policy.get("window_id", ""))
    unanswered = load_unanswered(receipts_dir, window_id) if receipts_dir else []
    package = load_window(auditor_dir)[2] if auditor_dir else None
    return transcript, receipts, package, unanswered


def _verdict(
    directory: Path | None,
    mode: str,
    beta: float,
    eta: float,
    seed: int,
    embedder: str | None = None,
    provider_key: str | None = None,
    remote: tuple | None = None,  # type: ignore[type-arg]
    previous: Path | None = None,
) -> dict:
    from ragprivacy.audit import Verifier, filter_end_states, load_window
    from ragprivacy.embed import create_embedder
    from ragprivacy.errors import ConfigError, VerificationError

    previous_filters = None
    if previous is not None:
        before, _, before_package = load_window(previous)
        if before_package is None:
            raise ConfigError(
                f"--previous {previous} holds no auditor package (auditor.json): the previous "
                "window's filter state can only be replayed from it."
            )
        try:
            previous_filters = filter_end_states(before, before_package)
        except VerificationError as exc:
            raise ConfigError(f"--previous {previous}: {exc}") from None

    unanswered: list[tuple[str | None, str]] = []
    if remote is not None:
        transcript, receipts, package, unanswered = remote
    else:
        assert directory is not None
        transcript, receipts, package = load_window(directory)
    emb = create_embedder(embedder) if embedder else None
    v = Verifier(
        mode=mode, beta=beta, eta=eta, rng=seed, embedder=emb, provider_key=provider_key
    ).verify(
        transcript, receipts, package, unanswered=unanswered, previous_filters=previous_filters
    )
    return v.to_dict()


@app.command("verify")
def verify(
    directory: Path | None = typer.Option(None, "--dir", help="A window directory."),
    url: str | None = typer.Option(
        None, "--url", help="A running service (verifies its newest closed window)."
    ),
    window: str | None = typer.Option(None, "--window", help="With --url: the window id."),
    live: bool = typer.Option(
        False,
        "--live",
        help="With --url: check the open window as it stands (commitments, ledger, account "
        "policies, receipts); (PASS, ε_audit) is issued only once it closes.",
    ),
    receipts_dir: Path | None = typer.Option(
        None, "--receipts", help="With --url: receipts the accounts kept (*.jsonl)."
    ),
    auditor_dir: Path | None = typer.Option(
        None, "--auditor", help="With --url: the auditor package the admin exported."
    ),
    mode: str = typer.Option("full", "--mode", help="full or sampled."),
    beta: float = typer.Option(0.01, "--beta", help="Sampled: bad fraction to detect."),
    eta: float = typer.Option(2**-20, "--eta", help="Sampled: miss probability."),
    seed: int = typer.Option(0, "--seed", help="Sampled: sampling seed."),
    embedder: str | None = typer.Option(
        None,
        "--embedder",
        help="The committed embedder (a spec such as 'hashing' or "
        "'sentence-transformers:PATH') to re-embed witnessed query texts; default: rebuilt "
        "from the committed name when its fingerprint matches.",
    ),
    provider_key: str | None = typer.Option(
        None,
        "--provider-key",
        help="The provider's Ed25519 public key (hex), known in advance; default: the key "
        "in the commitments.",
    ),
    previous: Path | None = typer.Option(
        None,
        "--previous",
        help="The previous window's directory, with its auditor package: its MURAG "
        "tenants' documents must start this window where that one left them.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
) -> None:
    """Verify a window: PASS with ε_audit (exit 0), FAIL with the failed check (exit 1), or
    INCOMPLETE: the public checks hold but re-execution needs the auditor package (exit
    3). An open window checked with --live: LIVE OK (exit 0) or FAIL (exit 1). Usage and
    input errors exit 2."""
    from ragprivacy.errors import ConfigError

    if (directory is None) == (url is None):
        raise ConfigError("Give the window as --dir DIR or --url URL (exactly one).")
    if live and (url is None or auditor_dir is not None):
        raise ConfigError(
            "--live checks a running service's open window: give --url, and no --auditor "
            "(the auditor package exists only once the window closes)."
        )
    remote = _remote(url, window, receipts_dir, auditor_dir, live) if url is not None else None
    if provider_key is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", provider_key):
        raise ConfigError(
            "--provider-key must be the provider's Ed25519 public key as 64 hex characters."
        )
    record = _verdict(directory, mode, beta, eta, seed, embedder, provider_key, remote, previous)
    outcome = record["verdict"]
    if as_json:
        typer.echo(json.dumps(record, indent=1))
    elif outcome == "PASS":
        typer.echo(f"PASS  epsilon_audit = {record['epsilon_audit']:.4g}")
    elif outcome == "LIVE_OK":
        typer.echo(
            f"LIVE OK  {record['records']} records so far: commitments, ledger, account "
            "policies and receipts hold; (PASS, epsilon_audit) comes when the window closes"
        )
    elif outcome == "INCOMPLETE":
        typer.echo(
            f"INCOMPLETE  {record['records']} records: the public checks hold (commitments, "
            "ledger, account policies, receipts, the coalition claim's binding and cap); "
            "re-execution (per-record claims, the coalition estimate) needs the auditor "
            "package (--auditor DIR): no epsilon_audit without it"
        )
    else:
        typer.echo(f"FAIL  {record['failed_check']}: {record['failures'][0]['detail']}")
    if VERIFY_EXIT[outcome]:
        raise typer.Exit(VERIFY_EXIT[outcome])


@app.command("report")
def report(
    directory: Path = typer.Option(..., "--dir", help="The window directory."),
    out: Path | None = typer.Option(None, "--out", help="Markdown file (default: stdout)."),
) -> None:
    """A Markdown audit report of a window."""
    from ragprivacy.audit import render_report

    record = _verdict(directory, "full", 0.01, 2**-20, 0)
    com = json.loads((directory / "commitments.json").read_text())
    coal = json.loads((directory / "coalition.json").read_text())
    md = render_report(record, com, coal)
    if out:
        out.write_text(md)
        typer.echo(f"report -> {out}")
    else:
        typer.echo(md)


@app.command("calibrate")
def calibrate(
    trials: int = typer.Option(200, "--trials", help="Windows per cell (paper: 200)."),
    seed: int = typer.Option(0, "--seed", help="Seed."),
    out: Path | None = typer.Option(None, "--out", help="Directory for Figure 4 and JSON."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
) -> None:
    """The coalition estimator's calibration of §5.4 (A=30, n=100, d=32; Figure 4)."""
    from ragprivacy.audit import calibrate_estimator

    r = calibrate_estimator(trials=trials, rng=seed)
    record = r.to_dict()
    if out:
        from ragprivacy.eval import plot_calibration

        out.mkdir(parents=True, exist_ok=True)
        record["figure"] = str(
            plot_calibration(
                r.thetas,
                r.null_fpr,
                r.mean_k_hat,
                out / "figure4_calibration.png",
                theta_star=r.theta_star,
            )
        )
        (out / "calibration.json").write_text(json.dumps(record, indent=1))
    if as_json:
        typer.echo(json.dumps(record, indent=1))
    else:
        typer.echo(f"theta* = {r.theta_star}  null FPR at theta* = {r.fpr_at_theta_star}")


@app.command("empirical")
def empirical(
    corpus: Path | None = typer.Option(
        None, "--corpus", help="The tenant's documents (.jsonl/.csv/.json); default: synthetic."
    ),
    kind: str = typer.Option("medical", "--kind", help="Synthetic corpus kind without --corpus."),
    n: int = typer.Option(40, "--n", help="Synthetic documents without --corpus."),
    systems: str = typer.Option(
        "rag,noisy_topk,dp_vote,murag",
        "--systems",
        help="Comma-separated: rag, noisy_topk, dp_vote, murag.",
    ),
    epsilon: float = typer.Option(1.0, "--epsilon", help="noisy_topk's claim: its ε_acc."),
    delta: float = typer.Option(1e-5, "--delta", help="noisy_topk's δ_acc."),
    vote_epsilon: float = typer.Option(
        4.0, "--vote-epsilon", help="dp_vote's ε per answer, murag's per query."
    ),
    queries: int = typer.Option(2, "--queries", help="Queries (answers) each account makes."),
    k: int = typer.Option(3, "--k", help="Documents retrieved per query."),
    trials: int = typer.Option(
        20_000, "--trials", help="noisy_topk: accounts attacking on each side."
    ),
    answer_trials: int = typer.Option(
        100, "--answer-trials", help="rag and dp_vote: accounts attacking on each side."
    ),
    channel: str = typer.Option(
        "both", "--channel", help="noisy_topk's release: ids, scores or both."
    ),
    alpha: float = typer.Option(0.05, "--alpha", help="1 − the bound's confidence."),
    seed: int = typer.Option(0, "--seed", help="Seed of the canary, the corpus and the noise."),
    url: str | None = typer.Option(
        None, "--url", help="A running service: play the plan of 'admin canary' against it."
    ),
    plan: Path | None = typer.Option(None, "--plan", help="With --url: the plan file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON to stdout."),
) -> None:
    """A measured lower bound on ε beside each system's claimed ε: a canary document is
    in D and not in its neighbour D′, fresh accounts attack both, and the best threshold
    of their scores gives ε ≥ log((TPR − δ)/FPR) at 1 − alpha confidence (docs/audit.md,
    "Measured ε"). A bound above the claim refutes it (exit 1)."""
    from rich.progress import Progress

    from ragprivacy._validation import check_choice, check_positive_int
    from ragprivacy.corpus import load_corpus, synthesize
    from ragprivacy.eval import CHANNELS, measure_epsilon

    if (url is None) != (plan is None):
        raise typer.BadParameter("--url and --plan go together (the plan of 'admin canary').")
    if url is not None and plan is not None:
        _empirical_service(url, plan, alpha, as_json)
        return
    names = [s.strip() for s in systems.split(",") if s.strip()]
    channels = CHANNELS if channel == "both" else (check_choice("channel", channel, CHANNELS),)
    base = (
        load_corpus(corpus).require_nonempty()
        if corpus is not None
        else synthesize(kind, check_positive_int("n", n), seed=seed)
    )
    with Progress(transient=True, disable=as_json) as bar:
        task = bar.add_task("attacking", total=None)

        def step(system: str, done: int, total: int) -> None:
            bar.update(task, description=f"{system}: accounts", completed=done, total=total)

        results = measure_epsilon(
            base, systems=names, epsilon=epsilon, delta=delta, vote_epsilon=vote_epsilon,
            queries=queries, k=k,
            trials=trials, answer_trials=answer_trials, channels=channels, alpha=alpha,
            seed=seed, progress=step,
        )  # fmt: skip
    record = {
        "settings": {
            "corpus": str(corpus) if corpus else f"synthetic {kind} n={n}",
            "documents": len(base),
            "systems": names,
            "epsilon": epsilon,
            "delta": delta,
            "queries": queries,
            "k": k,
            "trials": trials,
            "answer_trials": answer_trials,
            "channels": list(channels),
            "alpha": alpha,
            "seed": seed,
        },
        "results": [m.to_dict() for m in results],
    }
    if as_json:
        typer.echo(json.dumps(record, indent=1))
    else:
        _print_measured(results, alpha)
    if any(m.refuted for m in results):
        raise typer.Exit(1)


def _empirical_service(url: str, plan_file: Path, alpha: float, as_json: bool) -> None:
    """``audit empirical --url --plan``: the canary game played over HTTP."""
    from rich.progress import Progress

    from ragprivacy.errors import ConfigError
    from ragprivacy.service import run_canary_audit

    try:
        plan = json.loads(plan_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"Cannot read the plan {plan_file}: {exc}.") from None
    with Progress(transient=True, disable=as_json) as bar:
        task = bar.add_task("accounts", total=None)
        result = run_canary_audit(
            url, plan, alpha=alpha,
            progress=lambda d, t: bar.update(task, completed=d, total=t),
        )  # fmt: skip
    if as_json:
        record = {"settings": {"url": url, "alpha": alpha}, "results": [result.to_dict()]}
        typer.echo(json.dumps(record, indent=1))
    else:
        _print_measured([result], alpha)
    if result.refuted:
        raise typer.Exit(1)


def _print_measured(results: list[Any], alpha: float) -> None:
    from rich.console import Console
    from rich.table import Table

    from ragprivacy.eval import summary_rows

    table = Table(title=f"Measured ε ({1 - alpha:.0%} lower bounds) beside the claim")
    for col in ("system", "release", "claimed ε", "measured ε ≥", "TPR at FPR", "accounts × q"):
        table.add_column(col)
    table.add_column("")
    for row in summary_rows(results):
        table.add_row(*row)
    Console().print(table)
