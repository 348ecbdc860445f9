"""Preference memories kept per user: built off the write path, reused until the history changes.

``add`` never calls an LLM. A memory records the history revision it was built from and is stored in
the user's derived slot (so ``forget`` and ``delete`` erase it). A read finds it current, or starts a
rebuild and waits up to a deadline; past the deadline, or when the LLM fails, the previous memory is
used with ``stale=True`` and a :class:`~personamem.errors.MemoryFallbackWarning`, and a rebuild that
was still running stores its result when it finishes. ``refresh`` builds ahead of time, in batches,
skipping users whose memory is current, so an interrupted refresh resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace

from personamem.errors import LLMError, MemoryFallbackWarning, StoreError, warn_fallback
from personamem.preference.extractor import PromptedExtractor
from personamem.preference.memory import PreferenceMemory
from personamem.store import Store

__all__ = ["NAMESPACE", "PreferenceMemories"]

NAMESPACE = "preference-memory"


class PreferenceMemories:
    """The users' preference memories over one store and one extractor; safe to share across threads.

    Args:
        store: the users' records (and the derived slot the memories live in).
        extractor: writes a memory from a history.
        timeout_s: how long a read waits for a rebuild before using the stale memory (None: wait).
    """

    def __init__(self, store: Store, extractor: PromptedExtractor, *, timeout_s: float | None = 30.0) -> None:
        self.store = store
        self.extractor = extractor
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._building: dict[str, Future[PreferenceMemory]] = {}

    @property
    def name(self) -> str:
        """The extractor's name (memories are stored under it)."""
        return self.extractor.name

    def cached(self, user_id: str) -> PreferenceMemory | None:
        """The stored memory, current or not, without building."""
        value = self.store.latest(user_id, NAMESPACE, self.name)
        return None if value is None else PreferenceMemory.from_json(value)

    def stored(self, user_id: str) -> PreferenceMemory:
        """The stored memory as it is, never built here: what the inspector and MCP show.

        ``stale`` when the user's records changed since it was built, or when the user has records
        and no memory yet (the next ``context`` builds one); an unknown user gets an empty memory
        that is not stale (there is nothing to build from).
        """
        revision = self.store.revision(user_id)
        memory = self.cached(user_id) or PreferenceMemory(user_id, extractor=self.name)
        return replace(memory, stale=revision is not None and memory.revision != revision)

    def get(self, user_id: str) -> PreferenceMemory:
        """The user's memory for their current history, rebuilt if stale within ``timeout_s``.

        An unknown user or an empty history gives an empty memory and no LLM call.
        """
        revision = self.store.revision(user_id)
        if revision is None:
            return PreferenceMemory(user_id, extractor=self.name)
        cached = self.cached(user_id)
        if cached is not None and cached.revision == revision:
            return cached
        future = self._start(user_id)
        try:
            built = future.result(timeout=self.timeout_s)
        except FutureTimeout:
            return self._stale(user_id, cached, f"not rebuilt within {self.timeout_s:g} s (still running)")
        except LLMError as exc:
            return self._stale(user_id, cached, f"the LLM failed ({exc})")
        if built.notes and built.notes[0].startswith("rejected") and cached is not None:
            return self._stale(user_id, cached, f"the extractor's answer was {built.notes[0]}")
        return built

    def refresh(
        self,
        user_ids: Sequence[str],
        *,
        batch_size: int = 8,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Build the memories of ``user_ids`` that are missing or stale, ``batch_size`` per LLM call.

        Returns how many were built (unknown users are skipped); ``progress`` gets the running count
        of users done after each batch.

        Raises:
            LLMError: the backend failed; batches finished before it are kept.
        """
        self._settle()
        stale = [u for u in user_ids if self.store.revision(u) is not None and not self._current(u)]
        built = 0
        for start in range(0, len(stale), batch_size):
            batch = stale[start : start + batch_size]
            histories = [(u, self.store.revision(u), self.store.records(u)) for u in batch]
            for memory in self.extractor.extract_many(histories):
                self._keep(memory)
            built += len(batch)
            if progress is not None:
                progress(len(user_ids) - len(stale) + built)
        return built

    def _settle(self) -> None:
        """Wait for the write-behind indexer, whose marking of records as indexed changes the revision.

        Otherwise a memory built right after an ``add`` records the pre-indexing revision and is
        stale 100 ms later: every chat turn would cost two rebuilds. A failed upsert is the store's
        to report (``flush`` raises it there); the memory reads the rows, which are in SQL already.
        """
        with contextlib.suppress(StoreError):
            self.store.flush()

    def _current(self, user_id: str) -> bool:
        cached = self.cached(user_id)
        return cached is not None and cached.revision == self.store.revision(user_id)

    def _start(self, user_id: str) -> Future[PreferenceMemory]:
        """The running rebuild of ``user_id``'s memory, or a new one in a daemon thread.

        A daemon thread, not an executor: a rebuild past its deadline must not hold up the
        interpreter's exit, and Python cannot cancel it.
        """
        with self._lock:
            future = self._building.get(user_id)
            if future is None:
                future = self._building[user_id] = Future()
                threading.Thread(target=self._build, args=(user_id, future), daemon=True).start()
            return future

    def _build(self, user_id: str, future: Future[PreferenceMemory]) -> None:
        try:
            self._settle()
            revision = self.store.revision(user_id)
            memory = self.extractor.extract(user_id, revision, self.store.records(user_id))
            if not (memory.notes and memory.notes[0].startswith("rejected") and self.cached(user_id)):
                self._keep(memory)
            future.set_result(memory)
        except BaseException as exc:  # handed to the waiting reader, which degrades
            future.set_exception(exc)
        finally:
            with self._lock:
                self._building.pop(user_id, None)

    def _keep(self, memory: PreferenceMemory) -> None:
        self.store.set_latest(memory.user_id, NAMESPACE, self.name, memory.to_json())

    def _stale(self, user_id: str, cached: PreferenceMemory | None, why: str) -> PreferenceMemory:
        used = "an older memory, marked stale" if cached is not None else "no memory"
        warn_fallback(
            f"preference memory of user {user_id!r}: {why}; using {used}", MemoryFallbackWarning, stacklevel=3
        )
        return replace(cached or PreferenceMemory(user_id, extractor=self.name), stale=True)
