"""Query → ranked documents; where the privacy of retrieval is decided."""

from __future__ import annotations

from ragprivacy.retrieval.base import (
    Retriever,
    TopKRetriever,
    create_retriever,
    register_retriever,
    retriever_names,
)
from ragprivacy.retrieval.bucket_bounds import BucketBounds
from ragprivacy.retrieval.knowledge_base import KnowledgeBase
from ragprivacy.retrieval.lazy_noisy import (
    FallbackMemory,
    LazySelection,
    lazy_index_topk,
    lazy_noisy_topk,
)
from ragprivacy.retrieval.noisy_topk import NoisyTopKRetriever
from ragprivacy.retrieval.projection import (
    DPProjectionRetriever,
    ProjectionRetriever,
    SanityRow,
    dp_rp_sigma,
    expected_projected_cosine,
    projection_matrix,
    projection_sanity,
    simulate_top1_flip,
    top1_flip_bound,
)
from ragprivacy.retrieval.tenants import TenantAccessError, TenantRetriever, TenantSelection
from ragprivacy.retrieval.threshold import (
    AdaptiveScreen,
    PaddedTopK,
    Screening,
    ThresholdRetriever,
    adaptive_screen,
    pad_top_k,
    score_bins,
)

__all__ = [
    "AdaptiveScreen",
    "BucketBounds",
    "DPProjectionRetriever",
    "FallbackMemory",
    "KnowledgeBase",
    "LazySelection",
    "NoisyTopKRetriever",
    "PaddedTopK",
    "ProjectionRetriever",
    "Retriever",
    "SanityRow",
    "Screening",
    "TenantAccessError",
    "TenantRetriever",
    "TenantSelection",
    "ThresholdRetriever",
    "TopKRetriever",
    "adaptive_screen",
    "create_retriever",
    "dp_rp_sigma",
    "expected_projected_cosine",
    "lazy_index_topk",
    "lazy_noisy_topk",
    "pad_top_k",
    "projection_matrix",
    "projection_sanity",
    "register_retriever",
    "retriever_names",
    "score_bins",
    "simulate_top1_flip",
    "top1_flip_bound",
]
