"""The SDK's calls as HTTP exchanges, written once for both clients (``personamem/client.py``).

Each call is a generator: it validates its arguments as the SDK would, yields the requests it needs,
is sent back each answer's JSON (or has the exception the SDK would have raised thrown into it), and
returns the SDK's result, read with the answer's model from :mod:`personamem.contract` (the one the
server dumped it with). ``Client`` drives them with ``httpx.Client``, ``AsyncClient`` with
``httpx.AsyncClient``, so the two cannot drift apart. :class:`Retries` says when a client sends a
request again; :func:`send` is the one loop that sends it for the synchronous clients (``Client``,
``JobClient`` in ``personamem/job_client.py``), and ``AsyncClient`` awaits the same steps.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from personamem import errors
from personamem.contract import (
    ROUTES,
    Built,
    Context,
    Deleted,
    Hits,
    PreferenceAnswer,
    RecordBatch,
    RecordHistory,
    RecordPage,
    Reranked,
    SearchResult,
    StoredRecord,
    Ttl,
)
from personamem.errors import (
    AuthenticationError,
    PartialWriteError,
    PermissionDeniedError,
    RateLimitedError,
    RemoteError,
    ServiceUnavailableError,
)
from personamem.interactions import FeedbackReport
from personamem.portability import Imported, write_export
from personamem.preference import PreferenceMemory
from personamem.records import Record, RecordEvent, parse_record, parse_records
from personamem.request_models import MAX_BATCH, problems_text
from personamem.store.duplicates import DUPLICATE_THRESHOLD, DuplicatePolicy, check_duplicates
from personamem.store.expiry import check_ttl
from personamem.store.read import Read, ReadOptions

if TYPE_CHECKING:
    import httpx

__all__ = ["REPEATABLE", "RETRY_SECONDS", "Call", "Request", "Retries", "error_from", "send", "unreachable"]

T = TypeVar("T")
_PAGE = 1000
RETRY_SECONDS = 15.0
"""How long the clients repeat an idempotent call, by default, while the server's store is unavailable."""

REPEATABLE = frozenset(
    {
        "add", "add_many", "feedback", "set_ttl",
        "get", "records", "history", "ttl", "export", "search", "context", "memory", "rerank",
        "users", "count",
    }
)  # fmt: skip
"""The operations a client may send twice: reads, writes of records that carry their ids (a record's
id is its content's hash unless given, and adding it again is a no-op), and writes of a value."""


@dataclass(frozen=True)
class Request:
    """One HTTP request of a call; ``raw`` asks for the body as text rather than JSON."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None
    content: bytes | None = None
    raw: bool = False
    repeatable: bool = False  # safe to send again when no answer came, or the store was unavailable

    @property
    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``httpx``'s ``request``."""
        return {"json": self.json, "params": self.params, "content": self.content}


Call = Generator[Request, Any, T]


_WRITE_OPTIONS = ("duplicates", "duplicate_threshold")  # add's options that are not record fields


def add(user_id: str, text: str, fields: Mapping[str, Any]) -> Call[Record]:
    options = {k: v for k, v in fields.items() if k in _WRITE_OPTIONS and v is not None}
    fields = {k: v for k, v in fields.items() if k not in _WRITE_OPTIONS}
    if options:
        check_duplicates(
            options.get("duplicates", DuplicatePolicy.KEEP),
            options.get("duplicate_threshold", DUPLICATE_THRESHOLD),
        )
    record = parse_record({"user_id": user_id, "text": text, **fields})  # the SDK's errors, here
    body = {**record.model_dump(mode="json"), **options}
    return StoredRecord.model_validate((yield _to("add", body))).root


def supersede(user_id: str, old_id: str, text: str, fields: Mapping[str, Any]) -> Call[Record]:
    record = parse_record({"user_id": _user(user_id), "text": text, **fields})
    body = {"user_id": user_id, "old_id": old_id, "record": record.model_dump(mode="json")}
    return StoredRecord.model_validate((yield _to("supersede", body))).root


def ttl() -> Call[timedelta | None]:
    return Ttl.model_validate((yield _to("ttl"))).to_timedelta()


def set_ttl(ttl: timedelta | float | None) -> Call[None]:
    seconds = check_ttl(ttl.total_seconds() if isinstance(ttl, timedelta) else ttl)
    yield _to("set_ttl", {"seconds": seconds})


def purge() -> Call[int]:
    return int((yield from answered("purge")))


