"""The query-personalizer seam and the retriever that searches with its vector.

PBR ("Personalize Before Retrieve") changes the query, not the ranking: a personalizer maps
(user, query) to a vector in the store encoder's space, and dense search does the rest. Behind the
:class:`~personamem.retrieval.Retriever` seam, a personalized retriever plugs into the CLI, the
evaluation harness and the framework adapters unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from personamem.retrieval.base import Hit, Preparable
from personamem.retrieval.dense import DenseRetriever
from personamem.store import Store

__all__ = ["PersonalizedRetriever", "QueryPersonalizer"]


@runtime_checkable
class QueryPersonalizer(Protocol):
    """Maps a user's query to a query vector in the store encoder's space."""

    def personalize(self, user_id: str, query: str) -> np.ndarray:
        """The personalized query vector (any norm; it is normalized before search)."""
        ...


class PersonalizedRetriever:
    """Dense retrieval with the personalizer's vector instead of the raw query's."""

    def __init__(self, store: Store, personalizer: QueryPersonalizer) -> None:
        self.personalizer = personalizer
        self._dense = DenseRetriever(store)

    def search(self, user_id: str, query: str, k: int) -> list[Hit]:
        """The user's top ``k`` records for the personalized query."""
        vector = np.asarray(self.personalizer.personalize(user_id, query), dtype=np.float32)
        norm = float(np.linalg.norm(vector))
        if not np.isfinite(norm) or norm == 0.0:
            raise ValueError(f"personalized query vector for user {user_id!r} has norm {norm}")
        return self._dense.search_vector(user_id, vector / norm, k)

    def prepare(self, requests: Sequence[tuple[str, str]]) -> None:
        """Let the personalizer batch its LLM calls for many queries (a no-op if it cannot)."""
        if isinstance(self.personalizer, Preparable):
            self.personalizer.prepare(requests)
