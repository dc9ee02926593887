"""A real PostgreSQL server with pgvector for the tests, from PyPI's ``pgserver`` wheel.

``pgserver`` bundles PostgreSQL 16 binaries and the pgvector extension under its
``pginstall`` folder. We use only those binaries (``initdb``, ``pg_ctl``), not its
``get_server`` helper: that helper registers an ``atexit`` hook, keeps a global lock file
in the user's runtime folder and, as root, makes *every* folder above the data directory
and above the binaries group/other-readable, up to ``/``.

PostgreSQL refuses to run as root ("root" execution of the PostgreSQL server is not
permitted). ``pgserver`` copes by running its commands as a system user ``pgserver`` it
creates with ``useradd``; we do the same, more narrowly: as root, the server runs as that
system user (created with ``useradd --system`` when missing, as on a clean CI machine);
its data directory and Unix socket live in a private folder under the system temporary
directory owned by that user, and the bundled binaries are used in place when every
folder above them is traversable by others (pip installs them so), or else copied into
that private folder. As any other user, the server runs as that user in ``directory``.

The server listens on a Unix socket only (no TCP port to collide with other runs), trusts
local connections, and runs with ``fsync=off`` (test data need not survive a crash).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = ["fresh_database", "start_postgres"]

SYSTEM_USER = "pgserver"  # the user pgserver itself creates when run as root
_TIMEOUT = 120


def _bin_dir() -> Path:
    """The bundled PostgreSQL's ``bin`` folder (found without importing ``pgserver``,
    whose import already touches the user's runtime folder)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("The 'pgserver' package is not installed (the postgres extra).")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _ensure_user(name: str) -> pwd.struct_passwd:
    """The system user ``name``, created when missing. Several test processes (pytest-xdist
    workers) may get here at once: ``useradd`` then fails for all but one of them (the user
    exists, or ``/etc/passwd`` is locked for a moment), and the others retry and find it."""
    for attempt in range(20):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=False,
            capture_output=True,
            text=True,
        )
        if made.returncode == 0:
            return pwd.getpwnam(name)
        if attempt == 19:
            raise RuntimeError(f"useradd {name} failed ({made.returncode}): {made.stderr.strip()}")
        time.sleep(0.25)
    raise AssertionError("unreachable")


def _traversable(path: Path) -> bool:
    """Whether every folder from ``/`` down to ``path`` lets others in (o+x)."""
    return all(folder.stat().st_mode & stat.S_IXOTH for folder in [path, *path.parents])


def _run(args: list[str], user: pwd.struct_passwd | None, log: Path | None = None) -> None:
    kwargs: dict[str, object] = {}
    if user is not None:
        kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    out = subprocess.run(
        args,
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=_TIMEOUT,
        **kwargs,  # type: ignore[arg-type]
    )
    if out.returncode != 0:
        tail = log.read_text()[-2000:] if log is not None and log.exists() else ""
        raise RuntimeError(
            f"{Path(args[0]).name} failed ({out.returncode}): {out.stderr.strip()} {tail}"
        )


def start_postgres(directory: str | Path) -> tuple[str, Callable[[], None]]:
    """Start a fresh PostgreSQL server with pgvector; return its URL and a stop function.

    The URL names the ``postgres`` database as the superuser ``postgres`` over a Unix
    socket. ``stop()`` shuts the server down (fast mode) and removes what was created
    outside ``directory``; calling it twice is harmless.
    """
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    bin_dir = _bin_dir()
    user = _ensure_user(SYSTEM_USER) if os.geteuid() == 0 else None
    private: Path | None = None
    if user is None:
        run_dir = directory
    else:
        # A short private folder the server's user owns (pytest's own folders are 0700).
        private = Path(tempfile.mkdtemp(prefix="ragprivacy-pg-"))
        os.chmod(private, 0o755)
        run_dir = private
        if not _traversable(bin_dir):
            # Keep the wheel's layout: the binaries find their shared libraries through
            # the RPATH $ORIGIN/../../../pgserver.libs.
            site = bin_dir.parents[2]
            copy = private / "site"
            shutil.copytree(site / "pgserver" / "pginstall", copy / "pgserver" / "pginstall")
            if (site / "pgserver.libs").is_dir():
                shutil.copytree(site / "pgserver.libs", copy / "pgserver.libs")
            bin_dir = copy / "pgserver" / "pginstall" / "bin"
        os.chown(private, user.pw_uid, user.pw_gid)
    data, log = run_dir / "data", run_dir / "postgres.log"
    try:
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
                "-U",
                "postgres",
            ],
            user,
        )
        opts = f"-c listen_addresses='' -k {run_dir} -c fsync=off -c full_page_writes=off"
        _run(
            [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-o", opts, "start"],
            user,
            log,
        )
    except BaseException:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
        raise
    stopped = False

    def stop() -> None:
        nonlocal stopped
        if stopped:
            return
        stopped = True
        try:
            _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], user, log)
        finally:
            if private is not None:
                if log.exists():
                    shutil.copy(log, directory / "postgres.log")
                shutil.rmtree(private, ignore_errors=True)

    url = f"postgresql://postgres@/postgres?host={quote(str(run_dir), safe='/')}"
    return url, stop


def fresh_database(url: str, name: str) -> str:
    """Create the empty database ``name`` (with ``vector``) on the server of ``url`` and
    return its URL (for tests that need a state of their own)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    parts = urlsplit(url)
    new = urlunsplit(parts._replace(path=f"/{quote(name)}"))
    with psycopg.connect(new, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return new
