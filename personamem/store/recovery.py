"""Finding and healing what a crash or a lagging process left in the vector index.

SQL is the source of truth, so every fault of the index is healed the same way: rebuild the user's
collection from SQL. :func:`rebuild` takes the vectors the rows keep in SQL (for rows written before
they kept them: what the index can still read, the rest encoded again from the records' text), and
puts every row back to ``pending`` *with* its vector before it drops
the collection, so a search from any process scores that user from SQL while the rebuild runs,
and a crash midway leaves pending rows that opening the store indexes. :func:`scan` is the full
scan an operator runs (``personamem check``): it also reads every vector back, since an index can
list ids whose vectors it lost (see ``store/vectors.py``) while counts and ids agree. :func:`repair`
runs on every open: it finishes interrupted forgets and indexes the rows a crash left pending
(:func:`index_pending_rows`, which the background indexer also runs to retry after a failed write).
Each works on the store's :class:`~personamem.store.indexing.Indexing` (and the erasure's
``finish_forget``), not the store, so this module imports neither the store nor its erasure (which
calls :func:`to_keep` and :func:`index_again`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from personamem.errors import UnreadableIndexError
from personamem.store.tables import RecordStatus

if TYPE_CHECKING:
    from personamem.indexing import Indexing
    from personamem.records import Record
    from personamem.store.vector_home import VectorHome

__all__ = [
    "ConsistencyReport",
    "heal",
    "index_again",
    "index_pending_rows",
    "readable",
    "rebuild",
    "repair",
    "scan",
    "to_keep",
]

_REBUILD_BATCH = 5_000
"""Rows a rebuild (a delete's too) indexes at a time, so a big user's records and vectors are not
all held at once."""

log = logging.getLogger("personamem.store")


@dataclass
class ConsistencyReport:
    """Differences between SQL and the vector index, by user and vector id; all empty means they agree."""

    pending: dict[str, set[str]] = field(default_factory=dict)
    missing_vectors: dict[str, set[str]] = field(default_factory=dict)
    orphan_vectors: dict[str, set[str]] = field(default_factory=dict)
    orphan_collections: set[str] = field(default_factory=set)
    unreadable_vectors: dict[str, set[str]] = field(default_factory=dict)
    """Vectors the index lists but cannot read back (a collection a lagging process overwrote)."""

    @property
    def ok(self) -> bool:
        """True when every row is indexed and rows and readable vectors match one to one."""
        return not (
            self.pending
            or self.missing_vectors
            or self.orphan_vectors
            or self.orphan_collections
            or self.unreadable_vectors
        )

    @property
    def damaged_users(self) -> set[str]:
        """Store keys of the users whose collection must be rebuilt."""
        return set(self.missing_vectors) | set(self.orphan_vectors) | set(self.unreadable_vectors)


def scan(indexing: Indexing, progress: Callable[[int, int], None] | None = None) -> ConsistencyReport:
    """Compare SQL rows with the vectors the index can read, for every user of the store.

    ``progress(done, total)`` is called after each user (a full scan takes minutes on a large store).
    """
    indexing.flush()
    report = ConsistencyReport()
    users = sorted(indexing.catalog.all_users())
    report.orphan_collections = indexing.index.names() - {indexing.names.collection(u) for u in users}
    for done, user in enumerate(users):
        collection = indexing.names.collection(user)
        rows = indexing.catalog.vector_ids(user)
        pending = indexing.catalog.vector_ids(user, RecordStatus.PENDING)
        try:  # one read gives the ids and shows that every vector reads back
            vectors = set(indexing.index.vectors(collection)[0])
        except UnreadableIndexError:
            vectors = indexing.index.ids(collection)
            report.unreadable_vectors[user] = indexing.index.salvage(collection)[2] or vectors
        if pending:
            report.pending[user] = pending
        if rows - pending - vectors:
            report.missing_vectors[user] = rows - pending - vectors
        if vectors - rows:
            report.orphan_vectors[user] = vectors - rows
        if progress is not None:
            progress(done + 1, len(users))
    return report


def readable(index: VectorHome, collection: str) -> tuple[list[str], np.ndarray]:
    """The collection's vectors, or as many as can be read when it is damaged."""
    try:
        return index.vectors(collection)
    except UnreadableIndexError:
        ids, matrix, _ = index.salvage(collection)
        return ids, matrix


def to_keep(indexing: Indexing, key: str) -> tuple[list[str], np.ndarray]:
    """The user's indexed vectors a rebuild keeps: SQL's, where every indexed row keeps one, else the index's.

    SQL's read in a fifth of the memory of one Chroma ``get`` of them all (50,000 vectors: 0.14 GB
    against 1.1 GB) and cannot be damaged with the index.
    """
    in_sql = indexing.catalog.kept_vectors(key)
    if in_sql is not None:
        return in_sql[1], in_sql[2]
    collection = indexing.names.collection(key)
    indexing.index.refresh(collection)  # another process may have indexed vectors to keep
    return readable(indexing.index, collection)


def index_again(indexing: Indexing, key: str) -> int:
    """Index the user's pending rows (a rebuild's) a batch at a time; return how many."""
    done, after = 0, None
    while batch := indexing.catalog.pending(key, after=after, limit=_REBUILD_BATCH).get(key, []):
        done += indexing.index_pending(batch)
        after = batch[-1][0].id
    return done


def rebuild(indexing: Indexing, user: str) -> int:
    """Rebuild the collection of the user with store key ``user`` from SQL; return the rows indexed.

    Also what repair does for a delete that died before its own rebuild: the vectors of rows SQL no
    longer has are not kept.
    """
    with indexing.lock:
        collection = indexing.names.collection(user)
        ids: list[str] = []
        lost: set[str] = set()
        missing: dict[str, Record] = {}
        in_sql = indexing.catalog.kept_vectors(user)
        from_sql = 0 if in_sql is None else len(in_sql[1])
        if in_sql is not None:  # every indexed row keeps its vector: neither the index nor the encoder
            kept = dict(zip(in_sql[1], in_sql[2], strict=True))
        else:  # rows indexed before they kept vectors: what the index still has, the rest encoded
            indexing.index.refresh(collection)
            ids, matrix, lost = indexing.index.salvage(collection)
            indexed = indexing.catalog.vector_ids(user, RecordStatus.INDEXED)
            kept = {vid: row for vid, row in zip(ids, matrix, strict=True) if vid in indexed}
            missing = indexing.catalog.by_vector_ids(user, sorted(indexed - kept.keys()))
            if missing:
                encoded = indexing.encoder.encode([record.text for record in missing.values()])
                kept.update(zip(missing, encoded, strict=True))
        vectors = np.stack(list(kept.values())) if kept else np.zeros((0, 0), dtype=np.float32)
        indexing.catalog.requeue(user, (list(kept), vectors))  # searchable from SQL from here on
        del in_sql, kept, vectors  # a big user's rows are indexed again in batches: hold one at a time
        indexing.views.evict(user)
        indexing.index.drop([collection])
        indexed_again = index_again(indexing, user)  # none for a user whose rows are all gone
    log.warning(
        "rebuilt the vector collection of a user from SQL: %d vector(s) kept in SQL, %d read back, "
        "%d encoded again (%d could not be read)",
        from_sql,
        len(ids),
        len(missing),
        len(lost),
    )
    return indexed_again


def repair(indexing: Indexing, finish_forget: Callable[[str], None]) -> int:
    """Finish interrupted forgets (the erasure's ``finish_forget``), index pending rows; return how many."""
    with indexing.lock:
        for user in indexing.catalog.users_being_forgotten():
            finish_forget(user)
        return index_pending_rows(indexing)


def index_pending_rows(indexing: Indexing) -> int:
    """Index every pending row, as SQL has it now; return how many.

    Under the write lock, so a row this process deletes or changes is never indexed in an older
    form: the background indexer's retry after a failed write (``store/indexer.py``) runs this.
    """
    with indexing.lock:
        repaired = 0
        for user, pending in indexing.catalog.pending().items():
            if indexing.index.ids(indexing.names.collection(user)) - indexing.catalog.vector_ids(user):
                # a delete died between its SQL commit and its rebuild: the collection still
                # holds the deleted vectors, so rebuild it rather than index into it
                repaired += rebuild(indexing, user)
            else:
                repaired += indexing.index_pending(pending)
        return repaired


def heal(indexing: Indexing, report: ConsistencyReport, finish_forget: Callable[[str], None]) -> list[str]:
    """Fix what ``report`` found: rebuild damaged users, erase orphan collections, :func:`repair`.

    Returns the store keys of the users rebuilt.
    """
    rebuilt = sorted(report.damaged_users)
    for user in rebuilt:
        rebuild(indexing, user)
    if report.orphan_collections:
        indexing.index.drop(report.orphan_collections)
    repair(indexing, finish_forget)
    return rebuilt