def add_many(
    records: Iterable[Record | Mapping[str, Any] | str],
    user_id: str | None,
    progress: Callable[[int], None] | None,
) -> Call[list[Record]]:
    parsed = parse_records(records, user_id=user_id)
    stored: list[Record] = []
    for start in range(0, len(parsed), MAX_BATCH):
        batch = [r.model_dump(mode="json") for r in parsed[start : start + MAX_BATCH]]
        try:
            body = yield _to("add_many", {"records": batch})
        except errors.PersonaMemError as exc:
            if start == 0:
                raise
            raise PartialWriteError(
                f"stored {start} of {len(parsed)} record(s), then: {exc}; adding the same records "
                "again skips the stored ones and finishes the job",
                stored=start,
                total=len(parsed),
            ) from exc
        stored.extend(RecordBatch.model_validate(body).records)
        if progress is not None:
            progress(len(batch))
    return stored


def delete(user_id: str, record_ids: str | Sequence[str]) -> Call[list[str]]:
    ids = [record_ids] if isinstance(record_ids, str) else list(record_ids)
    if not ids:
        return []
    body = yield _to("delete", {"user_id": _user(user_id), "ids": ids})
    return Deleted.model_validate(body).deleted


def update(user_id: str, record_id: str, changes: Mapping[str, Any]) -> Call[Record]:
    body = to_jsonable_python(dict(changes))  # datetimes as ISO strings, as Record dumps them
    request = _to("update", body, query={"user_id": _user(user_id)}, record_id=record_id)
    return StoredRecord.model_validate((yield request)).root


def forget(user_id: str) -> Call[bool]:
    return bool((yield from answered("forget", user_id=user_id)))


def search(
    user_id: str,
    query: str,
    k: int,
    method: str | None,
    read: ReadOptions,
) -> Call[Hits]:
    request: dict[str, object] = {"user_id": _user(user_id), "query": query, "k": k}
    if method is not None:  # none: the server's served pipeline
        request["method"] = method
    body = yield _to("search", {**request, **_read(read)})
    return SearchResult.model_validate(body).to_hits()


def feedback(
    interaction_id: str, answer: str | None, rating: float | None, used_record_ids: Sequence[str] | None
) -> Call[None]:
    report = FeedbackReport.of(interaction_id, answer=answer, rating=rating, used_record_ids=used_record_ids)
    yield _to("feedback", report.model_dump(mode="json"))


def context(
    user_id: str, query: str, budget_tokens: int | None, method: str | None, read: ReadOptions
) -> Call[Context]:
    request = {"user_id": _user(user_id), "query": query, "budget_tokens": budget_tokens, "method": method}
    body = yield _to("context", {**request, **_read(read)})
    return Context.model_validate(body)


def memory(user_id: str) -> Call[PreferenceMemory]:
    answer = PreferenceAnswer.model_validate((yield _to("memory", query={"user_id": _user(user_id)})))
    return PreferenceMemory.from_json(answer.model_dump(mode="json"))


def refresh_memories(
    user_ids: Sequence[str] | None, progress: Callable[[int], None] | None, batch_size: int
) -> Call[int]:
    if isinstance(user_ids, str):
        raise errors.InvalidInputError("user_ids must be a sequence of user ids, not one string")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    users = (yield from list_users()) if user_ids is None else [_user(u) for u in user_ids]
    built = 0
    for start in range(0, len(users), batch_size):
        batch = users[start : start + batch_size]
        body = yield _to("refresh_memories", {"user_ids": batch, "batch_size": batch_size})
        built += Built.model_validate(body).built
        if progress is not None:
            progress(len(batch))
    return built


def rerank(user_id: str, query: str, candidates: Sequence[str], k: int | None) -> Call[list[int]]:
    if isinstance(candidates, str):
        raise errors.InvalidInputError("candidates must be a sequence of strings, not one string")
    request = {"user_id": _user(user_id), "query": query, "candidates": list(candidates), "k": k}
    return Reranked.model_validate((yield _to("rerank", request))).order


def get(user_id: str, record_id: str) -> Call[Record | None]:
    try:
        body = yield _to("get", query={"user_id": _user(user_id)}, record_id=record_id)
    except RemoteError as exc:
        if exc.status == 404:
            return None
        raise
    return StoredRecord.model_validate(body).root


def records(user_id: str) -> Call[list[Record]]:
    found: list[Record] = []
    while True:
        query = {"user_id": _user(user_id), "offset": len(found), "limit": _PAGE}
        page = RecordPage.model_validate((yield _to("records", query=query)))
        found.extend(page.records)
        if not page.records or len(found) >= page.count:
            return found


