"""Steps 2–4 of the write protocol (``store/store.py``): stage the rows, upsert their vectors, mark them.

With the vectors in the database (pgvector) the three happen in the rows' own transaction. With
Chroma the rows commit first, as ``pending``, and their vectors follow: at once for a bulk batch, or
from the background indexer (``store/indexer.py``) for a single ``add``. Every write of a process
takes this one lock, so a ``forget`` is never undone by a late upsert of the same process.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Sequence

import numpy as np

from personamem.encoder import Encoder
from personamem.errors import DiskFullError, PartialWriteError, StoreError
from personamem.records import EventKind, Record
from personamem.store.indexer import BackgroundIndexer
from personamem.store.pgvectors import PgVectorIndex
from personamem.store.pseudonyms import Pseudonyms
from personamem.store.sql import SqlCatalog
from personamem.store.vector_home import VectorHome
from personamem.store.views import VectorViews

__all__ = ["Indexing"]


class Indexing:
    """One process's writes of rows and vectors; shared by a store and its tenant views (store keys only)."""

    def __init__(
        self,
        catalog: SqlCatalog,
        index: VectorHome,
        names: Pseudonyms,
        views: VectorViews,
        encoder: Callable[[], Encoder],
        index_pending_rows: Callable[[], object],
    ) -> None:
        self.catalog = catalog
        self.index = index
        self.names = names
        self.views = views
        self._encoder = encoder  # called when needed: the default encoder loads on first use
        self.lock = threading.RLock()
        # after a failed write, the background retries by indexing what SQL holds pending
        self._background = BackgroundIndexer(self.index_records, index_pending_rows)

    def stage(
        self,
        records: list[Record],
        vectors: np.ndarray,
        relabel: Sequence[Record] = (),
        relabel_event: EventKind = "updated",
    ) -> None:
        """Write records with their vectors, searchable when this returns.

        With the index in the database (pgvector) they are indexed in the same transaction; else
        committed pending and queued for the background indexer.
        """
        if isinstance(self.index, PgVectorIndex):
            with self.lock:
                _, indexed = self.catalog.stage_indexed(
                    records, self.names, vectors, self.index, relabel=relabel, relabel_event=relabel_event
                )
                for user_id, done in indexed.items():
                    self.views.advance(user_id, done.before, done.after, done.vector_ids, done.vectors)
            return
        with self.lock:
            changed = self.catalog.stage(
                records, self.names, vectors, relabel=relabel, relabel_event=relabel_event
            )
        if changed:
            self._background.submit(changed, vectors)

    def write(
        self,
        records: Sequence[Record],
        vectors: np.ndarray | None,
        batch_size: int,
        progress: Callable[[int], None] | None,
    ) -> int:
        """Steps 2–4 in batches, in the caller's thread; return how many records were new or changed.

        Raises:
            DiskFullError: the first batch failed for want of space.
            PartialWriteError: a batch failed at the write; it says how many records before it are
                durable (raised from the :class:`DiskFullError` when the disk is full).
        """
        written = 0
        for start in range(0, len(records), batch_size):
            batch = records[start : start + batch_size]
            batch_vectors = vectors[start : start + batch_size] if vectors is not None else None
            try:
                written += self._write_batch(batch, batch_vectors)
            except Exception as error:
                if start == 0 and isinstance(error, DiskFullError):
                    raise
                raise PartialWriteError(
                    f"stored {start} of {len(records)} record(s), then the write failed: {error}; adding "
                    "the same records again skips the stored ones and finishes the job",
                    stored=start,
                    total=len(records),
                ) from error
            if progress is not None:
                progress(len(batch))
        return written

    def _write_batch(self, batch: Sequence[Record], vectors: np.ndarray | None) -> int:
        """One batch of :meth:`write`; only its new or changed records are encoded (unless ``vectors``)."""
        position = {(r.user_id, r.id): i for i, r in enumerate(batch)}
        with self.lock:
            changed = self.catalog.stage(batch, self.names)
            if not changed:
                return 0
            if vectors is None:
                changed_vectors = self._encoder().encode([r.text for r in changed])
            else:
                changed_vectors = vectors[[position[(r.user_id, r.id)] for r in changed]]
            try:
                self.index_records(changed, changed_vectors)
            except Exception:
                self._background.retry_later()  # staged: their rows stay pending until then
                raise
        return len(changed)

    def index_records(self, records: Sequence[Record], vectors: np.ndarray) -> None:
        """Steps 3–4 for staged records: upsert their vectors per user, then mark the rows indexed.

        Under the write lock, so a ``forget`` in this process is never undone by a late upsert; a
        user forgotten meanwhile by another process has the vectors just written removed again.
        """
        # a record changed twice while queued: only its latest version is indexed
        latest = {(record.user_id, record.id): i for i, record in enumerate(records)}
        by_user: dict[str, list[int]] = {}
        for (user_id, _), i in sorted(latest.items(), key=lambda item: item[1]):
            by_user.setdefault(user_id, []).append(i)
        with self.lock:
            for user_id, rows in by_user.items():
                if self.catalog.revision(user_id) is None:
                    continue  # forgotten since it was staged: nothing to index
                batch = [records[i] for i in rows]
                collection = self.names.collection(user_id)
                vector_ids = [self.names.vector_id(user_id, r.id) for r in batch]
                if isinstance(self.index, PgVectorIndex):  # the vectors commit with the rows' new status
                    write = functools.partial(
                        self.index.write, name=collection, ids=vector_ids, vectors=vectors[rows]
                    )
                    tokens = self.catalog.mark_indexed(user_id, batch, write)
                else:
                    try:
                        self.index.upsert(collection, vector_ids, vectors[rows])
                    except DiskFullError:
                        raise
                    except Exception as exc:
                        raise StoreError(
                            f"vector index failed while writing {len(batch)} record(s) of user {user_id!r} "
                            f"({exc}); they are kept as pending in SQL, searchable, and indexed by a retry"
                        ) from exc
                    tokens = self.catalog.mark_indexed(user_id, batch, vectors=vectors[rows])
                if tokens is None:
                    self.index.drop([collection])
                else:
                    self.views.advance(user_id, *tokens, vector_ids, vectors[rows])

    @property
    def encoder(self) -> Encoder:
        """The store's encoder (loaded on first use), for rows that kept no vector."""
        return self._encoder()

    def index_pending(self, pending: list[tuple[Record, np.ndarray | None]]) -> int:
        """Index pending rows, encoding only those whose vector was not kept; return how many."""
        records = [record for record, _ in pending]
        missing = [i for i, (_, vector) in enumerate(pending) if vector is None]
        encoded = iter(self._encoder().encode([records[i].text for i in missing]) if missing else [])
        self.index_records(records, np.stack([next(encoded) if v is None else v for _, v in pending]))
        return len(records)

    def flush(self) -> None:
        """Wait until every queued record is in the vector index.

        Raises:
            StoreError: indexing failed; the records stay pending and searchable, and are indexed later.
        """
        self._background.flush()

    def settle(self) -> None:
        """Wait for the queued records before a write that changes rows they may be among.

        A failure is not raised: those rows stay pending, which the write that follows expects.
        """
        with contextlib.suppress(StoreError):
            self._background.flush()

    def close(self) -> None:
        """Index what is queued, then stop the background thread; a failure is left to the next open."""
        with contextlib.suppress(StoreError):
            self._background.close()
