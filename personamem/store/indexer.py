"""Write-behind for single records: their vectors reach the vector index from a background thread.

A chat backend adds one turn at a time, and a Chroma write costs about a third of the encoder call
for one text (measured here), so ``Store.add`` commits the row *with its vector* to SQL and returns;
this thread groups queued records into one upsert per user. Nothing is lost or hidden meanwhile:
the row is durable (repair indexes it after a crash, without re-encoding) and searches score pending
vectors straight from SQL.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from personamem.errors import StoreError
from personamem.records import Record

__all__ = ["BackgroundIndexer"]

_GROUP = 256  # records per upsert at most
# how long the first queued record waits for company: a Chroma upsert costs about the same for one
# vector as for ten, and a burst of adds indexed one by one competes with the adds for the CPU
_LINGER_S = 0.1
_STOP = None


class BackgroundIndexer:
    """One daemon thread that hands queued (records, vectors) to ``index`` in groups."""

    def __init__(self, index: Callable[[Sequence[Record], np.ndarray], None]) -> None:
        self._index = index
        self._queue: queue.Queue[tuple[list[Record], np.ndarray] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._error: BaseException | None = None

    def submit(self, records: list[Record], vectors: np.ndarray) -> None:
        """Queue records whose rows are already committed as pending."""
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="personamem-indexer", daemon=True)
                self._thread.start()
        self._queue.put((records, vectors))

    def flush(self) -> None:
        """Wait until every queued record was handed to the index.

        Raises:
            StoreError: the last group failed (its rows stay pending, still searchable from SQL,
                and are indexed by the next group, ``repair`` or the next open).
        """
        self._queue.join()
        error, self._error = self._error, None
        if error is not None:
            raise StoreError(f"indexing queued records failed: {error}; they stay pending") from error

    def close(self) -> None:
        """Flush, then stop the thread."""
        try:
            self.flush()
        finally:
            if self._thread is not None:
                self._queue.put(_STOP)
                self._thread.join()
                self._thread = None

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                self._queue.task_done()
                return
            group, taken = [item], 1
            until = time.monotonic() + _LINGER_S
            while sum(len(records) for records, _ in group) < _GROUP:
                try:
                    more = self._queue.get(timeout=max(0.0, until - time.monotonic()))
                except queue.Empty:
                    break
                if more is _STOP:
                    self._queue.put(_STOP)  # handle the group first, stop on the next turn
                    self._queue.task_done()
                    break
                group.append(more)
                taken += 1
            try:
                self._index([r for records, _ in group for r in records], np.vstack([v for _, v in group]))
            except Exception as error:  # kept for flush(); the rows stay pending in SQL
                self._error = error
            finally:
                for _ in range(taken):
                    self._queue.task_done()
