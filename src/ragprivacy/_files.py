"""Files that hold secrets: created with their final mode, never chmodded after writing.

A file written with the default mode and narrowed afterwards is readable by every local
user for the moment in between (and for good if the process dies there), whatever the
mode of the directory it lands in when that directory was made by someone else. So a
secret file is written to a new temporary file opened with mode 0600 by ``os.open`` in
the same directory, synced, then moved into place: readers see the old file or the
whole new one, and nobody else ever sees either.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["write_private"]


def write_private(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` with mode 0600 from the start."""
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    # mkstemp opens with O_CREAT | O_EXCL and mode 0600
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return p
