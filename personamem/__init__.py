"""personamem: per-user memory for LLM applications.

Store each user's history durably, search it per user with any method by name, build the context
an LLM should see for a query, and forget users without a trace.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from personamem.errors import (
    AuthenticationError,
    CheckpointError,
    ConfigError,
    FallbackWarning,
    IngestError,
    InvalidRecordError,
    LLMError,
    MethodError,
    MissingExtraError,
    PartialWriteError,
    PersonaMemError,
    PersonaMemWarning,
    RemoteError,
    StoreError,
    TruncationWarning,
)

if TYPE_CHECKING:
    from personamem.encoder import Encoder, SentenceEncoder, TokenStates, default_encoder
    from personamem.memory import PersonaMem
    from personamem.personalize import QueryPersonalizer
    from personamem.pipeline import Context, Pipeline, PipelineConfig, load_pipeline
    from personamem.preference import PreferenceMemory
    from personamem.profile import ProfileSelector, RelevanceSelector
    from personamem.records import Record, RecordKind
    from personamem.retrieval import BM25Retriever, DenseRetriever, Hit, HybridRetriever, Retriever
    from personamem.store import ConsistencyReport, Store

# Where each name that is not an error lives: imported on first access (PEP 562), so that
# ``import personamem.errors`` or the command line's ``--help`` does not load the store, Chroma and
# the pipeline (about 0.6 s) for names they never use.
_LAZY = {
    "BM25Retriever": "personamem.retrieval",
    "ConsistencyReport": "personamem.store",
    "Context": "personamem.pipeline",
    "DenseRetriever": "personamem.retrieval",
    "Encoder": "personamem.encoder",
    "Hit": "personamem.retrieval",
    "HybridRetriever": "personamem.retrieval",
    "PersonaMem": "personamem.memory",
    "Pipeline": "personamem.pipeline",
    "PipelineConfig": "personamem.pipeline",
    "PreferenceMemory": "personamem.preference",
    "ProfileSelector": "personamem.profile",
    "QueryPersonalizer": "personamem.personalize",
    "Record": "personamem.records",
    "RecordKind": "personamem.records",
    "RelevanceSelector": "personamem.profile",
    "Retriever": "personamem.retrieval",
    "SentenceEncoder": "personamem.encoder",
    "Store": "personamem.store",
    "TokenStates": "personamem.encoder",
    "default_encoder": "personamem.encoder",
    "load_pipeline": "personamem.pipeline",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'personamem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "AuthenticationError",
    "BM25Retriever",
    "CheckpointError",
    "ConfigError",
    "ConsistencyReport",
    "Context",
    "DenseRetriever",
    "Encoder",
    "FallbackWarning",
    "Hit",
    "HybridRetriever",
    "IngestError",
    "InvalidRecordError",
    "LLMError",
    "MethodError",
    "MissingExtraError",
    "PartialWriteError",
    "PersonaMem",
    "PersonaMemError",
    "PersonaMemWarning",
    "Pipeline",
    "PipelineConfig",
    "PreferenceMemory",
    "ProfileSelector",
    "QueryPersonalizer",
    "Record",
    "RecordKind",
    "RelevanceSelector",
    "RemoteError",
    "Retriever",
    "SentenceEncoder",
    "Store",
    "StoreError",
    "TokenStates",
    "TruncationWarning",
    "default_encoder",
    "load_pipeline",
]
