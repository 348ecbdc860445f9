"""``Client``: the SDK's calls against a ``personamem serve`` server, so a backend switches with one line.

``mem = PersonaMem.open(path)`` becomes ``mem = Client(url, api_key)``; the methods, arguments,
return types (``Record``, ``Hit``, ``Context``) and exceptions are the SDK's. A server error comes
back as the exception the SDK would have raised (its type travels in the JSON body); a server that
cannot be reached or fails is a :class:`~personamem.errors.RemoteError`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from pydantic_core import to_jsonable_python

from personamem import errors
from personamem.errors import AuthenticationError, MissingExtraError, PartialWriteError, RemoteError
from personamem.llm.base import Usage
from personamem.pipeline import Context, Hits
from personamem.portability import Imported, write_export
from personamem.preference import PreferenceMemory
from personamem.records import Record, parse_record, parse_records
from personamem.retrieval import Hit

__all__ = ["Client"]

_BATCH = 10_000  # the server's most records per batch request (personamem.server.schemas.MAX_BATCH)
_PAGE = 1000


class Client:
    """A personamem server, called like :class:`~personamem.memory.PersonaMem`; safe across threads.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8080``.
        api_key: a key from ``personamem keys create --tenant T``; every call sees that tenant only.
        timeout: seconds per request (a search with an LLM stage may need more).
    """

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        try:
            import httpx
        except ImportError:
            raise MissingExtraError(["httpx"], "server") from None
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )
        self._transport_error = httpx.TransportError

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- writes ---------------------------------------------------------------------------------

    def add(self, user_id: str, text: str = "", **fields: Any) -> Record:
        """Remember one record of ``user_id``; returns it with its id."""
        record = parse_record({"user_id": user_id, "text": text, **fields})  # the SDK's errors, here
        return Record.model_validate(self._call("POST", "/v1/records", record.model_dump(mode="json")))

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
        parsed = parse_records(records, user_id=user_id)
        stored: list[Record] = []
        for start in range(0, len(parsed), _BATCH):
            batch = [r.model_dump(mode="json") for r in parsed[start : start + _BATCH]]
            try:
                body = self._call("POST", "/v1/records/batch", {"records": batch})
            except errors.PersonaMemError as exc:
                if start == 0:
                    raise
                raise PartialWriteError(
                    f"stored {start} of {len(parsed)} record(s), then: {exc}; adding the same records "
                    "again skips the stored ones and finishes the job",
                    stored=start,
                    total=len(parsed),
                ) from exc
            stored.extend(Record.model_validate(r) for r in body["records"])
            if progress is not None:
                progress(len(batch))
        return stored

    def delete(self, user_id: str, record_ids: str | Sequence[str]) -> list[str]:
        """Delete records of ``user_id`` by id, leaving no trace of them; returns the ids deleted."""
        ids = [record_ids] if isinstance(record_ids, str) else list(record_ids)
        if not ids:
            return []
        body = {"user_id": _user(user_id), "ids": ids}
        return list(self._call("POST", "/v1/records/delete", body)["deleted"])

    def update(self, user_id: str, record_id: str, /, **changes: Any) -> Record:
        """Replace fields of one record (``text``, ``category``, ``metadata``...); returns the new record."""
        path = _record(record_id)
        body = to_jsonable_python(changes)  # datetimes as ISO strings, as Record dumps them
        return Record.model_validate(self._call("PATCH", path, body, params={"user_id": _user(user_id)}))

    def forget(self, user_id: str) -> bool:
        """Erase the user: records, vectors and cached derived data. False if unknown."""
        return bool(self._call("DELETE", "/v1/users", params={"user_id": _user(user_id)})["forgotten"])

    # -- reads ------------------------------------------------------------------------------------

    def search(self, user_id: str, query: str, k: int = 5, method: str = "dense") -> Hits:
        """The user's top ``k`` records for ``query`` by ``method`` (``interaction_id`` where logged)."""
        request = {"user_id": _user(user_id), "query": query, "k": k, "method": method}
        body = self._call("POST", "/v1/search", request)
        hits = Hits(_hit(h) for h in body["hits"])
        hits.interaction_id = body.get("interaction_id")
        return hits

    def feedback(
        self,
        interaction_id: str,
        *,
        answer: str | None = None,
        rating: float | None = None,
        used_record_ids: Sequence[str] | None = None,
    ) -> None:
        """Report what happened after a logged call (see :meth:`PersonaMem.feedback`)."""
        request = {"interaction_id": interaction_id, "answer": answer, "rating": rating}
        used = None if used_record_ids is None else list(used_record_ids)
        self._call("POST", "/v1/feedback", {**request, "used_record_ids": used})

    def context(
        self, user_id: str, query: str, *, budget_tokens: int | None = None, pipeline: str | None = None
    ) -> Context:
        """What to paste into the LLM's prompt for ``query`` (``pipeline``: a method name)."""
        request = {"user_id": _user(user_id), "query": query, "budget_tokens": budget_tokens}
        body = self._call("POST", "/v1/context", {**request, "pipeline": pipeline})
        return Context(
            text=body["text"],
            hits=[_hit(h) for h in body["records"]],
            dropped=[_hit(h) for h in body["dropped"]],
            tokens=body["tokens"],
            budget_tokens=body["budget_tokens"],
            usage=Usage(**body["usage"]),
            timings_ms=body["timings_ms"],
            warnings=body["warnings"],
            memory=body["memory"],
            interaction_id=body.get("interaction_id"),
            first_stage=body.get("first_stage", {}),
        )

    def memory(self, user_id: str) -> PreferenceMemory:
        """The user's preference memory (``stale`` when the server could not rebuild it in time)."""
        return PreferenceMemory.from_json(self._call("GET", "/v1/memory", params={"user_id": _user(user_id)}))

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
        if isinstance(user_ids, str):
            raise errors.InvalidInputError("user_ids must be a sequence of user ids, not one string")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        users = self.users() if user_ids is None else [_user(u) for u in user_ids]
        built = 0
        for start in range(0, len(users), batch_size):
            batch = users[start : start + batch_size]
            body = {"user_ids": batch, "batch_size": batch_size}
            built += int(self._call("POST", "/v1/memory/refresh", body)["built"])
            if progress is not None:
                progress(len(batch))
        return built

    def rerank(self, user_id: str, query: str, candidates: Sequence[str], k: int | None = None) -> list[int]:
        """Indices of ``candidates``, best first, for the user's request given their preference memory."""
        if isinstance(candidates, str):
            raise errors.InvalidInputError("candidates must be a sequence of strings, not one string")
        request = {"user_id": _user(user_id), "query": query, "candidates": list(candidates), "k": k}
        return [int(i) for i in self._call("POST", "/v1/rerank", request)["order"]]

    def get(self, user_id: str, record_id: str) -> Record | None:
        """The user's record with this id, or None."""
        try:
            body = self._call("GET", _record(record_id), params={"user_id": _user(user_id)})
        except RemoteError as exc:
            if exc.status == 404:
                return None
            raise
        return Record.model_validate(body)

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records, in insertion order."""
        found: list[Record] = []
        while True:
            params = {"user_id": _user(user_id), "offset": len(found), "limit": _PAGE}
            body = self._call("GET", "/v1/records", params=params)
            found.extend(Record.model_validate(r) for r in body["records"])
            if not body["records"] or len(found) >= body["count"]:
                return found

    def export(self, user_id: str, path: str | Path, *, interactions: bool = False) -> int:
        """Write the user's export (JSON Lines) to ``path``; returns the lines after the header."""
        params: dict[str, str | bool] = {"user_id": _user(user_id), "interactions": interactions}
        try:
            with self._http.stream("GET", "/v1/export", params=params) as response:
                if not response.is_success:
                    response.read()
                    raise _error(response.status_code, response)
                return write_export(path, (line for line in response.iter_lines() if line))
        except self._transport_error as exc:
            raise RemoteError(f"cannot reach the personamem server at {self._http.base_url}: {exc}") from exc

    def import_user(self, path: str | Path, *, user_id: str | None = None) -> Imported:
        """Store a user's export (from :meth:`export`), as its user or ``user_id``."""
        params = {} if user_id is None else {"user_id": _user(user_id)}
        try:
            response = self._http.post("/v1/import", content=Path(path).read_bytes(), params=params)
        except self._transport_error as exc:
            raise RemoteError(f"cannot reach the personamem server at {self._http.base_url}: {exc}") from exc
        if not response.is_success:
            raise _error(response.status_code, response)
        body = response.json()
        return Imported(body["records"], body["interactions"])

    def users(self) -> list[str]:
        """Users with at least one record."""
        return list(self._call("GET", "/v1/users")["users"])

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of all users."""
        params = {} if user_id is None else {"user_id": _user(user_id)}
        return int(self._call("GET", "/v1/count", params=params)["count"])

    def health(self) -> dict[str, Any]:
        """The server's health answer (``{"status": "ok", "version": ...}``)."""
        return dict(self._call("GET", "/v1/health"))

    # -- transport --------------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, json: Any = None, *, params: Mapping[str, Any] | None = None
    ) -> Any:
        try:
            response = self._http.request(method, path, json=json, params=params)
        except self._transport_error as exc:
            raise RemoteError(f"cannot reach the personamem server at {self._http.base_url}: {exc}") from exc
        if response.is_success:
            return response.json()
        raise _error(response.status_code, response)


