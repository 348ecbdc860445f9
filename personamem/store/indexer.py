"""Write-behind for single records: their vectors reach the vector index from a background thread.

A chat backend adds one turn at a time, and a Chroma write costs about a third of the encoder call
for one text (measured here), so ``Store.add`` commits the row *with its vector* to SQL and returns;
this thread groups queued records into one upsert per user. Nothing is lost or hidden meanwhile:
the row is durable (repair indexes it after a crash, without re-encoding) and searches score pending
vectors straight from SQL.

When a write to the index fails (a full disk, an index that is down), its rows stay pending and
this thread tries again after a backoff that doubles from :data:`BACKOFF_S` up to
:data:`MAX_BACKOFF_S`, so indexing resumes by itself once the cause is gone. A retry indexes every
pending row as SQL has it, read under the write lock, never the records as they were queued: a row
deleted or changed since is not indexed in its old form. Nothing waits on the thread but
:meth:`BackgroundIndexer.flush`, for one attempt; the write lock is held only while an attempt
runs, so a write never queues behind a failing index.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from personamem.errors import DiskFullError, StoreError
from personamem.records import Record

__all__ = ["BACKOFF_S", "MAX_BACKOFF_S", "BackgroundIndexer"]

_GROUP = 256  # queued records that start an upsert without waiting out the linger
# how long the first queued record waits for company: a Chroma upsert costs about the same for one
# vector as for ten, and a burst of adds indexed one by one competes with the adds for the CPU
_LINGER_S = 0.1
BACKOFF_S = 1.0
"""The wait before the first retry after a failed write to the index."""
MAX_BACKOFF_S = 30.0
"""The longest wait between retries: indexing resumes at most this long after its cause is fixed."""
log = logging.getLogger("personamem.store")

_Queued = list[tuple[list[Record], np.ndarray]]


class BackgroundIndexer:
    """One daemon thread: queued (records, vectors) go to ``index`` in groups; after a failure, ``retry``.

    ``retry`` indexes every pending row from SQL (``recovery.index_pending_rows``): after a failure
    the pending rows, not the queue, say what is left to index.
    """

    def __init__(
        self, index: Callable[[Sequence[Record], np.ndarray], None], retry: Callable[[], object]
    ) -> None:
        self._index = index
        self._retry = retry
        self._changed = threading.Condition()
        self._queued: _Queued = []
        self._queued_since = 0.0
        self._failed = False  # pending rows are left to a retry, due at _retry_at
        self._retry_at = 0.0
        self._backoff = BACKOFF_S
        self._error: Exception | None = None  # of the latest attempt, while it is not made good
        self._attempts = 0
        self._busy = False
        self._hurry = False  # a flush wants the retry now, backoff or not
        self._stopping = False
        self._thread: threading.Thread | None = None

    def submit(self, records: list[Record], vectors: np.ndarray) -> None:
        """Queue records whose rows are already committed as pending."""
        with self._changed:
            self._start()
            if not self._queued:
                self._queued_since = time.monotonic()
            self._queued.append((records, vectors))
            self._changed.notify_all()

    def retry_later(self) -> None:
        """Leave rows that another write staged but failed to index (a bulk write) to a retry.

        That write's caller has the error; the retry keeps its schedule if one is set already, so
        writes failing in a row do not put it off.
        """
        with self._changed:
            self._start()
            if not self._failed:
                self._failed, self._retry_at = True, time.monotonic() + self._backoff
                self._changed.notify_all()

    def flush(self) -> None:
        """Wait for one attempt at what is queued; after a failure, for a retry at once, backoff or not.

        So a flush once the cause was fixed (``check``, ``close``) finds every row indexed, and one
        while it lasts (a full disk) fails as fast as that attempt. Queued records keep their linger.

        Raises:
            StoreError: that attempt failed (:class:`DiskFullError` for want of space); the rows stay
                pending, still searchable from SQL, and this thread keeps trying them.
        """
        with self._changed:
            if self._thread is None:
                return
            seen = self._attempts
            if self._failed:
                self._hurry = True
                self._changed.notify_all()
            self._changed.wait_for(
                lambda: not (self._busy or self._queued) and (not self._failed or self._attempts > seen)
            )
            error = self._error if self._failed else None
        if isinstance(error, DiskFullError):
            message = f"{error}; the records waiting for the vector index stay pending and searchable"
            raise DiskFullError(message, path=error.path, free=error.free) from error
        if error is not None:
            raise StoreError(f"indexing queued records failed: {error}; they stay pending") from error

    def close(self) -> None:
        """Flush, then stop the thread; rows a failure left pending wait for the next open."""
        try:
            self.flush()
        finally:
            with self._changed:
                thread, self._stopping = self._thread, True
                self._changed.notify_all()
            if thread is not None:
                thread.join()
            with self._changed:
                self._thread, self._stopping, self._failed = None, False, False
                self._changed.notify_all()  # a flush of another thread waits for nothing more

    def _start(self) -> None:
        """Under the condition: start the thread on first use."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="personamem-indexer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._changed:
                due = self._next_attempt()
                if due is None:
                    return
                retry, queued = due
            error: Exception | None = None
            try:
                if retry:
                    self._retry()
                else:
                    self._index([r for rs, _ in queued for r in rs], np.vstack([v for _, v in queued]))
            except Exception as failure:  # the rows stay pending in SQL; tried again after the backoff
                error = failure
            with self._changed:
                self._busy = False
                self._attempts += 1
                self._error = error
                if error is not None:
                    self._failed_with(error)
                elif retry:
                    self._failed, self._backoff = False, BACKOFF_S
                self._changed.notify_all()

    def _next_attempt(self) -> tuple[bool, _Queued] | None:
        """Under the condition: wait until an attempt is due, then take it: (a retry?, the queued records).

        A retry takes the queue along, since its rows are pending in SQL too. None: stop.
        """
        while True:
            if self._stopping and not self._queued:
                return None
            due, now = self._due_at(), time.monotonic()
            if due is not None and due <= now:
                retry, queued = self._failed, self._queued
                self._queued, self._busy, self._hurry = [], True, False
                return retry, queued
            self._changed.wait(None if due is None else due - now)

    def _due_at(self) -> float | None:
        """When the next attempt is due (None: nothing to do).

        At once for a stop, or a flush after a failure; at the end of the backoff after a failure;
        after the linger otherwise.
        """
        if not (self._failed or self._queued):
            return None
        if self._hurry or self._stopping:
            return 0.0
        if self._failed:
            return self._retry_at
        if sum(len(records) for records, _ in self._queued) >= _GROUP:
            return 0.0
        return self._queued_since + _LINGER_S

    def _failed_with(self, error: Exception) -> None:
        """Under the condition: leave the pending rows to a retry after the backoff, which doubles."""
        self._failed = True
        self._retry_at = time.monotonic() + self._backoff
        log.warning(
            "indexing failed, trying again in %.0f s (the rows stay pending and searchable): %s",
            self._backoff,
            error,
        )
        self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)
