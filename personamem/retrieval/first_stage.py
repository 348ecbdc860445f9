"""A pipeline's first stage: one protocol, and the dense, BM25 and hybrid stages behind its rows.

Each ``first_stage`` row of the stage table (``pipeline/stage_table.py``) builds one of these, and
the learned ranker's row builds a :class:`RankedStage` over hybrid's; the pipeline calls
:meth:`FirstStage.candidates` and nothing else. A query personalizer's vector replaces the query's
own where a stage takes one (``takes_vector`` in its row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

import numpy as np

from personamem.encoder import Encoder
from personamem.retrieval.base import Hit
from personamem.retrieval.bm25 import BM25Retriever
from personamem.retrieval.dense import DenseRetriever
from personamem.retrieval.hybrid import Fusion, HybridRetriever
from personamem.store.read import NOW, Read

if TYPE_CHECKING:
    from personamem.retrieval.ranker import LearnedRanker

__all__ = ["Candidates", "DenseStage", "FirstStage", "HybridStage", "LexicalStage", "RankedStage"]


class Candidates(NamedTuple):
    """A first stage's top records for a query, and the query vector it searched with.

    ``vector`` is None where the stage encoded nothing here (BM25, the learned ranker).
    """

    hits: list[Hit]
    vector: np.ndarray | None


@runtime_checkable
class FirstStage(Protocol):
    """Finds a user's candidates for a query, or for a ready query vector where it takes one."""

    def candidates(
        self, user_id: str, query: str, n: int, vector: np.ndarray | None = None, read: Read = NOW
    ) -> Candidates:
        """The user's top ``n`` records for ``query`` (or ``vector``) that ``read`` sees."""
        ...


@dataclass(frozen=True)
class DenseStage:
    """Cosine between the records' vectors and the query's (``query_encoder``'s: the store's, an adapter)."""

    dense: DenseRetriever
    query_encoder: Encoder

    def candidates(
        self, user_id: str, query: str, n: int, vector: np.ndarray | None = None, read: Read = NOW
    ) -> Candidates:
        """The ``n`` nearest records to ``vector``, else to the query's encoding."""
        if vector is None:
            vector = self.query_encoder.encode([query])[0]
        return Candidates(self.dense.search_vector(user_id, vector, n, read), vector)


@dataclass(frozen=True)
class LexicalStage:
    """BM25 over the user's records; it takes no vector."""

    bm25: BM25Retriever

    def candidates(
        self, user_id: str, query: str, n: int, vector: np.ndarray | None = None, read: Read = NOW
    ) -> Candidates:
        """BM25's top ``n`` (records sharing no term with the query left out)."""
        return Candidates(self.bm25.search(user_id, query, n, read), None)


@dataclass(frozen=True)
class HybridStage:
    """Weighted reciprocal rank fusion of the dense stage's ranking and BM25's."""

    dense: DenseStage
    bm25: BM25Retriever
    fusion: Fusion

    def candidates(
        self, user_id: str, query: str, n: int, vector: np.ndarray | None = None, read: Read = NOW
    ) -> Candidates:
        """The fused top ``n`` of both rankings, each searched to depth ``max(n, 50)``."""
        if vector is None:
            vector = self.dense.query_encoder.encode([query])[0]
        dense = _VectorSearch(self.dense.dense, vector)
        fused = HybridRetriever([dense, self.bm25], k_rrf=self.fusion.k, weights=self.fusion.weights)
        return Candidates(fused.search(user_id, query, n, read), vector)


@dataclass(frozen=True)
class RankedStage:
    """The learned ranker's order of hybrid's candidates; hybrid's own where the ranker cannot serve.

    The ranker encodes the query itself (its features read both the store encoder's vector and the
    adapter's), so it returns no vector. Hybrid serves a personalizer's vector, and a user whose
    signals are larger than the store's cache for them (:meth:`LearnedRanker.fits`): the ranker
    would build them again for every search, seconds each, where hybrid answers in milliseconds.
    """

    ranker: LearnedRanker
    hybrid: HybridStage

    def candidates(
        self, user_id: str, query: str, n: int, vector: np.ndarray | None = None, read: Read = NOW
    ) -> Candidates:
        """The ranker's top ``n``; hybrid's for a ready ``vector`` or a user too large to keep signals of."""
        if self.hybrid_because(user_id, vector is not None) is not None:
            return self.hybrid.candidates(user_id, query, n, vector, read)
        return Candidates(self.ranker.search(user_id, query, n, read), None)

    def hybrid_because(self, user_id: str, vector_given: bool) -> str | None:
        """Why hybrid serves ``user_id`` instead of the ranker (None: the ranker serves)."""
        if vector_given:
            return "a personalizer's vector: hybrid searched it"
        return self.ranker.hybrid_because(user_id)


@dataclass(frozen=True)
class _VectorSearch:
    """Dense search with a ready query vector, as a retriever (so hybrid fuses it like any other)."""

    dense: DenseRetriever
    vector: np.ndarray

    def search(self, user_id: str, query: str, k: int, read: Read = NOW) -> list[Hit]:
        return self.dense.search_vector(user_id, self.vector, k, read)
