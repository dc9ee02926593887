"""``ragprivacy serve --state DIR|URL``: the HTTP service (the ``service`` extra)."""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    state: str = typer.Option(
        ...,
        "--state",
        help="The service's state directory, or a PostgreSQL URL (postgresql://...) that "
        "several replicas share.",
    ),
    identity_key: Path | None = typer.Option(
        None,
        "--identity-key",
        help="The identity key file of a PostgreSQL state (required there; created with "
        "mode 0600 at first use; the same file on every replica).",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    workers: int = typer.Option(1, "--workers", help="Worker processes."),
    generator: str = typer.Option(
        "reference",
        "--generator",
        help="reference, smollm2, openai:MODEL@URL, hf:PATH or gguf:PATH.",
    ),
    doc_tokens: int = typer.Option(
        1024,
        "--doc-tokens",
        help="Each retrieved document's share of an answer's prompt, in UTF-8 bytes (an "
        "upper bound on its tokens): documents are cut and padded to it, so a prompt's size "
        "does not depend on which documents were retrieved.",
    ),
    context_tokens: int | None = typer.Option(
        None,
        "--context-tokens",
        help="The generator's context window in tokens: a query whose prompt could overflow "
        "it is refused before retrieval, for nothing (set it for an openai: upstream).",
    ),
    auth_failures_per_client: int = typer.Option(
        20,
        "--auth-failures-per-client",
        help="Failed key checks one client address may make per minute (each costs an "
        "scrypt hash); more are refused with 429 before any hash. Keys already verified "
        "are never held back.",
    ),
    auth_failures_overall: int = typer.Option(
        120,
        "--auth-failures-overall",
        help="Failed key checks all clients together may make per minute, per worker.",
    ),
    max_inflight: int = typer.Option(
        8,
        "--max-inflight",
        help="Requests one account may have in progress at once, per worker; more are "
        "refused with 429 (nothing spent), so no account can hold every thread.",
    ),
    api_docs: bool = typer.Option(
        False,
        "--api-docs",
        help="Serve the OpenAPI schema and its pages (/openapi.json, /docs, /redoc); off by "
        "default, as they are not part of the API.",
    ),
) -> None:
    """Serve private retrieval and answers for the accounts in --state, with public audit
    endpoints (see docs/service.md)."""
    import uvicorn

    from ragprivacy._postgres import is_postgres_url
    from ragprivacy.errors import ConfigError
    from ragprivacy.generate import PromptBudget, create_generator
    from ragprivacy.service import FailedAuthLimit, InFlightLimit, ServiceState

    if not 1 <= port <= 65535:
        raise ConfigError(f"--port must be in [1, 65535]; got {port}.")
    if not 1 <= workers <= 64:
        raise ConfigError(f"--workers must be in [1, 64]; got {workers}.")
    # refuse a missing state (or an unreachable database) before binding a port
    ServiceState(state, create=False, identity_key=identity_key).close()
    create_generator(generator)  # and an unknown generator
    FailedAuthLimit(per_client=auth_failures_per_client, overall=auth_failures_overall)
    InFlightLimit(max_inflight)
    PromptBudget(doc_tokens=doc_tokens, context_tokens=context_tokens)  # and a bad budget
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        typer.echo(f"warning: listening on {host}, reachable from other machines", err=True)
    os.environ["RAGPRIVACY_STATE"] = state if is_postgres_url(state) else str(Path(state).resolve())
    if identity_key is not None:
        os.environ["RAGPRIVACY_IDENTITY_KEY"] = str(identity_key.resolve())
    os.environ["RAGPRIVACY_GENERATOR"] = generator
    os.environ["RAGPRIVACY_API_DOCS"] = "1" if api_docs else "0"
    os.environ["RAGPRIVACY_AUTH_FAILURES_PER_CLIENT"] = str(auth_failures_per_client)
    os.environ["RAGPRIVACY_AUTH_FAILURES_OVERALL"] = str(auth_failures_overall)
    os.environ["RAGPRIVACY_MAX_INFLIGHT"] = str(max_inflight)
    os.environ["RAGPRIVACY_DOC_TOKENS"] = str(doc_tokens)
    if context_tokens is None:
        os.environ.pop("RAGPRIVACY_CONTEXT_TOKENS", None)
    else:
        os.environ["RAGPRIVACY_CONTEXT_TOKENS"] = str(context_tokens)
    uvicorn.run(
        "ragprivacy.service.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="info",
        access_log=False,  # request lines carry no secrets, but keep logs to what we decide
    )
