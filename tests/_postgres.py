"""A real PostgreSQL server (with pgvector) for the tests, from PyPI's ``pgserver``.

``pgserver`` bundles the PostgreSQL binaries and the ``vector`` extension. PostgreSQL
refuses to run as root; as root, pgserver creates a system user ``pgserver`` (``useradd``),
makes the data directory's parent folders traversable and runs ``initdb`` and the server
as that user, so the same fixture works on a developer's machine and on a CI machine
that runs as root. The server listens on a Unix socket only (no TCP port to collide).
"""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path

__all__ = ["fresh_database", "start_postgres"]


def start_postgres(directory: str | Path) -> tuple[str, Callable[[], None]]:
    """Start a PostgreSQL server whose data lives in ``directory`` (created) and return
    (the URL of a fresh database with the ``vector`` extension created, a function that
    stops the server and deletes its data)."""
    import psycopg

    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, root shells)
        warnings.simplefilter("ignore")
        import pgserver

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        # the server runs as the 'pgserver' user: let it enter the folder
        root.chmod(root.stat().st_mode | stat.S_IXOTH | stat.S_IROTH)
    server = pgserver.get_server(root / "pgdata", cleanup_mode="delete")
    with psycopg.connect(server.get_uri(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE ragprivacy_test")
    url = server.get_uri("ragprivacy_test")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def stop() -> None:
        server.cleanup()

    return url, stop


def fresh_database(url: str, name: str) -> str:
    """Create the empty database ``name`` (with ``vector``) on the server of ``url`` and
    return its URL (tests that need a state of their own)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    new = url.replace("/ragprivacy_test?", f"/{name}?")
    with psycopg.connect(new, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return new
