"""The REST routes: one module-level :class:`~fastapi.APIRouter` per OpenAPI tag, in :data:`ROUTERS`.

No handler closes over an app, so :func:`~personamem.server.app.create_app` only includes these
routers; each handler reads what it stores on ``app.state`` through a dependency. A route's memory
parameter is its tenant's view and names the scope its key needs (``Reader``, ``Writer``,
``Admin``: :mod:`personamem.server.auth`, which opens tenants of ``app.state.memory``); health,
which names no tenant, takes the whole memory (``Memory``), and metrics the app's request metrics
(``app.state.metrics``). Every :class:`~personamem.contract.MemoryApi` operation is declared with
:func:`serves`, at its route in :data:`~personamem.contract.ROUTES`, the table the clients request
it from. (No ``from __future__ import annotations``: FastAPI reads the handlers' annotations.)
"""

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from personamem.contract import (
    ROUTES,
    Built,
    Context,
    Count,
    Deleted,
    FeedbackResult,
    Forgotten,
    Purged,
    RecordBatch,
    RecordHistory,
    RecordPage,
    Reranked,
    SearchResult,
    Ttl,
    Users,
    record_json,
)
from personamem.errors import (
    IngestError,
    InvalidInputError,
    InvalidRecordError,
    StoreError,
    collect_fallbacks,
)
from personamem.interactions import FeedbackReport
from personamem.memory import PersonaMem
from personamem.portability import Imported, export_lines
from personamem.records import check_user_id
from personamem.server.auth import Admin, Reader, Writer
from personamem.server.schemas import (
    MAX_BATCH,
    BatchIn,
    ContextIn,
    DeleteIn,
    KeyIn,
    KeyOut,
    KeysOut,
    NewKeyOut,
    RefreshIn,
    RerankIn,
    SearchIn,
    SupersedeIn,
    TtlIn,
)

__all__ = ["ROUTERS", "serves"]

log = logging.getLogger("personamem.server")

_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def serves(router: APIRouter, operation: str, **options: Any) -> Callable[[_Handler], _Handler]:
    """A handler's decorator on ``router`` at the operation's route in ``ROUTES`` (where clients call it)."""
    route = ROUTES[operation]
    return router.api_route(route.served, methods=[route.verb], **options)


async def _memory(request: Request) -> PersonaMem:
    """The whole memory ``create_app`` serves: only for health, which names no tenant."""
    memory: PersonaMem = request.app.state.memory
    return memory


async def _registry(request: Request) -> CollectorRegistry:
    """The registry of the app's own request metrics (``create_app`` puts them on ``app.state``)."""
    registry: CollectorRegistry = request.app.state.metrics.registry
    return registry


Memory = Annotated[PersonaMem, Depends(_memory)]
Registry = Annotated[CollectorRegistry, Depends(_registry)]


def _answer(result: BaseModel, status: int = 200) -> Response:
    """``result`` as its contract model dumps it (pydantic serializes once; no second validation)."""
    return Response(result.model_dump_json(), status, media_type="application/json")


def _tenant_name(tenant: PersonaMem) -> str:
    name = tenant.tenant_name
    assert name is not None  # the auth dependencies give tenant views only
    return name


operations_router = APIRouter(tags=["operations"])
"""Health and metrics: no key, no tenant."""


@operations_router.get("/v1/health")
def health(request: Request, mem: Memory) -> JSONResponse:
    """Whether the store answers (for load balancers); needs no key and names no tenant."""
    try:
        mem.keys.tenant_of("pm_health_check")
    except StoreError as exc:
        log.warning("health check failed: %s", exc)
        return JSONResponse({"status": "unavailable"}, 503)
    return JSONResponse({"status": "ok", "version": request.app.version})


@operations_router.get("/v1/metrics", response_class=PlainTextResponse)
def prometheus(registry: Registry) -> PlainTextResponse:
    """Request counts and latencies per route, in Prometheus' text format (no tenant labels)."""
    return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


records_router = APIRouter(tags=["records"])
"""One user's records: add, change, delete, page through, export and import; the tenant's TTL."""


@serves(records_router, "add", status_code=201)
def add(body: dict[str, Any], tenant: Writer) -> JSONResponse:
    """Add one record: ``user_id`` and Record fields (text, id, kind, category, timestamp...)."""
    fields = dict(body)
    user_id = fields.pop("user_id", None)
    if not isinstance(user_id, str):
        raise InvalidRecordError(f"user_id must be a non-empty string, got {user_id!r}")
    fields.pop("duplicate_of", None)  # a report of a response, sent back by a client: not stored
    return JSONResponse(record_json(tenant.add(user_id, **fields)), 201)


@serves(records_router, "supersede", status_code=201)
def supersede(body: SupersedeIn, tenant: Writer) -> JSONResponse:
    """Store a record that replaces ``old_id`` as the current fact; the old one stays in history."""
    fields = {k: v for k, v in body.record.items() if k not in ("user_id", "duplicate_of")}
    return JSONResponse(record_json(tenant.supersede(body.user_id, body.old_id, **fields)), 201)


