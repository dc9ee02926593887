"""Experiment configurations: frozen dataclasses loaded from YAML.

A config names its corpora, the models (embedder, index, generator), a root seed, and a
list of experiments, each of a registered type (``qa``, ``leakage``, ...)::

    name: demo
    seed: 7
    corpora:
      knowledge: {synthetic: knowledge, n: 2000}
    models: {embedder: lsa, index: exact, generator: reference}
    experiments:
      - {type: qa, corpus: knowledge, systems: [non-rag, rag], questions: 400}

Unknown keys, missing keys and wrong types are refused with the key's path in the
message. Library code takes these objects; only ``eval`` and ``cli`` read YAML.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ragprivacy._validation import check_choice, check_positive_int
from ragprivacy.errors import ConfigError, DataError

__all__ = [
    "CorpusSpec",
    "ExperimentConfig",
    "ExperimentSpec",
    "ModelSpec",
    "RaySpec",
    "from_mapping",
    "load_config",
    "parse_config",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class CorpusSpec:
    """Where a corpus comes from: ``synthetic`` (a kind), ``path`` (a ragprivacy
    JSONL/CSV file) or ``dataset`` (a registered dataset), one of them; ``dataset`` with
    ``path`` reads that dataset's own public files (JSON, JSONL, CSV or Parquet; a file
    or a folder) instead of the local Hugging Face cache.

    Attributes:
        synthetic: kind of synthetic corpus (``medical``, ``email``, ``legal``,
            ``knowledge``; see ``ragprivacy backends``).
        path: a corpus file (.jsonl, .json or .csv); with ``dataset``, the dataset's own
            file or folder.
        dataset: a registered public dataset (``healthcaremagic``, ``enron``, ...); read
            from ``path`` when given, else from the local Hugging Face cache (nothing is
            downloaded).
        split: with ``dataset``: the split to read (default: the dataset's usual one).
        n: documents of a synthetic corpus.
        seed: seed of a synthetic corpus (default: derived from the config's seed).
        limit: keep at most this many documents.
        pii_detector: the PII detector (``regex``, ``presidio``,
            ``presidio:SPACY_MODEL``) that fills the documents' PII ground truth, or
            ``none``. Default: ``regex`` for datasets and for documents of a file that
            carry no spans; a synthetic corpus keeps its generator's exact spans (a
            detector named here adds what it finds elsewhere).
        redact_pii: a detector; the corpus is stored as a provider that redacts PII
            before indexing would (detected spans become typed placeholders such as
            ``[PHONE]``), e.g. to measure the utility the PII-redaction defense keeps.
    """

    synthetic: str | None = None
    path: str | None = None
    dataset: str | None = None
    split: str | None = None
    n: int = 2000
    seed: int | None = None
    limit: int | None = None
    pii_detector: str | None = None
    redact_pii: str | None = None

    def __post_init__(self) -> None:
        sources = (self.synthetic, None if self.dataset else self.path, self.dataset)
        given = [x for x in sources if x is not None]
        if len(given) != 1:
            raise ConfigError(
                "A corpus needs one of 'synthetic', 'path' or 'dataset' ('dataset' may come "
                f"with a 'path' to the dataset's own files); got {len(given)}."
            )
        if self.split is not None and self.dataset is None:
            raise ConfigError(
                f"'split' ({self.split!r}) applies to a 'dataset' corpus only; remove it."
            )
        check_positive_int("n", self.n)
        if self.limit is not None:
            check_positive_int("limit", self.limit)
        from ragprivacy.corpus import pii_detector_names

        for key in ("pii_detector", "redact_pii"):
            value = getattr(self, key)
            extra = ["none"] if key == "pii_detector" else []
            if value is not None:
                check_choice(key, str(value).partition(":")[0], [*pii_detector_names(), *extra])


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """Backends by registry name, with their options.

    Attributes:
        embedder: embedder (``lsa``, ``hashing``, ``minilm``, ``sentence-transformers``;
            see ``ragprivacy backends``).
        index: vector index (``exact``, ``faiss-flat``, ``faiss-hnsw``, ...).
        generator: generator spec (``reference``, ``smollm2``, ``openai:MODEL@URL``,
            ``hf:PATH``, ``gguf:PATH``).
        generator_options: keyword options of the generator (e.g. the reference
            reader's ``compliance``).
        background_n: size of the reference reader's background corpus: texts the
            synthetic generator makes from a stream independent of every member document.
    """

    embedder: str = "lsa"
    index: str = "exact"
    generator: str = "reference"
    generator_options: Mapping[str, Any] = field(default_factory=dict)
    background_n: int = 1000

    def __post_init__(self) -> None:
        check_positive_int("background_n", self.background_n)
        object.__setattr__(self, "generator_options", dict(self.generator_options))


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperimentSpec:
    """One experiment: its registered ``type``, the ``corpus`` it runs on (``None`` for
    types that use no documents, such as ``collusion``), the ``systems`` compared, and
    type-specific ``options`` (everything else in the mapping).

    Attributes:
        type: the experiment type (``qa``, ``leakage``, ``membership``, ``extraction``,
            ``private_rag``, ``private_rag_medical``, ``collusion``).
        corpus: name of one of the config's ``corpora`` (not used by ``collusion``).
        systems: the systems compared, by registered name (``non-rag``, ``rag``, ...).
        k: documents retrieved per query.
        options: the type's options as one mapping; they may also be given as keys of
            the experiment itself (see the type's section).
    """

    type: str
    corpus: str | None = None
    systems: tuple[str, ...] = ("non-rag", "rag")
    k: int = 5
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_positive_int("k", self.k)
        if not self.systems:
            raise ConfigError(f"Experiment {self.type!r} lists no systems.")
        object.__setattr__(self, "systems", tuple(self.systems))
        object.__setattr__(self, "options", dict(self.options))


EXECUTORS = ("process", "ray")


@dataclass(frozen=True, slots=True, kw_only=True)
class RaySpec:
    """Where ``executor: ray`` runs the cells: each cell is a Ray task on a Ray cluster
    (the ``cluster`` extra; docs/scale.md); this machine keeps the checkpoints and the
    generation cache.

    Attributes:
        address: the cluster: ``local`` (a Ray instance started on this machine for the
            run and stopped after it), ``auto`` (the cluster this machine joined with
            ``ray start``, or ``RAY_ADDRESS``), ``HOST:PORT`` (the head node's address,
            this machine being a node of the cluster) or ``ray://HOST:PORT`` (Ray Client,
            port 10001 by default). A process already connected to Ray (``ray.init`` in a
            notebook or a test) uses that connection and leaves it open.
        num_cpus: with ``address: local``, the CPUs of the local instance (default: the
            config's ``workers``); a cluster's CPUs are its nodes' own.
        cpus_per_cell: CPUs each cell reserves on its node (Ray's ``num_cpus`` of the
            task); raise it for cells that use several threads (BLAS, FAISS).
    """

    address: str = "local"
    num_cpus: int | None = None
    cpus_per_cell: float = 1.0

    def __post_init__(self) -> None:
        address = self.address
        if not (address in ("local", "auto") or _host_port(address.removeprefix("ray://"))):
            raise ConfigError(
                "The 'address' must be 'local', 'auto', 'HOST:PORT' or 'ray://HOST:PORT'; "
                f"got {address!r}."
            )
        if self.num_cpus is not None:
            check_positive_int("num_cpus", self.num_cpus)
            if address != "local":
                raise ConfigError(
                    "'num_cpus' sets the CPUs of a local Ray instance; the cluster at "
                    f"{address!r} has its own: remove it or set address: local."
                )
        if not (isinstance(self.cpus_per_cell, int | float) and self.cpus_per_cell > 0):
            raise ConfigError(
                f"The 'cpus_per_cell' parameter must be > 0; got {self.cpus_per_cell!r}."
            )


def _host_port(text: str) -> bool:
    """``HOST:PORT`` with a non-empty host and a port in 1..65535."""
    host, sep, port = text.rpartition(":")
    return bool(sep and host and "/" not in host and port.isdigit() and 0 < int(port) < 65536)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperimentConfig:
    """A whole run: corpora, models, experiments, root seed, workers and caching.

    Attributes:
        name: the run's title (in the report).
        seed: root seed; every corpus, experiment and cell derives its own from it.
        corpora: named corpora (see ``corpora.NAME``).
        models: embedder, index and generator (see ``models``).
        experiments: the experiments to run, in order (see ``experiments[]``).
        workers: worker processes (with ``executor: ray`` and ``ray.address: local``,
            the local Ray instance's CPUs unless ``ray.num_cpus`` is set).
        executor: what runs the cells: ``process`` (a pool of ``workers`` processes on
            this machine) or ``ray`` (Ray tasks on the cluster of ``ray``; needs the
            ``cluster`` extra). Results, checkpoints and resuming are the same with both.
        ray: with ``executor: ray``, where and how (see ``ray``; default: a local Ray
            instance).
        cache: keep a generation cache in the output directory (reruns reuse answers).
        price: what a remote endpoint charges, ``[PROMPT_USD, COMPLETION_USD]`` per
            million tokens (empty: no price, so no cost is stated); only the progress
            bar and the call summary (``endpoint_calls``) use it.
    """

    name: str
    seed: int = 0
    corpora: Mapping[str, CorpusSpec] = field(default_factory=dict)
    models: ModelSpec = field(default_factory=ModelSpec)
    experiments: tuple[ExperimentSpec, ...] = ()
    workers: int = 2
    executor: str = "process"
    ray: RaySpec | None = None
    cache: bool = True
    price: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        check_positive_int("workers", self.workers)
        if self.executor not in EXECUTORS:
            raise ConfigError(
                f"The 'executor' must be one of {', '.join(map(repr, EXECUTORS))}; "
                f"got {self.executor!r}."
            )
        if self.ray is not None and self.executor != "ray":
            raise ConfigError(
                "The 'ray' settings apply to executor: ray only; set executor: ray or remove them."
            )
        if self.price:
            from ragprivacy.eval.calls import Price

            Price.parse(tuple(self.price))  # two numbers >= 0, or refused
        object.__setattr__(self, "price", tuple(self.price))
        check_positive_int("seed", self.seed, allow_zero=True)
        if not self.experiments:
            raise ConfigError(f"Config {self.name!r} lists no experiments.")
        for i, exp in enumerate(self.experiments):
            if exp.corpus is not None and exp.corpus not in self.corpora:
                raise ConfigError(
                    f"experiments[{i}] uses corpus {exp.corpus!r}, which the config does not "
                    f"define; define it under 'corpora' (defined: {sorted(self.corpora)})."
                )
        object.__setattr__(self, "corpora", dict(self.corpora))
        object.__setattr__(self, "experiments", tuple(self.experiments))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (recorded in results)."""
        return _plain(self)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _check_type(where: str, value: Any, hint: Any) -> Any:
    """Check (and lightly coerce) a YAML value against a field's type hint."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(where, value, arg)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: invalid value {value!r}.")
    if hint is Any:
        return value
    if origin is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list; got {value!r}.")
        (item,) = typing.get_args(hint)[:1]
        return tuple(_check_type(f"{where}[{i}]", v, item) for i, v in enumerate(value))
    if origin in (Mapping, dict) or hint in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping; got {value!r}.")
        args = typing.get_args(hint)
        if len(args) == 2:
            return {k: _check_type(f"{where}.{k}", v, args[1]) for k, v in value.items()}
        return dict(value)
    if dataclasses.is_dataclass(hint):
        return from_mapping(hint, value, where)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false; got {value!r}.")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer; got {value!r}{_int_hint(value)}.")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number; got {value!r}.")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string; got {value!r}.")
        return value
    return value


def _int_hint(value: Any) -> str:
    """Why a number-looking value is not an integer, and how to write it."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return ""
    if not isinstance(number, float) or not number.is_integer():
        return ""
    # YAML 1.1 reads 1e8 as a string and 1.0e+8 as a float; counts must be written out.
    kind = "a string in YAML" if isinstance(value, str) else "a float"
    return f" ({kind}); write it as an integer, e.g. {int(number)}"


def from_mapping(cls: Any, data: Any, where: str, *, also: Iterable[str] = ()) -> Any:
    """Build dataclass ``cls`` from a YAML mapping, refusing unknown or mistyped keys;
    ``where`` prefixes error messages with the key path. ``also`` names keys the caller
    accepts besides ``cls``'s fields (listed in the unknown-key message, e.g. the
    ``type``, ``corpus``, ``systems`` and ``k`` next to an experiment's options)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping; got {data!r}.")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    extra_into = "options" if cls is ExperimentSpec else None
    kwargs: dict[str, Any] = {}
    options: dict[str, Any] = {}
    for key, value in data.items():
        if extra_into is not None and key == extra_into:
            options.update(_check_type(f"{where}.{key}", value, dict))
        elif key in fields:
            kwargs[key] = _check_type(f"{where}.{key}", value, hints[key])
        elif extra_into is not None:
            options[key] = value  # type-specific; the experiment validates them
        else:
            raise ConfigError(_unknown_key(f"{where}.{key}", str(key), [*fields, *also]))
    if extra_into is not None:
        kwargs[extra_into] = options
    missing = [
        n
        for n, f in fields.items()
        if n not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{where}: missing required key(s) {', '.join(missing)}.")
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _unknown_key(where: str, key: str, known: Iterable[str]) -> str:
    names = sorted(set(known))
    close = difflib.get_close_matches(key, names, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"{where}: unknown key{guess}; expected one of {', '.join(names)} "
        "(every key is described in docs/options.md and by 'ragprivacy options')."
    )


def parse_config(data: Any, *, source: str = "config") -> ExperimentConfig:
    """Build an :class:`ExperimentConfig` from a parsed YAML mapping."""
    return from_mapping(ExperimentConfig, data, source)


def load_config(path: str | Path) -> ExperimentConfig:
    """Read and validate a YAML experiment config."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"Config file {str(p)!r} does not exist; give the path of a YAML file.")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"Config file {str(p)!r} is not valid YAML: {problem}{where}.") from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"Config file {str(p)!r} is not UTF-8 text (a YAML config is); give the config."
        ) from None
    if data is None:
        raise ConfigError(f"Config file {str(p)!r} is empty.")
    return parse_config(data, source=p.name)
