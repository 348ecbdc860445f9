"""Dense retrieval: cosine between the query's vector and the user's record vectors."""

from __future__ import annotations

import numpy as np

from personamem.retrieval.base import Hit, ranked
from personamem.store import Store
from personamem.store.read import NOW, Read
from personamem.telemetry import staged

__all__ = ["DenseRetriever"]


class DenseRetriever:
    """Embeds the query with the store's encoder and asks the user's vector collection."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def search(self, user_id: str, query: str, k: int, read: Read = NOW) -> list[Hit]:
        """The user's ``k`` records nearest to the query, of those ``read`` sees."""
        return self.search_vector(user_id, self.store.encoder.encode([query])[0], k, read)

    @staged("vector_search")
    def search_vector(self, user_id: str, vector: np.ndarray, k: int, read: Read = NOW) -> list[Hit]:
        """Search with a ready query vector (e.g. a personalized one from PBR)."""
        return ranked(self.store.nearest(user_id, vector, k, read))