@serves(records_router, "ttl", response_model=Ttl)
def ttl(tenant: Admin) -> Response:
    """The tenant's default time-to-live of new records in seconds (null: records do not expire)."""
    found = tenant.ttl()
    return _answer(Ttl(seconds=None if found is None else found.total_seconds()))


@serves(records_router, "set_ttl", response_model=Ttl)
def set_ttl(body: TtlIn, tenant: Admin) -> Response:
    """Set the tenant's default time-to-live of new records (null: none)."""
    tenant.set_ttl(body.seconds)
    return _answer(Ttl(seconds=body.seconds))


@serves(records_router, "purge", response_model=Purged)
def purge(tenant: Admin) -> Response:
    """Erase the tenant's expired records now (a background sweep does it every minute too)."""
    return _answer(Purged(purged=tenant.purge()))


@serves(records_router, "add_many", status_code=201, response_model=RecordBatch)
def add_many(body: BatchIn, tenant: Writer) -> Response:
    """Add many records in one transaction: after any failure, all of them or none are stored."""
    records = tenant.add_many(body.records, user_id=body.user_id, batch_size=len(body.records))
    return _answer(RecordBatch(records=records), 201)


@serves(records_router, "delete", response_model=Deleted)
def delete(body: DeleteIn, tenant: Writer) -> Response:
    """Delete records by id (ids the user does not have are skipped); returns the ids deleted."""
    return _answer(Deleted(deleted=tenant.delete(body.user_id, body.ids)))


@serves(records_router, "records", response_model=RecordPage)
def memory(user_id: str, tenant: Reader, offset: int = 0, limit: int = 1000) -> Response:
    """The user's memory: their records in insertion order, a page at a time."""
    if offset < 0 or not 1 <= limit <= MAX_BATCH:
        raise InvalidInputError(f"need offset >= 0 and 1 <= limit <= {MAX_BATCH}, got {offset}, {limit}")
    records = tenant.records(user_id)
    return _answer(RecordPage(count=len(records), records=records[offset : offset + limit]))


@serves(records_router, "history", response_model=RecordHistory)
def history(user_id: str, record_id: str, tenant: Reader) -> Response:
    """A record's events, oldest first, with who made them; an erased record's without its text."""
    return _answer(RecordHistory(events=tenant.history(user_id, record_id)))


@serves(records_router, "export", response_class=StreamingResponse)
def export(user_id: str, tenant: Reader, interactions: bool = False) -> StreamingResponse:
    """The user's export as JSON Lines (see ``personamem.portability``), for ``POST /v1/import``."""
    lines = export_lines(tenant, check_user_id(user_id), interactions=interactions)
    return StreamingResponse((line + "\n" for line in lines), media_type="application/x-ndjson")


@serves(records_router, "import_user", status_code=201)
async def import_user(request: Request, tenant: Writer, user_id: str | None = None) -> dict[str, Any]:
    """Store a user's export (the body, JSON Lines), as its user or ``user_id``; idempotent."""
    body = await request.body()
    added = await run_in_threadpool(_import_export, tenant, body, user_id)
    return {"records": added.records, "interactions": added.interactions}


def _import_export(mem: PersonaMem, body: bytes, user_id: str | None) -> Imported:
    """``mem.import_user`` of a request body; its errors name the body's line, not a temporary file."""
    with tempfile.TemporaryDirectory(prefix="personamem-import-") as folder:
        path = Path(folder) / "export.jsonl"
        path.write_bytes(body)
        try:
            return mem.import_user(path, user_id=user_id)
        except IngestError as exc:
            where = f"{exc.path}:{exc.line}: " if exc.line else f"{exc.path}: "
            raise IngestError(str(exc).removeprefix(where), path="the request body", line=exc.line) from None


# a record id is the rest of the path, so ids with "/" work; user ids travel in queries and bodies
@serves(records_router, "get")
def get(record_id: str, user_id: str, tenant: Reader) -> JSONResponse:
    """One record; 404 when the user has no record with this id."""
    record = tenant.get(user_id, record_id)
    if record is None:
        raise HTTPException(404, f"user {user_id!r} has no record {record_id!r}")
    return JSONResponse(record_json(record))


@serves(records_router, "update")
def update(record_id: str, user_id: str, body: dict[str, Any], tenant: Writer) -> JSONResponse:
    """Replace fields of one record (not its id or user); it is re-indexed."""
    if {"id", "user_id", "record_id"} & body.keys():
        raise InvalidInputError("update cannot change a record's id or user; delete it and add a new one")
    return JSONResponse(record_json(tenant.update(user_id, record_id, **body)))


@records_router.delete("/v1/records/{record_id:path}", response_model=Deleted)
def delete_one(record_id: str, user_id: str, tenant: Writer) -> Response:
    """Delete one record, leaving no trace of it; 404 when there is no such record."""
    deleted = tenant.delete(user_id, [record_id])
    if not deleted:
        raise HTTPException(404, f"user {user_id!r} has no record {record_id!r}")
    return _answer(Deleted(deleted=deleted))