def _user(user_id: str) -> str:
    """``user_id`` if it is a string: a number or bytes sent as JSON or a query would name another user."""
    if not isinstance(user_id, str):
        raise errors.InvalidInputError(f"user_id must be a non-empty string, got {user_id!r}")
    return user_id


def _record(record_id: str) -> str:
    if not isinstance(record_id, str) or not record_id:
        raise errors.InvalidInputError(f"record ids must be non-empty strings, got {record_id!r}")
    return f"/v1/records/{quote(record_id, safe='')}"


def _hit(body: Mapping[str, Any]) -> Hit:
    return Hit(record=Record.model_validate(body["record"]), score=body["score"], rank=body["rank"])


def _error(status: int, response: Any) -> Exception:
    """The exception the SDK would have raised, from the server's JSON error body."""
    try:
        error = response.json()["error"]
        kind, message = str(error["type"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        error, kind, message = {}, "", response.text or f"HTTP {status}"
    if status == 401:
        return AuthenticationError(message, status=status)
    if kind == "PartialWriteError":
        return PartialWriteError(message, stored=error.get("stored", 0), total=error.get("total", 0))
    known = getattr(errors, kind, None) if kind in errors.__all__ else None
    plain = known not in (errors.MissingExtraError, errors.RemoteError)  # these take other arguments
    if isinstance(known, type) and issubclass(known, errors.PersonaMemError) and status < 500 and plain:
        return known(message)
    if status == 422:
        return errors.InvalidInputError(message)
    return RemoteError(f"the server answered {status}: {message}", status=status)
