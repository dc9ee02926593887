"""Systems under test: a ``RAGSystem`` answers queries and reports the privacy it spent."""

from __future__ import annotations

from ragprivacy.rag.base import (
    NonRAG,
    Query,
    RAGSystem,
    StandardRAG,
    charged_failure,
    charged_on_failure,
    create_system,
    register_system,
    system_names,
)
from ragprivacy.rag.defenses import (
    DefendedGenerator,
    GeneratorParaphraser,
    LexiconParaphraser,
    Paraphraser,
    ParaphrasingDefense,
    PromptModifyingDefense,
    create_defense,
    defense_names,
)
from ragprivacy.rag.dp_vote import DPVoteConfig, DPVoteRAG, VoteResult, dp_vote_generate
from ragprivacy.rag.knnlm import KNN_WINDOW, KNNLM, knn_datastore
from ragprivacy.rag.murag import MuRAG, MuRAGAda, NaiveMultiRAG
from ragprivacy.rag.remote import (
    CHARS_PER_TOKEN,
    OUTCOMES,
    REFUSAL_PATTERN,
    RemoteRAGSystem,
    classify_answer,
    estimate_tokens,
    is_non_answer,
)
from ragprivacy.rag.spec import SystemSpec, build_system
from ragprivacy.rag.synthetic import (
    BackgroundRandomAPI,
    FillInVariationAPI,
    SyntheticDatastore,
    SyntheticRAG,
    synthetic_datastore,
)

__all__ = [
    "BackgroundRandomAPI",
    "CHARS_PER_TOKEN",
    "DPVoteConfig",
    "DPVoteRAG",
    "DefendedGenerator",
    "FillInVariationAPI",
    "GeneratorParaphraser",
    "KNNLM",
    "KNN_WINDOW",
    "LexiconParaphraser",
    "MuRAG",
    "MuRAGAda",
    "NaiveMultiRAG",
    "NonRAG",
    "OUTCOMES",
    "Paraphraser",
    "ParaphrasingDefense",
    "PromptModifyingDefense",
    "Query",
    "RAGSystem",
    "REFUSAL_PATTERN",
    "RemoteRAGSystem",
    "StandardRAG",
    "SyntheticDatastore",
    "SyntheticRAG",
    "SystemSpec",
    "VoteResult",
    "build_system",
    "charged_failure",
    "charged_on_failure",
    "classify_answer",
    "create_defense",
    "create_system",
    "defense_names",
    "dp_vote_generate",
    "estimate_tokens",
    "is_non_answer",
    "knn_datastore",
    "register_system",
    "synthetic_datastore",
    "system_names",
]
