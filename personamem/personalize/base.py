"""The query-personalizer seam and the retriever that searches with its vector.

PBR ("Personalize Before Retrieve") changes the query, not the ranking: a personalizer maps
(user, query) to a vector in the store encoder's space, and dense search does the rest. Behind the
:class:`~personamem.retrieval.Retriever` seam, a personalized retriever plugs into the CLI, the
evaluation harness and the framework adapters unchanged.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from personamem.store.read import NOW, Read

__all__ = ["QueryPersonalizer"]


@runtime_checkable
class QueryPersonalizer(Protocol):
    """Maps a user's query to a query vector in the store encoder's space."""

    def personalize(self, user_id: str, query: str, read: Read = NOW) -> np.ndarray:
        """The personalized query vector (any norm; it is normalized before search).

        ``read`` is the call's time and filter: what a personalizer searches the user's records
        for (PBR's pseudo feedback) is searched under it.
        """
        ...