def history(user_id: str, record_id: str) -> Call[list[RecordEvent]]:
    if not isinstance(record_id, str):
        raise errors.InvalidInputError(f"record_id must be a string, got {record_id!r}")
    query = {"user_id": _user(user_id), "record_id": record_id}
    return RecordHistory.model_validate((yield _to("history", query=query))).events


def export(user_id: str, path: str | Path, interactions: bool) -> Call[int]:
    query = {"user_id": _user(user_id), "interactions": interactions}
    text = yield _to("export", query=query, raw=True)
    return write_export(path, (line for line in text.splitlines() if line))


def import_user(path: str | Path, user_id: str | None) -> Call[Imported]:
    query = {} if user_id is None else {"user_id": _user(user_id)}
    body = yield _to("import_user", query=query, content=Path(path).read_bytes())
    return Imported.model_validate(body)


def list_users() -> Call[list[str]]:
    return list((yield from answered("users")))


def count(user_id: str | None) -> Call[int]:
    return int((yield from answered("count", user_id=user_id)))


def answered(operation: str, **arguments: Any) -> Call[Any]:
    """An operation the server answers from its row alone (``Answer.of``), called by its row too.

    The arguments go by name where the row's request models read them (the query's fields to the
    query, the rest to the body; None: left out, the model's default), and the result is the answer
    model's first field, which ``Answer.of`` filled.
    """
    route = ROUTES[operation]
    given = {k: _user(v) if k == "user_id" else v for k, v in arguments.items() if v is not None}
    in_query = (
        {} if route.query is None else {k: v for k, v in given.items() if k in route.query.model_fields}
    )
    in_body = {k: v for k, v in given.items() if k not in in_query}
    request = _to(operation, in_body if route.body is not None else None, query=in_query)
    model = route.response
    assert model is not None  # a row served by Answer.of answers JSON
    return getattr(model.model_validate((yield request)), next(iter(model.model_fields)))


def health() -> Call[dict[str, Any]]:
    return dict((yield Request("GET", "/v1/health", repeatable=True)))


def _read(options: ReadOptions) -> dict[str, Any]:
    """The read time and filter of a search or context request, checked as the SDK checks them."""
    read = Read.of(**options)
    at = None if read.as_of is None else datetime.fromtimestamp(read.as_of, UTC).isoformat()
    body: dict[str, Any] = {"as_of": at, "include_superseded": read.include_superseded}
    if read.filter is not None:  # sent only when given: older servers refuse the key
        body["filters"] = dict(options.get("filters") or {})
    return body


def _user(user_id: str) -> str:
    """``user_id`` if it is a string: a number or bytes sent as JSON or a query would name another user."""
    if not isinstance(user_id, str):
        raise errors.InvalidInputError(f"user_id must be a non-empty string, got {user_id!r}")
    return user_id


def _to(
    operation: str,
    body: Mapping[str, Any] | None = None,
    *,
    query: Mapping[str, Any] | None = None,
    content: bytes | None = None,
    raw: bool = False,
    record_id: str | None = None,
) -> Request:
    """The request of ``operation``, built with its row in :data:`~personamem.contract.ROUTES`.

    ``body`` and ``query`` are checked with the row's request models, as the server checks them, and
    sent as those models dump them (only the keys given: older servers refuse keys they do not know).

    Raises:
        InvalidInputError: the server would refuse them (the message is its 422's).
    """
    route = ROUTES[operation]
    if "{record_id}" in route.path and (not isinstance(record_id, str) or not record_id):
        raise errors.InvalidInputError(f"record ids must be non-empty strings, got {record_id!r}")
    json = _dumped("body", route.body, body)
    params = _dumped("query", route.query, query)
    path = route.to(record_id)
    return Request(route.verb, path, json, params, content, raw, repeatable=operation in REPEATABLE)


def _dumped(part: str, model: type[BaseModel] | None, values: Mapping[str, Any] | None) -> Any:
    """``values`` through ``model`` (None: the route has no such part), as the request sends them."""
    if model is None:
        if values:
            raise TypeError(f"this route takes no {part}")  # a mistake in this module, not the caller's
        return None
    try:
        checked = model.model_validate(dict(values or {}))
    except ValidationError as exc:
        problems = [{**p, "loc": (part, *p["loc"])} for p in exc.errors()]
        raise errors.InvalidInputError(problems_text(problems)) from None
    return checked.model_dump(mode="json", exclude_unset=True)


