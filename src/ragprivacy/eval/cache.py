"""An on-disk cache of generator calls, so a rerun or a crash loses no finished work.

Entries are keyed by SHA-256 over the backend name, its settings, the call (method,
prompt, arguments). The store is SQLite in WAL mode, safe for the several processes of a
sweep. A cached stochastic generator returns the first draw it made for a prompt.

On a Ray cluster (``executor: ray``) the file stays with the run on the machine that
started it: each worker process answers from an in-memory copy of the store as the run
found it (:meth:`GenerationCache.snapshot`, :meth:`GenerationCache.in_memory`) and sends
the entries it adds back to that machine, which writes them into the file
(:attr:`GenerationCache.on_put`); see :mod:`ragprivacy.eval.ray_executor`.

The store is kept hand-written (about 40 lines over the standard library's ``sqlite3``)
rather than taken from a caching library such as ``diskcache``: a batch of prompts is
looked up in one ``SELECT … WHERE key IN (…)`` per 500 keys and written in one
transaction, where a key-value cache API costs a round trip per key, and it opens through
the shared :func:`~ragprivacy._sqlite.connect_wal`, which turns a directory or a
non-SQLite file into a one-line error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragprivacy._sqlite import connect_wal
from ragprivacy.errors import DataError
from ragprivacy.generate import Generator, Prompt, TokenDistribution
from ragprivacy.types import Completion

__all__ = ["CachedGenerator", "GenerationCache"]


_WAIT_S = 60.0
_NO_LOCK = contextlib.nullcontext()
_SCHEMA = "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL);"


class GenerationCache:
    """A key → JSON store in one SQLite file (or, from :meth:`in_memory`, in memory).

    Attributes:
        on_put: called with each batch of new entries after it is stored (``None``: not
            reported); the Ray executor sends them back to the run's file this way.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._shared: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self.on_put: Callable[[dict[str, Any]], None] | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._local = threading.local()
            self._conn()
        except (OSError, sqlite3.Error) as exc:
            raise DataError(f"Cannot open the generation cache at {self.path}: {exc}.") from exc
        self.hits = 0
        self.misses = 0

    @classmethod
    def in_memory(cls, snapshot: bytes | None = None) -> GenerationCache:
        """A cache held in this process's memory, starting with the entries of
        ``snapshot`` (from :meth:`snapshot`; ``None``: empty). Nothing is written to disk;
        one connection serves every thread, one call at a time."""
        cache = cls.__new__(cls)
        cache.path = Path(":memory:")
        cache._lock = threading.Lock()
        cache.on_put = None
        cache.hits = cache.misses = 0
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        try:
            if snapshot is not None:
                conn.deserialize(snapshot)
            conn.execute(_SCHEMA)
        except sqlite3.Error as exc:
            conn.close()
            raise DataError(f"Cannot load a generation cache snapshot: {exc}.") from exc
        cache._shared = conn
        return cache

    def snapshot(self) -> bytes | None:
        """The store's entries as a serialized SQLite database (``None`` when empty), for
        :meth:`in_memory` in another process or on another machine."""
        if len(self) == 0:
            return None
        copy = sqlite3.connect(":memory:")
        try:
            with self._lock:
                self._conn().backup(copy)
            data = bytearray(copy.serialize())
        finally:
            copy.close()
        # bytes 18-19 of the header say "WAL" (2), copied from the file; an in-memory
        # database opened from them must read "rollback journal" (1) instead
        data[18:20] = b"\x01\x01"
        return bytes(data)

    def _conn(self) -> sqlite3.Connection:
        if self._shared is not None:
            return self._shared
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect_wal(self.path, timeout=_WAIT_S, schema=_SCHEMA)
            self._local.conn = conn
        return conn

    def get_many(self, keys: Sequence[str]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        conn = self._conn()
        with self._lock if self._shared is not None else _NO_LOCK:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start : start + 500])
                marks = ",".join("?" * len(chunk))
                for key, value in conn.execute(
                    f"SELECT key, value FROM calls WHERE key IN ({marks})", chunk
                ):
                    found[key] = json.loads(value)
        self.hits += len(found)
        self.misses += len(set(keys)) - len(found)
        return found

    def put_many(self, items: dict[str, Any]) -> None:
        if not items:
            return
        with self._lock if self._shared is not None else _NO_LOCK, self._conn() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO calls (key, value) VALUES (?, ?)",
                [(k, json.dumps(v)) for k, v in items.items()],
            )
        if self.on_put is not None:
            self.on_put(items)

    def __len__(self) -> int:
        with self._lock if self._shared is not None else _NO_LOCK:
            return int(self._conn().execute("SELECT COUNT(*) FROM calls").fetchone()[0])


