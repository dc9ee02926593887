"""``ragprivacy serve --state DIR|URL``: the HTTP service (the ``service`` extra)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import tempfile
from pathlib import Path

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    ctx: typer.Context,
    state: str | None = typer.Option(
        None,
        "--state",
        help="The service's state directory, or a PostgreSQL URL (postgresql://...) that "
        "several replicas share (required, here or in --config).",
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
    max_inflight_total: int = typer.Option(
        32,
        "--max-inflight-total",
        help="Private requests of all accounts running at once, per worker; more wait "
        "their turn in arrival order, holding no thread. The worker keeps 8 threads more "
        "for the public audit endpoints and health checks.",
    ),
    api_docs: bool = typer.Option(
        False,
        "--api-docs",
        help="Serve the OpenAPI schema and its pages (/openapi.json, /docs, /redoc); off by "
        "default, as they are not part of the API.",
    ),
    rotate_every: str | None = typer.Option(
        None,
        "--rotate-every",
        help="Close the open window once it is this old (1d, 6h, 30m, ...), export its "
        "auditor package (--export-auditor) and open the next, by itself; a spent budget's "
        "429 then says in Retry-After when the next window opens. Run it on one replica.",
    ),
    export_auditor: Path | None = typer.Option(
        None,
        "--export-auditor",
        help="With --rotate-every: where each closed window's auditor package goes "
        "(DIR/<window id>; it holds the window seed: keep it for the auditor).",
    ),
    log_level: str = typer.Option(
        "info", "--log-level", help="critical, error, warning, info or debug."
    ),
    access_log: bool = typer.Option(
        True,
        "--access-log/--no-access-log",
        help="One JSON line per request (method, path, status, ms, client address; never a "
        "header, body, account or query text).",
    ),
    header_timeout: float = typer.Option(
        10.0,
        "--header-timeout",
        help="Seconds a new connection has to send its first request's headers; a slower "
        "one is closed (a client trickling headers cannot hold connections).",
    ),
    graceful_timeout: int = typer.Option(
        30,
        "--graceful-timeout",
        help="On SIGTERM, seconds to let requests in progress finish before the workers "
        "stop anyway (new connections are refused at once).",
    ),
    metrics: bool = typer.Option(
        False,
        "--metrics",
        help="Serve GET /metrics for Prometheus (requests, latency, refusals by reason, "
        "privacy spent, the open window's records and age; no account or query in any "
        "label). Off by default: request counts say how busy the service is.",
    ),
    ssl_certfile: Path | None = typer.Option(
        None, "--ssl-certfile", help="Serve HTTPS with this certificate (PEM)."
    ),
    ssl_keyfile: Path | None = typer.Option(
        None, "--ssl-keyfile", help="The certificate's private key (PEM)."
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        help='A TOML file giving any of these options by name (state = "state", port = '
        '8000, rotate-every = "1d", ...); options on the command line win.',
    ),
) -> None:
    """Serve private retrieval and answers for the accounts in --state, with public audit
    endpoints (see docs/service.md)."""
    import uvicorn

    from ragprivacy._postgres import is_postgres_url
    from ragprivacy._validation import check_choice
    from ragprivacy.errors import ConfigError
    from ragprivacy.generate import PromptBudget, create_generator
    from ragprivacy.service import (
        FailedAuthLimit,
        InFlightLimit,
        ServiceState,
        WindowSchedule,
        parse_period,
    )

    given = {k: v for k, v in ctx.params.items() if k != "config"}
    if config is not None:
        given = _with_config(ctx, given, config)
    state = given["state"]
    if not state:
        raise ConfigError('Give the state: --state DIR|URL, or state = "..." in --config.')
    host, port, workers = str(given["host"]), int(given["port"]), int(given["workers"])
    identity_key = _path(given["identity_key"])
    log_level = check_choice(
        "--log-level", str(given["log_level"]), ("critical", "error", "warning", "info", "debug")
    )
    if not 1 <= port <= 65535:
        raise ConfigError(f"--port must be in [1, 65535]; got {port}.")
    if not 1 <= workers <= 64:
        raise ConfigError(f"--workers must be in [1, 64]; got {workers}.")
    certfile, keyfile = _path(given["ssl_certfile"]), _path(given["ssl_keyfile"])
    if (certfile is None) != (keyfile is None):
        raise ConfigError("HTTPS needs both --ssl-certfile and --ssl-keyfile.")
    for tls in (certfile, keyfile):
        if tls is not None and not tls.is_file():
            raise ConfigError(f"{tls}: no such file.")
    head = float(given["header_timeout"])
    if not 0.1 <= head <= 600:
        raise ConfigError(f"--header-timeout must be in [0.1, 600] seconds; got {head:g}.")
    graceful = int(given["graceful_timeout"])
    if not 0 <= graceful <= 3600:
        raise ConfigError(f"--graceful-timeout must be in [0, 3600] seconds; got {graceful}.")
    period = None if given["rotate_every"] is None else parse_period(given["rotate_every"])
    export = _path(given["export_auditor"])
    if export is not None and period is None:
        raise ConfigError("--export-auditor goes with --rotate-every (the schedule exports).")
    # refuse a missing state (or an unreachable database) before binding a port
    ServiceState(state, create=False, identity_key=identity_key).close()
    create_generator(given["generator"])  # and an unknown generator
    FailedAuthLimit(
        per_client=given["auth_failures_per_client"], overall=given["auth_failures_overall"]
    )
    InFlightLimit(given["max_inflight"], given["max_inflight_total"])
    PromptBudget(doc_tokens=given["doc_tokens"], context_tokens=given["context_tokens"])
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        typer.echo(f"warning: listening on {host}, reachable from other machines", err=True)
    env = {
        "RAGPRIVACY_STATE": state if is_postgres_url(state) else str(Path(state).resolve()),
        "RAGPRIVACY_IDENTITY_KEY": str(identity_key.resolve()) if identity_key else None,
        "RAGPRIVACY_GENERATOR": given["generator"],
        "RAGPRIVACY_API_DOCS": "1" if given["api_docs"] else "0",
        "RAGPRIVACY_AUTH_FAILURES_PER_CLIENT": str(given["auth_failures_per_client"]),
        "RAGPRIVACY_AUTH_FAILURES_OVERALL": str(given["auth_failures_overall"]),
        "RAGPRIVACY_MAX_INFLIGHT": str(given["max_inflight"]),
        "RAGPRIVACY_MAX_INFLIGHT_TOTAL": str(given["max_inflight_total"]),
        "RAGPRIVACY_DOC_TOKENS": str(given["doc_tokens"]),
        "RAGPRIVACY_CONTEXT_TOKENS": None
        if given["context_tokens"] is None
        else str(given["context_tokens"]),
        "RAGPRIVACY_ROTATE_EVERY": None if period is None else str(period),
        "RAGPRIVACY_ACCESS_LOG": "1" if given["access_log"] else "0",
        "RAGPRIVACY_METRICS": "1" if given["metrics"] else "0",
        "RAGPRIVACY_HEADER_TIMEOUT": str(head),
    }
    shared = None
    if given["metrics"] and workers > 1:  # one set of counters for every worker
        shared = tempfile.mkdtemp(prefix="ragprivacy-metrics-")
        env["PROMETHEUS_MULTIPROC_DIR"] = shared
    for name, value in env.items():  # the workers build their app from these
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    schedule = None
    if period is not None:
        schedule = WindowSchedule(
            lambda: ServiceState(state, create=False, identity_key=identity_key), period, export
        ).start()
    from ragprivacy.service import HeaderTimeoutH11

    HeaderTimeoutH11.header_timeout = head  # this process; the workers read the variable
    try:
        uvicorn.run(
            "ragprivacy.service.app:app_from_env",
            http=HeaderTimeoutH11,
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            log_config=_log_config(log_level),
            access_log=False,  # uvicorn's line holds the query string; ours does not
            timeout_graceful_shutdown=graceful,
            ssl_certfile=str(certfile) if certfile else None,
            ssl_keyfile=str(keyfile) if keyfile else None,
        )
    finally:
        if schedule is not None:
            schedule.stop()
        if shared is not None:
            shutil.rmtree(shared, ignore_errors=True)


def _path(value: object) -> Path | None:
    return None if value is None else Path(str(value))


def _with_config(ctx: typer.Context, given: dict[str, object], config: Path) -> dict[str, object]:
    """``given`` with the TOML file's values for every option not on the command line."""
    import tomllib

    from ragprivacy._validation import check_choice
    from ragprivacy.errors import ConfigError

    try:
        values = tomllib.loads(config.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{config}: {exc.strerror or exc}.") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{config}: not TOML: {exc}.") from None
    out = dict(given)
    for key, value in values.items():
        name = check_choice(f"{config} key", key.replace("-", "_"), sorted(given))
        source = ctx.get_parameter_source(name)
        if source is not None and source.name == "COMMANDLINE":
            continue  # the command line wins
        out[name] = value
    return out


def _log_config(level: str) -> dict[str, object]:
    """uvicorn's logging, with the service's loggers beside it: ``ragprivacy`` (refusals,
    failures, the schedule) and ``ragprivacy.access`` (one JSON line per request)."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    cfg: dict[str, object] = copy.deepcopy(LOGGING_CONFIG)
    formatters = cfg["formatters"]
    handlers = cfg["handlers"]
    loggers = cfg["loggers"]
    assert isinstance(formatters, dict) and isinstance(handlers, dict)
    assert isinstance(loggers, dict)
    formatters["line"] = {"format": "%(message)s"}
    handlers["line"] = {
        "formatter": "line",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stdout",
    }
    upper = level.upper()
    loggers["ragprivacy"] = {"handlers": ["default"], "level": upper, "propagate": False}
    loggers["ragprivacy.access"] = {"handlers": ["line"], "level": upper, "propagate": False}
    return cfg
