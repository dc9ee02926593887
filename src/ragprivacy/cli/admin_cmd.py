"""``ragprivacy admin --state DIR|URL …``: tenants, documents, accounts, keys and audit windows.

Works while the server runs on the same state directory (every change is one SQLite
transaction). An API key is printed once, as the last line of ``key create``; it is never
stored or shown again.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from ragprivacy.service import ServiceState, Window

__all__ = ["app"]

app = typer.Typer(
    help="Administer a service's state: tenants, documents, accounts, keys, windows.",
    no_args_is_help=True,
)
tenant_app = typer.Typer(
    help="Tenants (one index and one privacy mode each).", no_args_is_help=True
)
docs_app = typer.Typer(help="A tenant's documents.", no_args_is_help=True)
account_app = typer.Typer(help="Accounts and their privacy budgets.", no_args_is_help=True)
key_app = typer.Typer(help="API keys.", no_args_is_help=True)
window_app = typer.Typer(help="Audit windows.", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")
app.add_typer(docs_app, name="docs")
app.add_typer(account_app, name="account")
app.add_typer(key_app, name="key")
app.add_typer(window_app, name="window")


@app.callback()
def admin(
    ctx: typer.Context,
    state: str = typer.Option(
        ..., "--state", help="The service's state directory, or a PostgreSQL URL."
    ),
    identity_key: Path | None = typer.Option(
        None,
        "--identity-key",
        help="The identity key file of a PostgreSQL state (required there; created with "
        "mode 0600 at first use).",
    ),
    embedder: str | None = typer.Option(
        None, "--embedder", help="Embedder spec for a new state (default: hashing)."
    ),
) -> None:
    """Administer the service whose state lives in --state."""
    from ragprivacy.service import ServiceState

    ctx.obj = ServiceState(state, embedder=embedder, identity_key=identity_key)
    ctx.call_on_close(ctx.obj.close)  # a database state's connections


def _state(ctx: typer.Context) -> ServiceState:
    from ragprivacy.service import ServiceState

    state = ctx.obj
    assert isinstance(state, ServiceState)  # set by the admin callback
    return state


@tenant_app.command("create")
def tenant_create(
    ctx: typer.Context,
    tenant: str = typer.Argument(..., help="Tenant id."),
    mode: str = typer.Option(
        "noisy_topk",
        "--mode",
        help="noisy_topk (documents by Gaussian noise-then-select, audited), or a voting "
        "mode that releases only DP-voted answers: dp_vote, murag or murag_ada.",
    ),
    k: int = typer.Option(5, "--k", help="Documents per query (K)."),
    eps_q: float | None = typer.Option(
        None, "--eps-q", help="Voting modes: each answer's ε (default 1)."
    ),
    max_retrievals: int | None = typer.Option(
        None,
        "--max-retrievals",
        help="murag/murag_ada: M, each document's lifetime budget is M·ε_q (default 10).",
    ),
    tau: float | None = typer.Option(
        None, "--tau", help="murag: the relevance threshold τ (default 0.5)."
    ),
    logprobs: bool = typer.Option(
        False, "--logprobs", help="noisy_topk: answers may carry log-probabilities."
    ),
    inline_vectors: bool = typer.Option(
        False,
        "--inline-vectors",
        help="PostgreSQL state: keep the embeddings in the documents' rows, loaded into "
        "each replica's memory, instead of the tenant's own pgvector table.",
    ),
) -> None:
    """Create a tenant."""
    state = _state(ctx)
    state.create_tenant(
        tenant,
        mode=mode,
        k=k,
        epsilon_q=eps_q,
        max_retrievals=max_retrievals,
        tau=tau,
        logprobs=logprobs,
        vector_table=False if inline_vectors else None,
    )
    typer.echo(f"tenant {tenant}: {_describe(state.tenants()[tenant])}")


def _describe(info: dict[str, object]) -> str:
    extra = [f"{k}={v}" for k, v in info.items() if k not in ("mode", "k", "documents")]
    return ", ".join([f"mode {info['mode']}", f"K = {info['k']}", *extra])


@tenant_app.command("list")
def tenant_list(ctx: typer.Context) -> None:
    """List tenants with their document counts."""
    for t, info in _state(ctx).tenants().items():
        typer.echo(f"{t}\t{_describe(info)}\t{info['documents']} documents")


@docs_app.command("add")
def docs_add(
    ctx: typer.Context,
    tenant: str = typer.Argument(..., help="Tenant id."),
    file: Path = typer.Argument(..., help="A corpus file (.jsonl, .json or .csv)."),
) -> None:
    """Add documents (idempotent by id: ids already stored are skipped; a record without
    an id is named by its text, so a document added twice is skipped, never lost)."""
    from rich.progress import Progress

    from ragprivacy.corpus import load_corpus

    state = _state(ctx)
    if tenant not in state.tenants():  # before reading a possibly large file
        from ragprivacy.errors import ConfigError

        raise ConfigError(f"Unknown tenant {tenant!r}; create it with 'tenant create'.")
    corpus = load_corpus(file, ids="content")
    with Progress(transient=True) as bar:
        task = bar.add_task(f"embedding {len(corpus)} documents", total=len(corpus))
        added, skipped = state.add_documents(
            tenant, list(corpus), progress=lambda n: bar.advance(task, n)
        )
    typer.echo(f"tenant {tenant}: {added} added, {skipped} already there")


@docs_app.command("remove")
def docs_remove(
    ctx: typer.Context,
    tenant: str = typer.Argument(..., help="Tenant id."),
    ids: list[str] = typer.Argument(None, help="Document ids to erase."),
    ids_file: Path | None = typer.Option(
        None, "--ids-file", help="A file of document ids to erase, one per line."
    ),
) -> None:
    """Erase documents (an erasure request): their texts and embeddings leave the state
    at once, or — when the open window committed the tenant — when it closes (it keeps
    serving what it committed until then; 'window rotate' closes it now)."""
    from ragprivacy.errors import ConfigError

    wanted = list(ids or [])
    if ids_file is not None:
        try:
            text = ids_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{ids_file}: {exc.strerror or exc}.") from None
        wanted += [line.strip() for line in text.splitlines() if line.strip()]
    count, gone = _state(ctx).remove_documents(tenant, wanted)
    if gone:
        typer.echo(f"tenant {tenant}: {count} document(s) erased")
    else:
        typer.echo(
            f"tenant {tenant}: {count} document(s) will be erased when the open window "
            "closes (it committed them and serves them until then; 'window rotate' closes "
            "it now)"
        )


@tenant_app.command("delete")
def tenant_delete(
    ctx: typer.Context,
    tenant: str = typer.Argument(..., help="Tenant id."),
    yes: bool = typer.Option(False, "--yes", help="Confirm: the tenant cannot be restored."),
) -> None:
    """Delete a tenant with its documents and accounts: their keys stop working at once;
    the rest goes at once, or when the open window that committed it closes."""
    from ragprivacy.errors import ConfigError

    if not yes:
        raise ConfigError(
            f"Deleting tenant {tenant!r} erases its documents and accounts; add --yes."
        )
    accounts, gone = _state(ctx).delete_tenant(tenant)
    revoked = f"; the keys of {', '.join(accounts)} are revoked" if accounts else ""
    when = "deleted" if gone else "will be deleted when the open window closes"
    typer.echo(f"tenant {tenant} {when}{revoked}")


@account_app.command("create")
def account_create(
    ctx: typer.Context,
    tenant: str = typer.Argument(..., help="The account's tenant."),
    account: str = typer.Argument(..., help="Account id."),
    eps: float = typer.Option(..., "--eps", help="ε_acc over one window."),
    delta: float = typer.Option(..., "--delta", help="δ_acc over one window."),
    rate_limit: int = typer.Option(..., "--rate-limit", help="r: queries per window."),
) -> None:
    """Create an account under a tenant (it can query from the next window it is in)."""
    _state(ctx).create_account(tenant, account, epsilon=eps, delta=delta, rate_limit=rate_limit)
    typer.echo(f"account {account} of {tenant}: ε = {eps:g}, δ = {delta:g}, r = {rate_limit}")


@account_app.command("update")
def account_update(
    ctx: typer.Context,
    account: str = typer.Argument(..., help="Account id."),
    eps: float | None = typer.Option(None, "--eps", help="New ε_acc over one window."),
    delta: float | None = typer.Option(None, "--delta", help="New δ_acc over one window."),
    rate_limit: int | None = typer.Option(None, "--rate-limit", help="New r per window."),
) -> None:
    """Change an account's policy; it holds from the next window (the open one keeps what
    it committed)."""
    p = _state(ctx).update_account(account, epsilon=eps, delta=delta, rate_limit=rate_limit)
    typer.echo(
        f"account {account}: ε = {p['epsilon']:g}, δ = {p['delta']:g}, r = {p['rate_limit']} "
        "from the next window"
    )


@account_app.command("disable")
def account_disable(
    ctx: typer.Context, account: str = typer.Argument(..., help="Account id.")
) -> None:
    """Revoke every key of the account: its requests are refused from now on ('key
    create' enables it again)."""
    ids = _state(ctx).revoke_keys(account)
    typer.echo(f"account {account} disabled: {len(ids)} key(s) revoked")


@account_app.command("list")
def account_list(ctx: typer.Context) -> None:
    """List accounts and their policies."""
    for a, p in _state(ctx).accounts().items():
        typer.echo(
            f"{a}\t{p['tenant']}\teps={p['epsilon']:g}\tdelta={p['delta']:g}\tr={p['rate_limit']}"
        )


@key_app.command("create")
def key_create(
    ctx: typer.Context, account: str = typer.Argument(..., help="The key's account.")
) -> None:
    """Create an API key; the key is printed once, as the last line."""
    key = _state(ctx).create_key(account)
    typer.echo(f"key id {key.key_id} for account {account} (shown once; store it now):")
    typer.echo(key.token)


@key_app.command("list")
def key_list(
    ctx: typer.Context,
    account: str | None = typer.Argument(None, help="Only this account's keys."),
) -> None:
    """List API keys: id, account, created, and revoked or valid (never a secret)."""
    import datetime as dt

    def when(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")

    for k in _state(ctx).keys(account):
        status = "valid" if k["revoked"] is None else f"revoked {when(k['revoked'])}"
        typer.echo(f"{k['key_id']}\t{k['account']}\tcreated {when(k['created'])}\t{status}")


@key_app.command("revoke")
def key_revoke(ctx: typer.Context, key_id: str = typer.Argument(..., help="Key id.")) -> None:
    """Revoke an API key (its requests are refused from now on)."""
    account = _state(ctx).revoke_key(key_id)
    typer.echo(f"key {key_id} of account {account} revoked")


@key_app.command("rotate")
def key_rotate(
    ctx: typer.Context, account: str = typer.Argument(..., help="The account whose keys rotate.")
) -> None:
    """Give an account a new key and revoke every one it had (a leaked or aging key);
    the new key is printed once, as the last line."""
    state = _state(ctx)
    key = state.create_key(account)
    revoked = state.revoke_keys_except(account, key.key_id)
    typer.echo(
        f"key id {key.key_id} for account {account} (shown once; store it now); "
        f"{len(revoked)} earlier key(s) revoked:"
    )
    typer.echo(key.token)


def _say_open(w: Window) -> None:
    tenants = ", ".join(f"{t}: {n}" for t, n in w.snapshot["tenants"].items())
    typer.echo(f"window {w.window_id} open ({tenants} documents committed)")


@window_app.command("open")
def window_open(
    ctx: typer.Context,
    window_id: str | None = typer.Option(None, "--id", help="Window id (default W<n>)."),
) -> None:
    """Open the next audit window: snapshot, seed and signed commitments."""
    from ragprivacy.service import open_window

    _say_open(open_window(_state(ctx), window_id))


@window_app.command("rotate")
def window_rotate(
    ctx: typer.Context,
    export_auditor: Path | None = typer.Option(
        None,
        "--export-auditor",
        help="Write the closed window's auditor package to DIR/<window id> (secret).",
    ),
) -> None:
    """Close the open window (exporting its auditor package) and open the next; run it
    from a scheduler (cron, a systemd timer) once per period."""
    from ragprivacy.service import rotate_window

    closed, package, opened = rotate_window(_state(ctx), export_auditor)
    if closed is not None:
        typer.echo(f"window {closed.window_id} closed: ĉ = {(closed.coalition or {}).get('size')}")
    if package is not None:
        typer.echo(
            f"auditor package -> {package} (contains the window seed: give it to the auditor only)"
        )
    _say_open(opened)


@window_app.command("status")
def window_status_cmd(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="Print the status as JSON."),
) -> None:
    """The open window: its age, its ledger's records and each account's use."""
    import json

    from ragprivacy.service import window_status

    st = window_status(_state(ctx))
    if as_json:
        typer.echo(json.dumps(st, indent=1))
        return
    hours = st["age_s"] / 3600
    typer.echo(f"window {st['window_id']} open for {hours:.1f} h, {st['records']} records")
    for account, use in st["accounts"].items():
        typer.echo(f"{account}\t{use['tenant']}\t{use['used']} of {use['limit']}")


@window_app.command("close")
def window_close(
    ctx: typer.Context,
    export_auditor: Path | None = typer.Option(
        None, "--export-auditor", help="Write the trusted auditor's package here (secret)."
    ),
) -> None:
    """Close the open window (the coalition claim is certified)."""
    from ragprivacy.service import close_window
    from ragprivacy.service import export_auditor as export

    state = _state(ctx)
    w = close_window(state)
    typer.echo(f"window {w.window_id} closed: ĉ = {(w.coalition or {}).get('size')}")
    if export_auditor is not None:
        out = export(state, w.window_id, export_auditor)
        typer.echo(
            f"auditor package -> {out} (contains the window seed: give it to the auditor only)"
        )
    erased = state.apply_erasures()  # after the export, which reads the committed documents
    if erased:
        typer.echo(f"erased what was pending for: {', '.join(sorted(erased))}")


@app.command("operator-key")
def operator_key(ctx: typer.Context) -> None:
    """Create the operator key of the status page (GET /operator), replacing any earlier
    one; printed once, as the last line (only its hash is stored)."""
    key = _state(ctx).create_operator_key()
    typer.echo("operator key (shown once; send it as 'Authorization: Bearer KEY'):")
    typer.echo(key)


@app.command("backup")
def backup(
    ctx: typer.Context,
    dest: Path = typer.Argument(..., help="A new directory to copy the state into."),
) -> None:
    """Copy a state directory into DEST while the service runs (SQLite's online backup of
    each database, the ledgers first; DEST appears only once complete). DEST holds the
    seeds and the identity key: keep it as secret as the state. To restore, stop the
    service and serve DEST (or move it into place)."""
    copied = _state(ctx).backup(dest)
    typer.echo(f"backed up {len(copied)} file(s) -> {dest} (secret: it holds the seeds and keys)")


@app.command("canary")
def canary(
    ctx: typer.Context,
    tenant: str = typer.Argument(..., help="The noisy_topk tenant whose neighbours to build."),
    out: Path = typer.Option(..., "--out", help="The plan file to write (it holds keys)."),
    accounts: int = typer.Option(30, "--accounts", help="Attacking accounts on each side."),
    epsilon: float = typer.Option(1.0, "--eps", help="Each account's ε_acc (the claim)."),
    delta: float = typer.Option(1e-6, "--delta", help="Each account's δ_acc."),
    rate_limit: int = typer.Option(2, "--rate-limit", help="Each account's r."),
    seed: int = typer.Option(0, "--seed", help="Seed of the canary's name and code."),
) -> None:
    """Set up a measured-ε audit of TENANT over HTTP: two neighbouring copies of it (a
    canary in one, a filler in the other) with fresh accounts, and the plan 'ragprivacy
    audit empirical --url URL --plan FILE' plays once a window has opened."""
    from ragprivacy.service import setup_canary_audit

    plan = setup_canary_audit(
        _state(ctx), tenant, out, accounts=accounts, epsilon=epsilon, delta=delta,
        rate_limit=rate_limit, seed=seed,
    )  # fmt: skip
    sides = ", ".join(v["tenant"] for v in plan["sides"].values())
    typer.echo(f"tenants {sides}: {accounts} accounts each; plan -> {out} (holds keys: 0600)")
    typer.echo("open a window ('window open' or 'window rotate'), then run the plan")
