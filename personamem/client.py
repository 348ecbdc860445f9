"""``Client`` and ``AsyncClient``: the SDK's calls against a ``personamem serve`` server.

``mem = PersonaMem.open(path)`` becomes ``mem = Client(url, api_key)`` (or, in an event loop,
``AsyncClient(url, api_key)`` with ``await`` before each call); the methods, arguments, return types
(``Record``, ``Hit``, ``Context``) and exceptions are the SDK's (:class:`~personamem.contract.MemoryApi`,
checked by ``tests/test_contract_api.py``). A server error comes back as the
exception the SDK would have raised (its type travels in the JSON body); a server that cannot be
reached or fails is a :class:`~personamem.errors.RemoteError`. Both clients drive the same calls
(``personamem/remote.py``), so they answer alike, and repeat the same ones while the server's
database restarts (:class:`~personamem.remote.Retries`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

from personamem import errors, remote
from personamem.contract import Context, Hits, MemoryApi, method_of
from personamem.errors import MissingExtraError
from personamem.portability import Imported
from personamem.preference import PreferenceMemory
from personamem.records import Record, RecordEvent
from personamem.remote import RETRY_SECONDS, Call, Request, Retries, error_from, unreachable
from personamem.store.duplicates import DuplicatePolicy
from personamem.store.read import ReadOptions

if TYPE_CHECKING:
    import httpx

__all__ = ["AsyncClient", "Client"]

T = TypeVar("T")


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise MissingExtraError(["httpx"], "server") from None
    return httpx


def _answer(response: Any, request: Request) -> Any:
    """The answer's JSON (or text), or the SDK's exception for an error answer."""
    if not response.is_success:
        raise error_from(response.status_code, response)
    return response.text if request.raw else response.json()


def _broken(httpx: Any) -> tuple[type[Exception], ...]:
    """The errors of a connection that broke under a request (httpx's): a repeatable call retries them.

    Not a refused connection: no server there is a wrong URL as often as a restart, and is reported
    at once.
    """
    return (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


def _http_options(base_url: str, api_key: str, timeout: float, transport: object) -> dict[str, Any]:
    """What both clients give their httpx client: the server, the key's header, the timeout, a transport."""
    headers = {"Authorization": f"Bearer {api_key}"}
    return {"base_url": base_url.rstrip("/"), "headers": headers, "timeout": timeout, "transport": transport}


class Client(MemoryApi):
    """A personamem server, called like :class:`~personamem.memory.PersonaMem`; safe across threads.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8080``.
        api_key: a key from ``personamem keys create --tenant T``; every call sees that tenant only.
        timeout: seconds per request (a search with an LLM stage may need more).
        retry_seconds: how long a call that is safe to repeat (reads; ``add``, whose record carries its
            id) is repeated while the server answers 503 with ``Retry-After`` (its database restarting)
            or the connection breaks under it; then the error is raised
            (:class:`~personamem.errors.ServiceUnavailableError`). 0 repeats nothing.
        transport: an httpx transport to send requests through instead of the network (e.g. one that
            calls the server's app in this process); None: HTTP to ``base_url``.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        retry_seconds: float = RETRY_SECONDS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        httpx = _httpx()
        self._http = httpx.Client(**_http_options(base_url, api_key, timeout, transport))
        self._broken = _broken(httpx)
        self._retry_seconds = retry_seconds

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        """Send each request the call yields, and hand it the answer (or the SDK's exception)."""
        try:
            request = next(call)
            while True:
                try:
                    response = remote.send(self._http, request, self._retry_seconds, self._broken)
                    answer = _answer(response, request)
                except errors.PersonaMemError as exc:
                    request = call.throw(exc)
                else:
                    request = call.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    # -- writes ---------------------------------------------------------------------------------

    def add(
        self,
        user_id: str,
        text: str = "",
        *,
        duplicates: DuplicatePolicy | str | None = None,
        duplicate_threshold: float | None = None,
        **fields: Any,
    ) -> Record:
        """Remember one record of ``user_id``; returns it with its id (see :meth:`PersonaMem.add`)."""
        options = {"duplicates": duplicates, "duplicate_threshold": duplicate_threshold}
        return self._run(remote.add(user_id, text, {**fields, **options}))

    def add_many(
        self,
        records: Iterable[Record | Mapping[str, Any] | str],
        *,
        user_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Record]:
        """Remember many records; all are validated here before any is sent.

        Each request of up to 10,000 records is one transaction on the server: after any failure all
        of it or none of it is stored. ``progress`` is called with the count after each request.
        """
        return self._run(remote.add_many(records, user_id, progress))

    def delete(self, user_id: str, record_ids: str | Sequence[str]) -> list[str]:
        """Delete records of ``user_id`` by id, leaving no trace of them; returns the ids deleted."""
        return self._run(remote.delete(user_id, record_ids))

    def update(self, user_id: str, record_id: str, /, **changes: Any) -> Record:
        """Replace fields of one record (``text``, ``category``, ``metadata``...); returns the new record."""
        return self._run(remote.update(user_id, record_id, changes))

    def forget(self, user_id: str) -> bool:
        """Erase the user: records, vectors and cached derived data. False if unknown."""
        return self._run(remote.forget(user_id))

    def import_user(self, path: str | Path, *, user_id: str | None = None) -> Imported:
        """Store a user's export (from :meth:`export`), as its user or ``user_id``."""
        return self._run(remote.import_user(path, user_id))

    def supersede(self, user_id: str, old_id: str, text: str = "", **fields: Any) -> Record:
        """Store a record that replaces ``old_id`` as the current fact (:meth:`PersonaMem.supersede`)."""
        return self._run(remote.supersede(user_id, old_id, text, fields))

    def ttl(self) -> timedelta | None:
        """The tenant's default time-to-live of new records (None: they do not expire)."""
        return self._run(remote.ttl())

    def set_ttl(self, ttl: timedelta | float | None) -> None:
        """Make the tenant's new records expire ``ttl`` (a timedelta or seconds) after they are added."""
        self._run(remote.set_ttl(ttl))

    def purge(self) -> int:
        """Erase the tenant's expired records now; returns how many."""
        return self._run(remote.purge())

    # -- reads ------------------------------------------------------------------------------------

    def search(
        self,
        user_id: str,
        query: str,
        k: int = 5,
        method: str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Hits:
        """The user's top ``k`` records for ``query`` by ``method`` (``interaction_id`` where logged)."""
        return self._run(remote.search(user_id, query, k, method, read))

    def feedback(
        self,
        interaction_id: str,
        *,
        answer: str | None = None,
        rating: float | None = None,
        used_record_ids: Sequence[str] | None = None,
    ) -> None:
        """Report what happened after a logged call (see :meth:`PersonaMem.feedback`)."""
        self._run(remote.feedback(interaction_id, answer, rating, used_record_ids))

    def context(
        self,
        user_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        method: str | None = None,
        pipeline: str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Context:
        """What to paste into the LLM's prompt for ``query`` (``method``: a method name).

        ``pipeline`` is ``method``'s deprecated name, as in :meth:`PersonaMem.context`.
        """
        return self._run(remote.context(user_id, query, budget_tokens, method_of(method, pipeline), read))

    def memory(self, user_id: str) -> PreferenceMemory:
        """The user's preference memory (``stale`` when the server could not rebuild it in time)."""
        return self._run(remote.memory(user_id))

    def refresh_memories(
        self,
        user_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        batch_size: int = 8,
    ) -> int:
        """Build the missing or stale preference memories (None: every user); returns how many were built.

        One request per ``batch_size`` users, so each stays within the timeout and an interrupted
        refresh resumes; ``progress`` is called with the number of users finished after each.
        """
        return self._run(remote.refresh_memories(user_ids, progress, batch_size))

    def rerank(self, user_id: str, query: str, candidates: Sequence[str], k: int | None = None) -> list[int]:
        """Indices of ``candidates``, best first, for the user's request given their preference memory."""
        return self._run(remote.rerank(user_id, query, candidates, k))

    def get(self, user_id: str, record_id: str) -> Record | None:
        """The user's record with this id, or None."""
        return self._run(remote.get(user_id, record_id))

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records, in insertion order."""
        return self._run(remote.records(user_id))

    def history(self, user_id: str, record_id: str) -> list[RecordEvent]:
        """The events of the user's record, oldest first (:meth:`PersonaMem.history`)."""
        return self._run(remote.history(user_id, record_id))

    def export(self, user_id: str, path: str | Path, *, interactions: bool = False) -> int:
        """Write the user's export (JSON Lines) to ``path``; returns the lines after the header."""
        return self._run(remote.export(user_id, path, interactions))

    def users(self) -> list[str]:
        """Users with at least one record."""
        return self._run(remote.list_users())

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of all users."""
        return self._run(remote.count(user_id))

    def health(self) -> dict[str, Any]:
        """The server's health answer (``{"status": "ok", "version": ...}``)."""
        return self._run(remote.health())


class AsyncClient:
    """:class:`Client` for an event loop: the same methods, arguments, results and errors, awaited.

    Calls from many tasks share one connection pool; use it as ``async with AsyncClient(...)``.
    ``transport`` is an async httpx transport, e.g. ``httpx.ASGITransport(app=create_app(mem))`` to
    call a server's app in this process.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        retry_seconds: float = RETRY_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        httpx = _httpx()
        self._http = httpx.AsyncClient(**_http_options(base_url, api_key, timeout, transport))
        self._transport_error = httpx.TransportError
        self._broken = _broken(httpx)
        self._retry_seconds = retry_seconds

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def _run(self, call: Call[T]) -> T:
        """:meth:`Client._run`, awaiting each request."""
        try:
            request = next(call)
            while True:
                try:
                    answer = await self._send(request)
                except errors.PersonaMemError as exc:
                    request = call.throw(exc)
                else:
                    request = call.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _send(self, request: Request) -> Any:
        """:func:`personamem.remote.send` then :func:`_answer`, awaiting the request and the waits."""
        retries = Retries(request, self._retry_seconds)
        while True:
            try:
                response = await self._http.request(request.method, request.path, **request.options)
            except self._transport_error as exc:
                wait = retries.wait(None) if isinstance(exc, self._broken) else None
                if wait is None:
                    raise unreachable(self._http.base_url, exc) from exc
            else:
                wait = retries.wait(response)
                if wait is None:
                    return _answer(response, request)
            await asyncio.sleep(wait)

    async def add(
        self,
        user_id: str,
        text: str = "",
        *,
        duplicates: DuplicatePolicy | str | None = None,
        duplicate_threshold: float | None = None,
        **fields: Any,
    ) -> Record:
        """:meth:`Client.add`."""
        options = {"duplicates": duplicates, "duplicate_threshold": duplicate_threshold}
        return await self._run(remote.add(user_id, text, {**fields, **options}))

    async def add_many(
        self,
        records: Iterable[Record | Mapping[str, Any] | str],
        *,
        user_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Record]:
        """:meth:`Client.add_many`."""
        return await self._run(remote.add_many(records, user_id, progress))

    async def delete(self, user_id: str, record_ids: str | Sequence[str]) -> list[str]:
        """:meth:`Client.delete`."""
        return await self._run(remote.delete(user_id, record_ids))

    async def update(self, user_id: str, record_id: str, /, **changes: Any) -> Record:
        """:meth:`Client.update`."""
        return await self._run(remote.update(user_id, record_id, changes))

    async def forget(self, user_id: str) -> bool:
        """:meth:`Client.forget`."""
        return await self._run(remote.forget(user_id))

    async def import_user(self, path: str | Path, *, user_id: str | None = None) -> Imported:
        """:meth:`Client.import_user`."""
        return await self._run(remote.import_user(path, user_id))

    async def supersede(self, user_id: str, old_id: str, text: str = "", **fields: Any) -> Record:
        """:meth:`Client.supersede`."""
        return await self._run(remote.supersede(user_id, old_id, text, fields))

    async def ttl(self) -> timedelta | None:
        """:meth:`Client.ttl`."""
        return await self._run(remote.ttl())

    async def set_ttl(self, ttl: timedelta | float | None) -> None:
        """:meth:`Client.set_ttl`."""
        await self._run(remote.set_ttl(ttl))

    async def purge(self) -> int:
        """:meth:`Client.purge`."""
        return await self._run(remote.purge())

    async def search(
        self,
        user_id: str,
        query: str,
        k: int = 5,
        method: str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Hits:
        """:meth:`Client.search`."""
        return await self._run(remote.search(user_id, query, k, method, read))

    async def feedback(
        self,
        interaction_id: str,
        *,
        answer: str | None = None,
        rating: float | None = None,
        used_record_ids: Sequence[str] | None = None,
    ) -> None:
        """:meth:`Client.feedback`."""
        await self._run(remote.feedback(interaction_id, answer, rating, used_record_ids))

    async def context(
        self,
        user_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        method: str | None = None,
        pipeline: str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Context:
        """:meth:`Client.context`."""
        return await self._run(
            remote.context(user_id, query, budget_tokens, method_of(method, pipeline), read)
        )

    async def memory(self, user_id: str) -> PreferenceMemory:
        """:meth:`Client.memory`."""
        return await self._run(remote.memory(user_id))

    async def refresh_memories(
        self,
        user_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        batch_size: int = 8,
    ) -> int:
        """:meth:`Client.refresh_memories`."""
        return await self._run(remote.refresh_memories(user_ids, progress, batch_size))

    async def rerank(
        self, user_id: str, query: str, candidates: Sequence[str], k: int | None = None
    ) -> list[int]:
        """:meth:`Client.rerank`."""
        return await self._run(remote.rerank(user_id, query, candidates, k))

    async def get(self, user_id: str, record_id: str) -> Record | None:
        """:meth:`Client.get`."""
        return await self._run(remote.get(user_id, record_id))

    async def records(self, user_id: str) -> list[Record]:
        """:meth:`Client.records`."""
        return await self._run(remote.records(user_id))

    async def history(self, user_id: str, record_id: str) -> list[RecordEvent]:
        """:meth:`Client.history`."""
        return await self._run(remote.history(user_id, record_id))

    async def export(self, user_id: str, path: str | Path, *, interactions: bool = False) -> int:
        """:meth:`Client.export`."""
        return await self._run(remote.export(user_id, path, interactions))

    async def users(self) -> list[str]:
        """:meth:`Client.users`."""
        return await self._run(remote.list_users())

    async def count(self, user_id: str | None = None) -> int:
        """:meth:`Client.count`."""
        return await self._run(remote.count(user_id))

    async def health(self) -> dict[str, Any]:
        """:meth:`Client.health`."""
        return await self._run(remote.health())
