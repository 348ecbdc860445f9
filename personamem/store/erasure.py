"""Erasure: ``forget`` (a user) and ``delete`` (some records), leaving no trace of what went.

A forget marks the user in SQL first, then drops the caches, the view and the collection, then
deletes the rows; an interrupted forget is finished by the next open (``recovery.repair``). With the
embedded index the user's vectors, vector ids and collection name are then gone from every file of
the store's folder (see ``VectorIndex.drop``).

A delete rebuilds the user's collection from the vectors that stay, since Chroma's HNSW ``delete``
marks a vector deleted and keeps its bytes; the rows wait as pending with their vectors meanwhile
(searchable, and repaired after a crash), so its cost grows with the user's record count, not with
the number deleted. With pgvector the rows and their vectors are deleted in one transaction and
nothing is rebuilt (the bytes leave PostgreSQL's files when it is vacuumed: docs/guarantees.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from personamem.records import EventKind
from personamem.store.cache import UserCaches
from personamem.store.indexing import Indexing
from personamem.store.interaction_writer import InteractionWriter
from personamem.store.pgvectors import PgVectorIndex
from personamem.store.recovery import index_again, to_keep

__all__ = ["Erasure"]

_NO_VECTORS = np.zeros((0, 0), dtype=np.float32)  # what a delete keeps to re-index: nothing, on pgvector


class Erasure:
    """Forgets and deletes by store key; shared by a store and its tenant views."""

    def __init__(self, indexing: Indexing, caches: UserCaches, logged: InteractionWriter) -> None:
        self._indexing = indexing
        self._caches = caches
        self._logged = logged  # flushed first: a queued log row may name what is erased

    def forget(self, key: str) -> bool:
        """Delete every row, vector and cached value of the user; False if there was no such user."""
        self._indexing.settle()  # queued records of the user are erased below anyway
        self._logged.flush()
        with self._indexing.lock:
            if not self._indexing.catalog.begin_forget(key):
                return False
            self.finish_forget(key)
            return True

    def finish_forget(self, key: str) -> None:
        """The rest of a forget whose user is marked in SQL: caches, view, collection, then the rows."""
        indexing = self._indexing
        self._caches.evict(key)
        indexing.views.evict(key)
        indexing.index.drop([indexing.names.collection(key)])
        indexing.catalog.finish_forget(key, indexing.names)

    def erase(self, key: str, record_ids: Sequence[str], event: EventKind = "deleted") -> list[str]:
        """Delete these records of the user, their histories ending with ``event``; return the ids deleted."""
        indexing = self._indexing
        indexing.settle()
        self._logged.flush()
        with indexing.lock:
            collection = indexing.names.collection(key)
            if isinstance(indexing.index, PgVectorIndex):  # rows and their vectors go in one transaction
                deleted = indexing.catalog.delete_records(
                    key, record_ids, ([], _NO_VECTORS), indexing.names, event, indexing.index
                )
                if deleted:
                    indexing.views.evict(key)
                return deleted
            # the SQL delete and the rebuild as one step for other processes: a backup never copies
            # the vectors of records whose rows it does not copy
            with indexing.index.exclusive():
                kept = to_keep(indexing, key)
                deleted = indexing.catalog.delete_records(key, record_ids, kept, indexing.names, event)
                del kept  # the rows keep them now; a big user's are indexed again in batches
                if deleted:
                    indexing.views.evict(key)
                    indexing.index.drop([collection])
                    index_again(indexing, key)
            return deleted
