"""Write-behind for the interaction log: a logged call's row reaches SQL from a background thread.

Logging is on by default, so its write sits on every ``search`` and ``context``: a SQLite write
transaction cost 0.5–0.7 ms against a 7.5 ms ``context()`` (``bench/interaction_log.py``: 1.086×,
the target is 1.05×). The call returns with its interaction id and this thread inserts the queued
rows, several per transaction. The row's user is checked inside that transaction, so a user
forgotten meanwhile gets no row. Reads of the log, feedback and erasure flush the queue first; a
process killed before its queue is written loses those calls' log entries, never their answers.
While the database is unreachable (a PostgreSQL restart) a group is tried again for up to
:data:`OUTAGE_S`, so a restart does not cost the log the calls answered just before it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from personamem.errors import PersonaMemWarning, StoreUnavailableError

__all__ = ["OUTAGE_S", "InteractionWriter"]

_GROUP = 256  # rows per transaction at most
OUTAGE_S = 30.0
"""How long a group of rows waits for an unreachable database before its entries are given up."""
_STOP = None
log = logging.getLogger("personamem.store")


class InteractionWriter:
    """One daemon thread that hands queued interaction rows to ``write`` in groups."""

    def __init__(self, write: Callable[[list[dict[str, Any]]], int], outage_s: float = OUTAGE_S) -> None:
        self._write = write
        self._outage_s = outage_s
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._lost: list[str] = []  # what failed since the last flush, reported there

    def submit(self, row: dict[str, Any]) -> None:
        """Queue one interaction row (written soon, by the thread)."""
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="personamem-interactions", daemon=True)
                self._thread.start()
        self._queue.put(row)

    def flush(self) -> None:
        """Wait until every queued row was written; a warning says how many could not be."""
        self._queue.join()
        lost, self._lost = self._lost, []
        if lost:
            warnings.warn(f"logged calls not kept: {'; '.join(lost)}", PersonaMemWarning, stacklevel=2)

    def close(self) -> None:
        """Flush, then stop the thread."""
        self.flush()
        with self._start_lock:
            if self._thread is not None:
                self._queue.put(_STOP)
                self._thread.join()
                self._thread = None

    def _run(self) -> None:
        while True:
            row = self._queue.get()
            if row is _STOP:
                self._queue.task_done()
                return
            group = [row]
            while len(group) < _GROUP:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    self._queue.put(_STOP)  # after this group, as queued
                    self._queue.task_done()
                    break
                group.append(more)
            try:
                self._write_through_outage(group)
            except Exception as error:  # the calls were answered; only their log entries are lost
                log.warning("%d logged call(s) not kept: %s", len(group), error)
                self._lost.append(f"{len(group)} ({error})")
            finally:
                for _ in group:
                    self._queue.task_done()

    def _write_through_outage(self, group: list[dict[str, Any]]) -> None:
        """Write ``group``, trying again (backoff 0.1 s doubling to 2 s) while the database is unreachable."""
        deadline, wait = time.monotonic() + self._outage_s, 0.1
        while True:
            try:
                self._write(group)
                return
            except StoreUnavailableError:
                if time.monotonic() + wait > deadline:
                    raise
                time.sleep(wait)
                wait = min(wait * 2, 2.0)
