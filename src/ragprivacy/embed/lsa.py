"""``LsaEmbedder``: TF-IDF + truncated SVD (latent semantic analysis), the embedded default.

Latent semantic analysis (Deerwester et al., 1990) factorises the TF-IDF matrix
``X ≈ U_k Σ_k V_kᵀ`` of the fitting corpus and represents a text ``x`` by its
projection onto ``k`` right singular vectors. This embedder encodes

.. math::  e(x) = x\\, V_k\\, \\Sigma_k^{p - 1}, \\qquad\\text{then } e / \\lVert e\\rVert_2,

where ``p`` is ``singular_power``. ``p = 1`` is scikit-learn's ``TruncatedSVD.transform``
(``X V_k``; a fitted document becomes ``U_k Σ_k``); ``p = 0.5`` is the square-root
singular-value weighting (Caron, 2001; Levy, Goldberg & Dagan, 2015).

``V_k`` comes from scikit-learn's randomized SVD (Halko, Martinsson & Tropp, 2011,
Alg. 4.1 and 5.1) with ``n_iter`` power iterations, **0 by default**. Each power
iteration sharpens the sketch towards the directions of largest variance (it weights
direction ``i`` by ``σ_i^(2q+1)``); with none, the ``k``-dimensional subspace still
follows the variance (weight ``σ_i``) but keeps a share of every direction of the
corpus, so rare terms such as personal names survive. A converged SVD spends its ``k``
dimensions on the frequent template words of a corpus and loses the names that
questions ask about.

Measured recall of the gold document for one question per fact
(``benchmarks/bench_embed.py``; the package's synthetic ``knowledge`` corpus, one
fictional person per document, 3-6 sentences naming the person in full, questions such
as "Where was Marta Olsen born?"):

=============================================  ==============  ==============
setting                                         2,000 docs      10,000 docs
                                                R@1 / R@5       R@1 / R@5
=============================================  ==============  ==============
**default** (k=384, words, stop words, p=0.5)   1.000 / 1.000   1.000 / 1.000
default with n_iter=5 (converged SVD)           1.000 / 1.000   0.634 / 0.743
classic LSA (k=256, n_iter=5, p=1)              0.965 / 0.995   --
default + word bigrams                          1.000 / 1.000   1.000 / 1.000
TF-IDF cosine without SVD (reference)           1.000 / 1.000   1.000 / 1.000
=============================================  ==============  ==============

On proxies with Zipf-distributed invented names or Faker names (2,000 documents) the
default reached R@1 ≥ 0.998, R@5 = 1.000, also with k = 128; bigrams and char n-grams
added nothing measurable at several times the fitting cost. Fitting 2,000 documents
and encoding them takes well under a second on one thread.

Memory: the projection is ``n_features x k`` float32 (``max_features`` caps the
vocabulary; 2^17 terms x 384 ≈ 192 MiB at most).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from ragprivacy._typing import FloatArray
from ragprivacy._validation import check_choice, check_in_range, check_positive_int
from ragprivacy.embed._checks import blas_threads, check_texts
from ragprivacy.embed.base import Embedder
from ragprivacy.errors import ConfigError, DataError

__all__ = ["LsaConfig", "LsaEmbedder"]

#: Singular values below this fraction of the largest are dropped (rank deficiency).
RELATIVE_RANK_TOL = 1e-6


@dataclass(frozen=True, slots=True, kw_only=True)
class LsaConfig:
    """Settings of :class:`LsaEmbedder`.

    Attributes:
        n_components: requested width ``k``; the fitted width is capped by what the data
            allows (number of texts, vocabulary size, numerical rank).
        ngram_range: word n-gram range of the TF-IDF vocabulary.
        sublinear_tf: use ``1 + log(tf)`` term frequencies.
        stop_words: ``None`` or ``"english"`` (scikit-learn's list).
        min_df: minimum number of documents a term must occur in.
        max_df: maximum fraction of documents a term may occur in.
        max_features: vocabulary cap (most frequent terms), ``None`` for no cap.
        singular_power: ``p`` in ``x V_k Σ_k^(p-1)``; 1 is plain ``TruncatedSVD``.
        n_iter: power iterations of the randomized SVD; 0 keeps rare terms (see the
            module notes), 5 or more approaches the exact truncated SVD.
        random_state: seed of the randomized SVD (the fit is deterministic given it).

    ``n_components=384`` matches the width of all-MiniLM-L6-v2, so indices and noise
    calibrations compare like for like across embedders.
    """

    n_components: int = 384
    ngram_range: tuple[int, int] = (1, 1)
    sublinear_tf: bool = True
    stop_words: str | None = "english"
    min_df: int = 1
    max_df: float = 1.0
    max_features: int | None = 2**17
    singular_power: float = 0.5
    n_iter: int = 0
    random_state: int = 0

    def __post_init__(self) -> None:
        check_positive_int("n_components", self.n_components)
        ngram = tuple(self.ngram_range)
        if (
            len(ngram) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in ngram)
            or not 1 <= ngram[0] <= ngram[1]
        ):
            raise ConfigError(
                f"The 'ngram_range' parameter must be a pair (low, high) with "
                f"1 <= low <= high; got {self.ngram_range!r}."
            )
        object.__setattr__(self, "ngram_range", ngram)
        if not isinstance(self.sublinear_tf, bool):
            raise ConfigError(
                f"The 'sublinear_tf' parameter must be a bool; got {self.sublinear_tf!r}."
            )
        if self.stop_words is not None:
            check_choice("stop_words", self.stop_words, ["english"])
        check_positive_int("min_df", self.min_df)
        check_in_range("max_df", self.max_df, 0.0, 1.0, low_open=True)
        if self.max_features is not None:
            check_positive_int("max_features", self.max_features)
        check_in_range("singular_power", self.singular_power, 0.0, 1.0)
        check_positive_int("n_iter", self.n_iter, allow_zero=True)
        check_positive_int("random_state", self.random_state, allow_zero=True)


class LsaEmbedder(Embedder):
    """TF-IDF + truncated SVD embedder; must be :meth:`fit` before :meth:`encode`.

    Args:
        config: the settings (default :class:`LsaConfig`).
        num_threads: BLAS/LAPACK threads while fitting and encoding (``None``: the BLAS
            default). One by default: the QR and SVD of a fit are small, and on a shared,
            busy machine two threads were measured slower than one (benchmarks/README.md,
            "Embedders and indices"). A runtime setting, not part of the fingerprint.
        **overrides: fields of :class:`LsaConfig` to change, e.g. ``n_components=256``.

    >>> emb = LsaEmbedder(n_components=2).fit(
    ...     ["cats purr softly", "dogs bark loudly", "cats and dogs play"])
    >>> emb.dim, emb.encode(["cats purr"]).shape
    (2, (1, 2))
    """

    name = "lsa"

    def __init__(
        self, config: LsaConfig | None = None, *, num_threads: int | None = 1, **overrides: Any
    ) -> None:
        if config is not None and not isinstance(config, LsaConfig):
            raise ConfigError(
                f"The 'config' parameter must be an LsaConfig or None; got {config!r}. "
                "Pass settings as keywords, e.g. LsaEmbedder(n_components=256)."
            )
        base = config or LsaConfig()
        try:
            self.settings = replace(base, **overrides) if overrides else base
        except TypeError as exc:
            raise ConfigError(f"Unknown LSA setting: {exc}.") from None
        self.num_threads = (
            None if num_threads is None else check_positive_int("num_threads", num_threads)
        )
        self._vectorizer: Any = None
        self._projection: np.ndarray | None = None  # [n_features, k] float32
        self._singular_values: np.ndarray | None = None
        self._digest = ""

    # -- state ---------------------------------------------------------------------------
    @property
    def is_fitted(self) -> bool:
        return self._projection is not None

    @property
    def dim(self) -> int:
        if self._projection is None:
            raise ConfigError(
                "The lsa embedder has no width before it is fitted; call fit(texts) first."
            )
        return int(self._projection.shape[1])

    @property
    def singular_values(self) -> FloatArray:
        """Singular values of the kept components (after :meth:`fit`)."""
        self._require_fitted()
        assert self._singular_values is not None
        return self._singular_values.copy()

    def config(self) -> dict[str, Any]:
        out = asdict(self.settings)
        out["ngram_range"] = list(self.settings.ngram_range)
        return out

    def state_digest(self) -> str:
        """SHA-256 over the fitted vocabulary, idf weights, singular values and projection."""
        return self._digest

    def _require_fitted(self) -> None:
        if self._projection is None:
            raise ConfigError(
                "The lsa embedder must be fitted before encoding: call "
                "embedder.fit(texts) with the corpus (or public) texts first."
            )

    # -- fitting -------------------------------------------------------------------------
    def fit(self, texts: Sequence[str]) -> LsaEmbedder:
        """Fit the TF-IDF vocabulary and the SVD on ``texts`` (replaces earlier state).

        Raises:
            DataError: fewer than two texts, a non-string item, or no usable terms.
        """
        from sklearn.decomposition import TruncatedSVD
        from sklearn.feature_extraction.text import TfidfVectorizer

        items = check_texts([texts] if isinstance(texts, str) else texts)
        if len(items) < 2:
            raise DataError(
                f"LSA needs at least 2 texts to fit; got {len(items)}. Fit it on the corpus."
            )
        s = self.settings
        vectorizer = TfidfVectorizer(
            ngram_range=s.ngram_range,
            sublinear_tf=s.sublinear_tf,
            stop_words=s.stop_words,
            min_df=s.min_df,
            max_df=s.max_df,
            max_features=s.max_features,
            strip_accents="unicode",
            dtype=np.float32,
        )
        try:
            tfidf = vectorizer.fit_transform(items)
        except ValueError as exc:  # empty vocabulary, min_df/max_df leave no terms
            raise DataError(
                f"LSA found no usable terms in the {len(items)} fitting texts ({exc}); fit "
                "on longer texts or relax min_df/max_df/stop_words."
            ) from None
        n_docs, n_features = tfidf.shape
        k = min(s.n_components, n_docs, n_features)
        if k >= min(n_docs, n_features):  # randomized SVD wants k < both sides
            k = min(n_docs, n_features) - 1
        if k < 1:
            raise DataError(
                f"LSA needs a TF-IDF matrix with at least 2 rows and 2 terms; got "
                f"{n_docs} x {n_features}. Fit on more or longer texts."
            )
        svd = TruncatedSVD(
            n_components=k, algorithm="randomized", n_iter=s.n_iter, random_state=s.random_state
        )
        with blas_threads(self.num_threads):
            svd.fit(tfidf)
        sv = np.asarray(svd.singular_values_, dtype=np.float64)
        keep = sv > RELATIVE_RANK_TOL * max(float(sv.max(initial=0.0)), np.finfo(float).tiny)
        if not keep.any():
            raise DataError("LSA found a zero TF-IDF matrix; fit on texts with content.")
        sv = sv[keep]
        components = np.asarray(svd.components_, dtype=np.float64)[keep]
        projection = (components.T * sv ** (s.singular_power - 1.0)).astype(np.float32)
        self._vectorizer = vectorizer
        self._projection = np.ascontiguousarray(projection)
        self._singular_values = sv.astype(np.float32)
        self._digest = self._compute_digest()
        return self

    def _compute_digest(self) -> str:
        assert self._vectorizer is not None and self._projection is not None
        h = hashlib.sha256()
        vocab = self._vectorizer.get_feature_names_out().tolist()
        h.update(json.dumps(vocab, ensure_ascii=False).encode())
        for arr in (self._vectorizer.idf_, self._singular_values, self._projection):
            a = np.ascontiguousarray(arr)
            h.update(f"{a.dtype.str}{a.shape}".encode())
            h.update(a.tobytes())
        return h.hexdigest()

    # -- encoding ------------------------------------------------------------------------
    def _encode(self, texts: list[str]) -> FloatArray:
        self._require_fitted()
        assert self._projection is not None
        tfidf = self._vectorizer.transform(check_texts(texts))
        with blas_threads(self.num_threads):
            return np.asarray(tfidf @ self._projection, dtype=np.float32)