def _completion_to_json(c: Completion) -> dict[str, Any]:
    out: dict[str, Any] = {"text": c.text, "tokens": list(c.tokens), "logprobs": c.logprobs}
    if c.usage is not None:
        out["usage"] = dict(c.usage)
    if c.stated_privacy is not None:
        out["stated_privacy"] = dict(c.stated_privacy)
    return out


def _completion_from_json(d: dict[str, Any], *, cached: bool = True) -> Completion:
    lp = d.get("logprobs")
    return Completion(
        d["text"],
        tuple(d["tokens"]),
        tuple(lp) if lp is not None else None,
        usage=d.get("usage"),
        cached=cached,
        stated_privacy=d.get("stated_privacy"),
    )


class CachedGenerator(Generator):
    """Wraps a generator; answers repeated calls from a :class:`GenerationCache`."""

    def __init__(self, inner: Generator, cache: GenerationCache) -> None:
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self._identity = json.dumps(
            {"name": inner.name, "config": inner.config()}, sort_keys=True, default=str
        )

    def _key(self, method: str, prompt: Prompt, extra: Any) -> str:
        blob = json.dumps(
            [self._identity, method, prompt.cache_key(), extra], sort_keys=True, default=str
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def generate(self, prompt: Prompt, *, max_tokens: int | None = None) -> Completion:
        return self.generate_batch([prompt], max_tokens=max_tokens)[0]

    def generate_batch(
        self, prompts: Sequence[Prompt], *, max_tokens: int | None = None
    ) -> list[Completion]:
        keys = [self._key("generate", p, max_tokens) for p in prompts]
        found = self.cache.get_many(keys)
        todo = [i for i, k in enumerate(keys) if k not in found]
        out: dict[int, Completion] = {}
        if todo:
            fresh = self.inner.generate_batch([prompts[i] for i in todo], max_tokens=max_tokens)
            new = {keys[i]: _completion_to_json(c) for i, c in zip(todo, fresh)}
            self.cache.put_many(new)
            out = {i: _completion_from_json(new[keys[i]], cached=False) for i in todo}
        return [out[i] if i in out else _completion_from_json(found[k]) for i, k in enumerate(keys)]

    def next_token_distribution(
        self, prompt: Prompt, prefix: Sequence[str] | str = ()
    ) -> TokenDistribution:
        key = self._key("next", prompt, prefix if isinstance(prefix, str) else list(prefix))
        found = self.cache.get_many([key])
        if key in found:
            d = found[key]
            return TokenDistribution(tuple(d["tokens"]), tuple(d["probs"]))
        dist = self.inner.next_token_distribution(prompt, prefix)
        self.cache.put_many({key: {"tokens": list(dist.tokens), "probs": list(dist.probs)}})
        return dist

    def next_token(self, prompt: Prompt, prefix: Sequence[str] | str = ()) -> str:
        key = self._key("next-token", prompt, prefix if isinstance(prefix, str) else list(prefix))
        found = self.cache.get_many([key])
        if key in found:
            return str(found[key])
        token = self.inner.next_token(prompt, prefix)
        self.cache.put_many({key: token})
        return token

    def tokens_to_text(self, tokens: Sequence[str]) -> str:
        return self.inner.tokens_to_text(tokens)

    def score(self, prompt: Prompt, continuation: str) -> Completion:
        key = self._key("score", prompt, continuation)
        found = self.cache.get_many([key])
        if key in found:
            return _completion_from_json(found[key])
        c = self.inner.score(prompt, continuation)
        self.cache.put_many({key: _completion_to_json(c)})
        return c

    @property
    def exposes_logprobs(self) -> bool:
        return self.inner.exposes_logprobs

    def config(self) -> dict[str, Any]:
        return self.inner.config()
