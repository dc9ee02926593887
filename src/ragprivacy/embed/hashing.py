"""``HashingEmbedder``: hashed word and character n-grams, no fitting.

The feature hashing trick (Weinberger et al., 2009) maps each n-gram to one of ``dim``
buckets with a signed hash, so the expected inner product of two hashed vectors equals
that of their n-gram count vectors. Word n-grams carry topical overlap, character
n-grams (inside word boundaries) carry spelling overlap that survives inflection and
typos. Each part is L2-normalised, the two are mixed with weight ``char_weight``, and the
base class normalises the sum.

There are no learned weights (no idf), so frequent words count as much as rare ones;
prefer ``lsa`` when a corpus is available to fit on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray
from ragprivacy._validation import check_in_range, check_positive_int
from ragprivacy.embed._checks import check_texts
from ragprivacy.embed.base import Embedder
from ragprivacy.errors import ConfigError

__all__ = ["HashingConfig", "HashingEmbedder"]


def _check_range(name: str, value: Any) -> tuple[int, int]:
    pair = tuple(value)
    if (
        len(pair) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair)
        or not 1 <= pair[0] <= pair[1]
    ):
        raise ConfigError(
            f"The '{name}' parameter must be a pair (low, high) with 1 <= low <= high; "
            f"got {value!r}."
        )
    return pair[0], pair[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class HashingConfig:
    """Settings of :class:`HashingEmbedder`.

    Attributes:
        dim: number of hash buckets (the vector width), 16 to 2^20.
        word_ngram_range: word n-gram range.
        char_ngram_range: character n-gram range (``char_wb`` analyzer).
        char_weight: weight of the character part in [0, 1] (0: words only).
    """

    dim: int = 2048
    word_ngram_range: tuple[int, int] = (1, 2)
    char_ngram_range: tuple[int, int] = (3, 5)
    char_weight: float = 0.5

    def __post_init__(self) -> None:
        check_positive_int("dim", self.dim)
        if not 16 <= self.dim <= 2**20:
            raise ConfigError(f"The 'dim' parameter must be in [16, 1048576]; got {self.dim}.")
        object.__setattr__(
            self, "word_ngram_range", _check_range("word_ngram_range", self.word_ngram_range)
        )
        object.__setattr__(
            self, "char_ngram_range", _check_range("char_ngram_range", self.char_ngram_range)
        )
        check_in_range("char_weight", self.char_weight, 0.0, 1.0)


class HashingEmbedder(Embedder):
    """Signed feature hashing of word + character n-grams into ``dim`` dense floats.

    Needs no fitting; two instances with the same settings give identical vectors.

    Args:
        config: the settings (default :class:`HashingConfig`).
        **overrides: fields of :class:`HashingConfig` to change, e.g. ``dim=1024``.

    >>> emb = HashingEmbedder(dim=256)
    >>> v = emb.encode(["red apples", "red apple", "blue sky"])
    >>> bool(v[0] @ v[1] > v[0] @ v[2])
    True
    """

    name = "hashing"

    def __init__(self, config: HashingConfig | str | None = None, **overrides: Any) -> None:
        if isinstance(config, str):  # the spec "hashing:DIM" names the width
            if not config.isdigit():
                raise ConfigError(
                    f"The spec 'hashing:DIM' takes a number of buckets; got {config!r}."
                )
            config = HashingConfig(dim=int(config))
        if config is not None and not isinstance(config, HashingConfig):
            raise ConfigError(
                f"The 'config' parameter must be a HashingConfig or None; got {config!r}."
            )
        base = config or HashingConfig()
        try:
            self.settings = replace(base, **overrides) if overrides else base
        except TypeError as exc:
            raise ConfigError(f"Unknown hashing setting: {exc}.") from None
        # scikit-learn (seconds to import) is loaded at the first encoding, not here: a
        # command that only names or records the embedder does not pay for it
        self._vectorizers: tuple[Any, Any] | None = None

    def _pair(self) -> tuple[Any, Any]:
        """The word and character vectorizers (built once, at the first call)."""
        if self._vectorizers is None:
            from sklearn.feature_extraction.text import HashingVectorizer

            s = self.settings
            common = {
                "n_features": s.dim,
                "alternate_sign": True,
                "norm": "l2",
                "dtype": np.float32,
                "strip_accents": "unicode",
            }
            self._vectorizers = (
                HashingVectorizer(analyzer="word", ngram_range=s.word_ngram_range, **common),
                HashingVectorizer(analyzer="char_wb", ngram_range=s.char_ngram_range, **common),
            )
        return self._vectorizers

    @property
    def dim(self) -> int:
        return self.settings.dim

    def config(self) -> dict[str, Any]:
        out = asdict(self.settings)
        out["word_ngram_range"] = list(self.settings.word_ngram_range)
        out["char_ngram_range"] = list(self.settings.char_ngram_range)
        return out

    def _encode(self, texts: list[str]) -> FloatArray:
        texts = check_texts(texts)
        w = self.settings.char_weight
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        word, char = self._pair()
        if w < 1.0:
            out += (1.0 - w) * word.transform(texts).toarray()
        if w > 0.0:
            out += w * char.transform(texts).toarray()
        return out
