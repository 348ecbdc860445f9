"""personamem: per-user memory for LLM applications.

Store each user's history durably, search it per user with any method by name, build the context
an LLM should see for a query, and forget users without a trace.
"""

from personamem.encoder import Encoder, SentenceEncoder, TokenStates, default_encoder
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
from personamem.memory import PersonaMem
from personamem.personalize import QueryPersonalizer
from personamem.pipeline import Context, Pipeline, PipelineConfig, load_pipeline
from personamem.preference import PreferenceMemory
from personamem.profile import ProfileSelector, RelevanceSelector
from personamem.records import Record, RecordKind
from personamem.retrieval import BM25Retriever, DenseRetriever, Hit, HybridRetriever, Retriever
from personamem.store import ConsistencyReport, Store

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
