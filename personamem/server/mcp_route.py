"""``/mcp`` of the REST app: the MCP SDK is imported, and its session manager started, on the first call.

Importing the SDK was about a third of a server worker's start (0.45 s of CPU of 1.5, its pydantic
models built at import), paid by every worker of every ``serve`` whether or not an agent ever calls
``/mcp``. The import runs in a worker thread, so the event loop keeps answering meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from anyio import to_thread
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from personamem.errors import MissingExtraError
from personamem.memory import PersonaMem
from personamem.store.keys import ApiKey

if TYPE_CHECKING:
    from personamem.mcp_server import HttpEndpoint

__all__ = ["LazyMcp"]


class LazyMcp:
    """The ASGI app of ``/mcp``: MCP's streamable HTTP over the REST app's keys, started when first called.

    A 501 naming the extra where ``mcp`` is not installed. :meth:`close` (the host app's lifespan,
    at shutdown) stops the session manager if a call started it.
    """

    def __init__(self, authenticate: Callable[[Request], tuple[PersonaMem, ApiKey]]) -> None:
        self._authenticate = authenticate
        self._endpoint: HttpEndpoint | None = None
        self._serving: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        self._stop = asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Hand the call to MCP's transport, behind the key gate; the first call starts it."""
        endpoint = self._endpoint or await self._start()
        await endpoint.app(scope, receive, send)

    async def _start(self) -> HttpEndpoint:
        async with self._starting:  # concurrent first calls import and start it once
            if self._endpoint is None:
                endpoint = await to_thread.run_sync(self._build)
                started = asyncio.Event()
                serving = asyncio.create_task(self._serve(endpoint, started))
                waiting = asyncio.create_task(started.wait())
                await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
                if not started.is_set():
                    waiting.cancel()
                    serving.result()  # raises why the session manager stopped before it started
                self._endpoint, self._serving = endpoint, serving
        return self._endpoint

    def _build(self) -> HttpEndpoint:
        try:
            from personamem.mcp_server import http_endpoint
        except ModuleNotFoundError as exc:
            if (exc.name or "").partition(".")[0] != "mcp":
                raise
            raise MissingExtraError(["mcp"], "mcp") from None
        return http_endpoint(self._authenticate)

    async def _serve(self, endpoint: HttpEndpoint, started: asyncio.Event) -> None:
        async with endpoint.running():  # the session manager's task group lives in this task
            started.set()
            await self._stop.wait()

    async def close(self) -> None:
        """Stop the session manager if a call started it; a later lifespan (a test app's) starts afresh."""
        if self._serving is not None:
            self._stop.set()
            await self._serving
        self._endpoint, self._serving = None, None
        self._starting, self._stop = asyncio.Lock(), asyncio.Event()
