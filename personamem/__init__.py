"""personamem: per-user memory for LLM applications.

Store each user's history durably, search it per user, and forget users without a trace.
"""

from personamem.encoder import Encoder, SentenceEncoder, TokenStates, default_encoder
from personamem.errors import (
    IngestError,
    InvalidRecordError,
    MissingExtraError,
    PersonaMemError,
    StoreError,
    TruncationWarning,
)
from personamem.memory import PersonaMem, SearchMethod
from personamem.profile import ProfileSelector, RelevanceSelector
from personamem.records import Record, RecordKind
from personamem.retrieval import BM25Retriever, DenseRetriever, Hit, HybridRetriever, Retriever
from personamem.store import ConsistencyReport, Store

__all__ = [
    "BM25Retriever",
    "ConsistencyReport",
    "DenseRetriever",
    "Encoder",
    "Hit",
    "HybridRetriever",
    "IngestError",
    "InvalidRecordError",
    "MissingExtraError",
    "PersonaMem",
    "PersonaMemError",
    "ProfileSelector",
    "Record",
    "RecordKind",
    "RelevanceSelector",
    "Retriever",
    "SearchMethod",
    "SentenceEncoder",
    "Store",
    "StoreError",
    "TokenStates",
    "TruncationWarning",
    "default_encoder",
]