retrieval_router = APIRouter(tags=["retrieval"])
"""Search, context for a prompt, and feedback on a logged call."""


@serves(retrieval_router, "search", response_model=SearchResult)
def search(body: SearchIn, tenant: Reader) -> Response:
    """The user's top k records by any method name; LLM stages that fell back are listed."""
    with collect_fallbacks() as notes:
        hits = tenant.search(
            body.user_id,
            body.query,
            k=body.k,
            method=body.method,
            as_of=body.as_of,
            include_superseded=body.include_superseded,
            filters=body.filters,
        )
    return _answer(SearchResult.of(hits, notes))


@serves(retrieval_router, "feedback", response_model=FeedbackResult)
def feedback(body: FeedbackReport, tenant: Writer) -> Response:
    """Report the accepted answer, a rating or the records used for a logged call (422 if unknown)."""
    tenant.feedback(**body.model_dump())
    return _answer(FeedbackResult(interaction_id=body.interaction_id))


@serves(retrieval_router, "context", response_model=Context)
def context(body: ContextIn, tenant: Reader) -> Response:
    """What to paste into the LLM's prompt for the query, within the token budget."""
    result = tenant.context(
        body.user_id,
        body.query,
        budget_tokens=body.budget_tokens,
        method=body.method,
        as_of=body.as_of,
        include_superseded=body.include_superseded,
        filters=body.filters,
    )
    return _answer(result)


memory_router = APIRouter(tags=["memory"])
"""The users' preference memories: read, rebuild, and rerank candidates with them."""


@serves(memory_router, "memory")
def preference_memory(user_id: str, tenant: Reader) -> dict[str, Any]:
    """The user's preference memory with its evidence record ids; rebuilt first if the history changed.

    ``stale`` is true when the rebuild failed or did not finish in time (``warnings`` say which).
    """
    with collect_fallbacks() as notes:
        memory = tenant.memory(user_id)
    return {**memory.to_json(), "warnings": notes}


@serves(memory_router, "refresh_memories", response_model=Built)
def refresh_memories(body: RefreshIn, tenant: Writer) -> Response:
    """Build the missing or stale memories of the users named (or all); returns how many were built."""
    users = None if body.all else body.user_ids
    return _answer(Built(built=tenant.refresh_memories(users, batch_size=body.batch_size)))


@serves(memory_router, "rerank", response_model=Reranked)
def rerank(body: RerankIn, tenant: Writer) -> Response:
    """Candidate indices, best first, by the setwise LLM reranker given the user's memory."""
    with collect_fallbacks() as notes:
        order = tenant.rerank(body.user_id, body.query, body.candidates, k=body.k)
    return _answer(Reranked(order=order, warnings=notes))


users_router = APIRouter(tags=["users"])
"""The tenant's users: list, count and erase."""


@serves(users_router, "users", response_model=Users)
def users(tenant: Reader) -> Response:
    """The tenant's users with at least one record, sorted."""
    return _answer(Users(users=tenant.users()))


@serves(users_router, "forget", response_model=Forgotten)
def forget(user_id: str, tenant: Writer) -> Response:
    """Erase the user: records, vectors, cached derived data."""
    return _answer(Forgotten(forgotten=tenant.forget(user_id)))


@serves(users_router, "count", response_model=Count)
def count(tenant: Reader, user_id: str | None = None) -> Response:
    """Records of one user (0 for an unknown user), or of all the tenant's users."""
    return _answer(Count(count=tenant.count(user_id)))


keys_router = APIRouter(tags=["keys"])
"""The tenant's API keys (admin keys only): not a :class:`~personamem.contract.MemoryApi` operation."""


@keys_router.get("/v1/keys", response_model=KeysOut)
def keys(tenant: Admin) -> Response:
    """The tenant's API keys, oldest first: ids, scopes, rates, labels (never the secrets)."""
    listed = tenant.keys.list(_tenant_name(tenant))
    return _answer(KeysOut(keys=[KeyOut.of(key) for key in listed]))


@keys_router.post("/v1/keys", status_code=201, response_model=NewKeyOut)
def create_key(body: KeyIn, tenant: Admin) -> Response:
    """A new key for the caller's tenant (``scope``, ``rate`` per minute); the key is shown this once."""
    key, listing = tenant.keys.create(
        _tenant_name(tenant), label=body.label, scope=body.scope, rate=body.rate
    )
    return _answer(NewKeyOut(key=key, **KeyOut.of(listing).model_dump()), 201)


@keys_router.delete("/v1/keys/{key_id}", response_model=KeyOut)
def revoke_key(key_id: str, tenant: Admin) -> Response:
    """Revoke one of the tenant's keys (every worker refuses it from the next request); 404 if not its."""
    try:
        revoked = tenant.keys.revoke(key_id, tenant=_tenant_name(tenant))
    except InvalidInputError:
        raise HTTPException(404, f"this tenant has no API key {key_id!r}") from None
    return _answer(KeyOut.of(revoked))


ROUTERS = (operations_router, records_router, retrieval_router, memory_router, users_router, keys_router)
"""Every REST router, in the order ``create_app`` includes them."""
