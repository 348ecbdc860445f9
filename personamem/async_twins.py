"""The coroutine twins of ``add``, ``search`` and ``context``, for callers on an event loop.

Each runs its sync call on a worker thread (``asyncio.to_thread``), so the encoder, SQL and an LLM
stage's wait do not block the loop; the arguments, results and exceptions are the sync call's.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, Unpack

from personamem.contract import Context, Hits, method_of
from personamem.pipeline import PipelineConfig
from personamem.records import Record
from personamem.store.read import ReadOptions

__all__ = ["AsyncTwins"]


class _Sync(Protocol):
    """The sync calls the twins run (``PersonaMem``'s), so mypy checks that the two agree."""

    def add(self, user_id: str, text: str = "", **fields: Any) -> Record: ...

    def search(
        self,
        user_id: str,
        query: str,
        k: int = 5,
        method: PipelineConfig | str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Hits: ...

    def context(
        self,
        user_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        method: PipelineConfig | str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Context: ...


class AsyncTwins:
    """``aadd``, ``asearch`` and ``acontext``, for a class that defines ``add``, ``search``, ``context``."""

    async def aadd(self: _Sync, user_id: str, text: str = "", **fields: Any) -> Record:
        """:meth:`add` without blocking the event loop (the encoder and SQL run on a thread)."""
        return await asyncio.to_thread(self.add, user_id, text, **fields)

    async def asearch(
        self: _Sync,
        user_id: str,
        query: str,
        k: int = 5,
        method: PipelineConfig | str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Hits:
        """:meth:`search` without blocking the event loop."""
        return await asyncio.to_thread(self.search, user_id, query, k, method, **read)

    async def acontext(
        self: _Sync,
        user_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        method: PipelineConfig | str | None = None,
        pipeline: PipelineConfig | str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Context:
        """:meth:`context` without blocking the event loop (an LLM stage's wait included)."""
        return await asyncio.to_thread(
            self.context,
            user_id,
            query,
            budget_tokens=budget_tokens,
            method=method_of(method, pipeline),
            **read,
        )