def error_from(status: int, response: Any) -> Exception:
    """The exception the SDK would have raised, from the server's JSON error body."""
    try:
        error = response.json()["error"]
        kind, message = str(error["type"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        error, kind, message = {}, "", response.text or f"HTTP {status}"
    if status == 401:
        return AuthenticationError(message, status=status)
    if status == 403:
        return PermissionDeniedError(message, needed=error.get("needed"), scope=error.get("scope"))
    if status == 429:
        return RateLimitedError(message, retry_after=_retry_after(error, response))
    if status == 503 and "retry-after" in getattr(response, "headers", {}):
        return ServiceUnavailableError(message, retry_after=_retry_after(error, response))
    if kind == "PartialWriteError":
        return PartialWriteError(message, stored=error.get("stored", 0), total=error.get("total", 0))
    if status == 507 and kind == "DiskFullError":  # the server's disk: the same error as in process
        return errors.DiskFullError(message, path=error.get("path"), free=error.get("free"))
    known = getattr(errors, kind, None) if kind in errors.__all__ else None
    plain = known not in (errors.MissingExtraError, errors.RemoteError)  # these take other arguments
    if isinstance(known, type) and issubclass(known, errors.PersonaMemError) and status < 500 and plain:
        return known(message)
    if status == 422:
        return errors.InvalidInputError(message)
    return RemoteError(f"the server answered {status}: {message}", status=status)


class Retries:
    """When the clients send one request again, and after how long.

    Only a repeatable request (:data:`REPEATABLE`) is sent again: on a 503 with
    ``Retry-After`` (the server's database is restarting or unreachable), or when the connection
    broke before an answer came. The wait is the server's ``Retry-After`` or a backoff from 0.1 s
    doubling to 2 s, whichever is longer, stretched by up to 20 % at random so that clients turned
    away together do not come back together; retrying stops once another wait would end more than
    ``budget`` seconds after the first try, and the last answer stands.
    """

    def __init__(self, request: Request, budget: float) -> None:
        self._repeat = request.repeatable and budget > 0
        self._deadline = time.monotonic() + budget
        self._backoff = 0.1

    def wait(self, response: Any | None) -> float | None:
        """Seconds to wait before sending the request again; None: ``response`` is the answer.

        ``response`` None: the connection broke before an answer came.
        """
        if not self._repeat:
            return None
        if response is None:
            advised = 0.0
        elif response.status_code == 503 and "retry-after" in response.headers:
            advised = _retry_after({}, response)
        else:
            return None
        seconds = max(advised, self._backoff) * random.uniform(1.0, 1.2)
        self._backoff = min(self._backoff * 2, 2.0)
        return seconds if time.monotonic() + seconds <= self._deadline else None


def send(
    http: httpx.Client, request: Request, retry_seconds: float, retry_on: tuple[type[Exception], ...]
) -> httpx.Response:
    """The server's last response to ``request``, sent again while :class:`Retries` allows.

    Written once for the synchronous clients, so that they retry alike. ``retry_on``: the
    transport errors after which a repeatable request is sent again (``Client`` takes only a
    connection broken under a request; ``JobClient``, which waits out a restarting server, any).
    The caller reads the response: what an error answer raises depends on what was sent.

    Raises:
        RemoteError: the server could not be reached (no retry left, or an error not retried).
    """
    import httpx  # the server extra; the caller's ``http`` is httpx's, so it is installed

    retries = Retries(request, retry_seconds)
    while True:
        try:
            response = http.request(request.method, request.path, **request.options)
        except httpx.TransportError as exc:
            wait = retries.wait(None) if isinstance(exc, retry_on) else None
            if wait is None:
                raise unreachable(http.base_url, exc) from exc
        else:
            wait = retries.wait(response)
            if wait is None:
                return response
        time.sleep(wait)


def unreachable(base_url: object, exc: Exception) -> RemoteError:
    """The error of a request that got no answer from the server at ``base_url``."""
    return RemoteError(f"cannot reach the personamem server at {base_url}: {exc}")


def _retry_after(error: Mapping[str, Any], response: Any) -> float:
    """Seconds to wait from a 429 or 503: the body's ``retry_after``, else ``Retry-After``, else 1."""
    for value in (error.get("retry_after"), getattr(response, "headers", {}).get("retry-after")):
        if value is None:
            continue
        try:
            return max(float(value), 0.0)
        except (TypeError, ValueError):
            continue
    return 1.0
