"""Near-duplicates at write: what ``add`` does with a statement the user's memory nearly holds.

Exact repeats are free already (a record's id is its content's hash, and re-adding it is a no-op);
a near-duplicate ("I'm vegetarian." after "I am vegetarian.") has another id. ``add`` compares the
new vector with the user's current records, which costs one exact nearest-neighbour lookup.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING

from personamem.errors import InvalidInputError
from personamem.store.read import NOW

if TYPE_CHECKING:
    import numpy as np

    from personamem.records import Record
    from personamem.store.indexing import Indexing
    from personamem.store.vector_reads import VectorReads

__all__ = ["DUPLICATE_THRESHOLD", "DuplicatePolicy", "Duplicates", "check_duplicates"]

# cosine at or above which two records say the same thing (all-MiniLM-L6-v2); see docs/RESULTS.md
DUPLICATE_THRESHOLD = 0.95
DUPLICATE_WIDTH = 100
"""How wide HNSW looks for the check's nearest record, for a user too large to copy (a search looks
300-400 wide for its recall at k; the check needs the nearest only, and a near-duplicate is near).
A 50,000-vector user, 900 of its vectors perturbed to cosine 0.86-0.98: the nearest at 100 was the
exact scan's for all 900 on PostgreSQL (2.0 ms against 5.7 at 400; a single ``add`` 29-31 -> 25 ms)
and on Chroma (1.7 ms against 3.1 at 300)."""


class DuplicatePolicy(StrEnum):
    """What ``add`` does when the user already has a near-duplicate of the record."""

    KEEP = "keep"  # store it anyway, and report the duplicate
    SKIP = "skip"  # store nothing; return the existing record
    MERGE_METADATA = "merge-metadata"  # add the new record's metadata to the existing one


def check_duplicates(policy: object, threshold: object) -> tuple[DuplicatePolicy, float]:
    """A valid (policy, threshold) pair.

    Raises:
        InvalidInputError: an unknown policy, or a threshold outside (0, 1] other than one above 1
            (which turns the check off).
    """
    try:
        chosen = DuplicatePolicy(str(policy))  # a member's str is its value
    except ValueError:
        names = ", ".join(p.value for p in DuplicatePolicy)
        raise InvalidInputError(f"duplicates must be one of {names}, got {policy!r}") from None
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not threshold > 0:
        raise InvalidInputError(
            f"duplicate threshold must be a cosine in (0, 1] (above 1: off), got {threshold!r}"
        )
    return chosen, float(threshold)


class Duplicates:
    """What ``add`` does with a record the user's memory nearly holds; by store key, shared by views."""

    def __init__(self, reads: VectorReads, indexing: Indexing) -> None:
        self._reads = reads
        self._indexing = indexing

    def resolve(
        self, record: Record, vector: np.ndarray, policy: DuplicatePolicy, threshold: float
    ) -> tuple[Record, bool]:
        """The record ``add`` returns under ``policy``, and whether it is to be stored.

        A near-duplicate found is named in the returned record's ``duplicate_of``; a skipped or merged
        record returns the existing one, which a merge has relabelled already.
        """
        near = self._nearest(record, vector, threshold)
        if near is None:
            return record, True
        if policy is DuplicatePolicy.SKIP:
            return near.model_copy(update={"duplicate_of": near.id}), False
        if policy is DuplicatePolicy.MERGE_METADATA:
            return self._merge(near, record), False
        return record.model_copy(update={"duplicate_of": near.id}), True

    def _nearest(self, record: Record, vector: np.ndarray, threshold: float) -> Record | None:
        """The user's current record nearest to ``vector`` at ``threshold`` or above, other than itself."""
        if threshold > 1:  # cosine never exceeds 1: the check is off
            return None
        own = self._reads.names.vector_id(record.user_id, record.id)
        for vid, score in self._reads.nearest_ids(record.user_id, vector, 2, NOW, width=DUPLICATE_WIDTH)[0]:
            if vid == own:
                continue
            if score < threshold:
                return None
            return self._reads.catalog.by_vector_ids(record.user_id, [vid]).get(vid)  # most adds skip this
        return None

    def _merge(self, near: Record, record: Record) -> Record:
        """Keep ``near`` with ``record``'s metadata added (``record``'s values win on equal keys)."""
        merged = near.model_copy(update={"metadata": {**near.metadata, **record.metadata}})
        if merged.metadata != near.metadata:
            self._indexing.settle()  # a queued ``near`` is marked indexed by its hash
            with self._indexing.lock:
                self._indexing.catalog.stage([], self._indexing.names, relabel=[merged])
        return merged.model_copy(update={"duplicate_of": near.id})
