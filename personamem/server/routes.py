"""The REST routes: one module-level :class:`~fastapi.APIRouter` per OpenAPI tag, in :data:`ROUTERS`.

No handler closes over an app, so :func:`~personamem.server.app.create_app` only includes these
routers; each handler reads what it stores on ``app.state`` through a dependency. A route's memory
parameter is its tenant's view and names the scope its key needs (``Reader``, ``Writer``,
``Admin``: :mod:`personamem.server.auth`, which opens tenants of ``app.state.memory``); health,
which names no tenant, takes the whole memory (``Memory``), and metrics the app's request metrics
(``app.state.metrics``).

Every :class:`~personamem.contract.MemoryApi` operation is served at its row in
:data:`~personamem.contract.ROUTES`, the table the clients request it from. An operation whose
request fields are its arguments by name is served from the row alone (:func:`row_handler`: the
call, its answer model's ``of``); the others have a handler here, declared and checked against the
row with :func:`serves`. (No ``from __future__ import annotations``: FastAPI reads the handlers'
annotations.)
"""

import inspect
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_args, get_origin, get_type_hints

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from personamem.contract import (
    ROUTES,
    Built,
    Deleted,
    FeedbackResult,
    MemoryApi,
    RecordBatch,
    RecordPage,
    StoredRecord,
    Ttl,
)
from personamem.errors import IngestError, InvalidInputError, StoreError, collect_fallbacks
from personamem.interactions import FeedbackReport
from personamem.memory import PersonaMem
from personamem.portability import Imported, export_lines
from personamem.records import check_user_id
from personamem.request_models import (
    AddIn,
    BatchIn,
    DeleteIn,
    ExportQuery,
    ImportQuery,
    RecordsQuery,
    RefreshIn,
    SupersedeIn,
    TtlIn,
    UpdateIn,
    UserQuery,
)
from personamem.server.answers import answer
from personamem.server.auth import TENANT_OF, Admin, Reader, Writer
from personamem.server.job_routes import jobs_router
from personamem.server.schemas import KeyIn, KeyOut, KeysOut, NewKeyOut
from personamem.server.webhook_routes import webhooks_router
from personamem.store.keys import KeyScope
from personamem.store.read import ReadOptions

__all__ = ["ROUTERS", "row_handler", "serves"]

log = logging.getLogger("personamem.server")

_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def serves(router: APIRouter, operation: str, **options: Any) -> Callable[[_Handler], _Handler]:
    """A handler's decorator on ``router`` at the operation's row in ``ROUTES`` (where clients call it).

    The row gives the verb, path, status, answer model, key scope and tag; the handler must read the
    row's request models (``body``, ``query``), so the server cannot accept what the clients would not
    send, and its memory parameter must need the row's scope.

    Raises:
        TypeError: the handler does not read one of the row's request models or names another
            scope, or ``router`` is not the row's tag.
    """
    route = ROUTES[operation]
    if route.tag not in router.tags:
        raise TypeError(f"{operation!r} is listed under {route.tag!r}, not {router.tags}")
    declare = router.api_route(
        route.served,
        methods=[route.verb],
        status_code=route.status,
        response_model=route.response,
        **options,
    )

    def check(handler: _Handler) -> _Handler:
        hints = list(get_type_hints(handler, include_extras=True).values())
        taken = {_model_of(hint) for hint in hints}
        missing = [m.__name__ for m in (route.body, route.query) if m is not None and m not in taken]
        if missing:
            raise TypeError(f"{handler.__name__} serves {operation!r} but does not read {', '.join(missing)}")
        if TENANT_OF[KeyScope(route.scope)] not in hints:
            raise TypeError(f"{handler.__name__} serves {operation!r}, which needs a {route.scope!r} key")
        return declare(handler)

    return check


def row_handler(operation: str) -> Callable[..., Response]:
    """The handler of an operation served from its row alone, with no code of its own.

    The request's fields are the call's arguments by name; the answer is the row's model ``of`` the
    result and the LLM fallbacks noted meanwhile.

    Raises:
        TypeError: the row's answer model has no ``of``, its path holds a parameter (``{record_id}``),
            or a request field is not an argument.
    """
    route = ROUTES[operation]
    answer_of = getattr(route.response, "of", None)
    if answer_of is None:
        raise TypeError(f"{operation!r} has no handler and its answer model has no of(result, notes)")
    if "{" in route.path:
        raise TypeError(f"{operation!r} has no handler and its path {route.path} holds a parameter")
    arguments = _keywords(getattr(MemoryApi, operation))
    fields = [name for model in (route.body, route.query) if model is not None for name in model.model_fields]
    unknown = [name for name in fields if name not in arguments]
    if unknown:
        raise TypeError(f"{operation!r} has no handler and takes no argument {', '.join(unknown)}")

    def handler(
        tenant: PersonaMem, body: BaseModel | None = None, query: BaseModel | None = None
    ) -> Response:
        given = {name: value for part in (body, query) if part is not None for name, value in part}
        with collect_fallbacks() as notes:
            result = getattr(tenant, operation)(**given)
        return answer(answer_of(result, notes), route.status)

    annotations: dict[str, Any] = {"tenant": TENANT_OF[KeyScope(route.scope)]}
    if route.body is not None:
        annotations["body"] = route.body
    if route.query is not None:
        annotations["query"] = Annotated[route.query, Query()]
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter(name, keyword, annotation=hint) for name, hint in annotations.items()]
    handler.__signature__ = inspect.Signature(parameters, return_annotation=Response)  # type: ignore[attr-defined]
    handler.__annotations__ = {**annotations, "return": Response}
    handler.__name__ = handler.__qualname__ = operation
    handler.__doc__ = getattr(MemoryApi, operation).__doc__
    return handler


def _keywords(function: Callable[..., Any]) -> set[str]:
    """The names a call takes: its named parameters and, for ``**read``, the read options."""
    names = set()
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.kind is not inspect.Parameter.VAR_KEYWORD:
            names.add(name)
        elif name == "read":  # ``**read: Unpack[ReadOptions]``
            names.update(ReadOptions.__annotations__)
    return names


def _model_of(hint: Any) -> Any:
    """The type an ``Annotated[Model, Query()]`` hint annotates (the hint itself otherwise)."""
    return get_args(hint)[0] if get_origin(hint) is Annotated else hint


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


def _tenant_name(tenant: PersonaMem) -> str:
    name = tenant.inspection.tenant_name
    assert name is not None  # the auth dependencies give tenant views only
    return name


operations_router = APIRouter(tags=["operations"])
"""Health and metrics: no key, no tenant."""


class Health(BaseModel):
    """``GET /v1/health``: ``ok`` with the server's version, or ``unavailable`` (a 503)."""

    status: str
    version: str | None = None


@operations_router.get("/v1/health", response_model=Health)
def health(request: Request, mem: Memory) -> Response:
    """Whether the store answers (for load balancers); needs no key and names no tenant."""
    try:
        mem.inspection.keys.tenant_of("pm_health_check")
    except StoreError as exc:
        log.warning("health check failed: %s", exc)
        return answer(Health(status="unavailable"), 503)
    return answer(Health(status="ok", version=request.app.version))


@operations_router.get("/v1/metrics", response_class=PlainTextResponse)
def prometheus(registry: Registry) -> PlainTextResponse:
    """Request counts and latencies per route, in Prometheus' text format (no tenant labels)."""
    return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


records_router = APIRouter(tags=["records"])
"""One user's records: add, change, delete, page through, export and import; the tenant's TTL."""


@serves(records_router, "add")
def add(body: AddIn, tenant: Writer) -> Response:
    """Add one record: ``user_id`` and Record fields (text, id, kind, category, timestamp...)."""
    options = body.model_dump(include={"duplicates", "duplicate_threshold"}, exclude_none=True)
    added = tenant.add(body.user_id, **options, **(body.model_extra or {}))
    return answer(StoredRecord(added), 201)


@serves(records_router, "supersede")
def supersede(body: SupersedeIn, tenant: Writer) -> Response:
    """Store a record that replaces ``old_id`` as the current fact; the old one stays in history."""
    fields = {k: v for k, v in body.record.items() if k not in ("user_id", "duplicate_of")}
    return answer(StoredRecord(tenant.supersede(body.user_id, body.old_id, **fields)), 201)


@serves(records_router, "set_ttl")
def set_ttl(body: TtlIn, tenant: Admin) -> Response:
    """Set the tenant's default time-to-live of new records (null: none)."""
    tenant.set_ttl(body.seconds)
    return answer(Ttl(seconds=body.seconds))


@serves(records_router, "add_many")
def add_many(body: BatchIn, tenant: Writer) -> Response:
    """Add many records in one transaction: after any failure, all of them or none are stored."""
    records = tenant.add_many(body.records, user_id=body.user_id, batch_size=len(body.records))
    return answer(RecordBatch(records=records), 201)


@serves(records_router, "delete")
def delete(body: DeleteIn, tenant: Writer) -> Response:
    """Delete records by id (ids the user does not have are skipped); returns the ids deleted."""
    return answer(Deleted(deleted=tenant.delete(body.user_id, body.ids)))


@serves(records_router, "records")
def memory(query: Annotated[RecordsQuery, Query()], tenant: Reader) -> Response:
    """The user's memory: their records in insertion order, a page at a time."""
    records = tenant.records(query.user_id)
    page = records[query.offset : query.offset + query.limit]
    return answer(RecordPage(count=len(records), records=page))


@serves(records_router, "export", response_class=StreamingResponse)
def export(query: Annotated[ExportQuery, Query()], tenant: Reader) -> StreamingResponse:
    """The user's export as JSON Lines (see ``personamem.portability``), for ``POST /v1/import``."""
    user = check_user_id(query.user_id)
    calls = tenant.inspection.interactions(user) if query.interactions else []
    lines = export_lines(user, tenant.records(user), calls)
    return StreamingResponse((line + "\n" for line in lines), media_type="application/x-ndjson")


@serves(records_router, "import_user")
async def import_user(request: Request, query: Annotated[ImportQuery, Query()], tenant: Writer) -> Response:
    """Store a user's export (the body, JSON Lines), as its user or ``user_id``; idempotent."""
    body = await request.body()
    added = await run_in_threadpool(_import_export, tenant, body, query.user_id)
    return answer(added, 201)


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
def get(record_id: str, query: Annotated[UserQuery, Query()], tenant: Reader) -> Response:
    """One record; 404 when the user has no record with this id."""
    record = tenant.get(query.user_id, record_id)
    if record is None:
        raise HTTPException(404, f"user {query.user_id!r} has no record {record_id!r}")
    return answer(StoredRecord(record))


@serves(records_router, "update")
def update(record_id: str, query: Annotated[UserQuery, Query()], body: UpdateIn, tenant: Writer) -> Response:
    """Replace fields of one record (not its id or user); it is re-indexed."""
    return answer(StoredRecord(tenant.update(query.user_id, record_id, **(body.model_extra or {}))))


@records_router.delete("/v1/records/{record_id:path}", response_model=Deleted)
def delete_one(record_id: str, query: Annotated[UserQuery, Query()], tenant: Writer) -> Response:
    """Delete one record, leaving no trace of it; 404 when there is no such record."""
    deleted = tenant.delete(query.user_id, [record_id])
    if not deleted:
        raise HTTPException(404, f"user {query.user_id!r} has no record {record_id!r}")
    return answer(Deleted(deleted=deleted))


retrieval_router = APIRouter(tags=["retrieval"])
"""Search, context for a prompt, and feedback on a logged call."""


@serves(retrieval_router, "feedback")
def feedback(body: FeedbackReport, tenant: Writer) -> Response:
    """Report the accepted answer, a rating or the records used for a logged call (422 if unknown)."""
    tenant.feedback(**body.model_dump())
    return answer(FeedbackResult(interaction_id=body.interaction_id))


memory_router = APIRouter(tags=["memory"])
"""The users' preference memories: read, rebuild, and rerank candidates with them."""


@serves(memory_router, "refresh_memories")
def refresh_memories(body: RefreshIn, tenant: Writer) -> Response:
    """Build the missing or stale memories of the users named (or all); returns how many were built."""
    users = None if body.all else body.user_ids
    return answer(Built(built=tenant.refresh_memories(users, batch_size=body.batch_size)))


users_router = APIRouter(tags=["users"])
"""The tenant's users: list, count and erase."""


keys_router = APIRouter(tags=["keys"])
"""The tenant's API keys (admin keys only): not a :class:`~personamem.contract.MemoryApi` operation."""


@keys_router.get("/v1/keys", response_model=KeysOut)
def keys(tenant: Admin) -> Response:
    """The tenant's API keys, oldest first: ids, scopes, rates, labels (never the secrets)."""
    listed = tenant.inspection.keys.list(_tenant_name(tenant))
    return answer(KeysOut(keys=[KeyOut.of(key) for key in listed]))


@keys_router.post("/v1/keys", status_code=201, response_model=NewKeyOut)
def create_key(body: KeyIn, tenant: Admin) -> Response:
    """A new key for the caller's tenant (``scope``, ``rate`` per minute); the key is shown this once."""
    key, listing = tenant.inspection.keys.create(
        _tenant_name(tenant), label=body.label, scope=body.scope, rate=body.rate
    )
    return answer(NewKeyOut(key=key, **KeyOut.of(listing).model_dump()), 201)


@keys_router.delete("/v1/keys/{key_id}", response_model=KeyOut)
def revoke_key(key_id: str, tenant: Admin) -> Response:
    """Revoke one of the tenant's keys (every worker refuses it from the next request); 404 if not its."""
    try:
        revoked = tenant.inspection.keys.revoke(key_id, tenant=_tenant_name(tenant))
    except InvalidInputError:
        raise HTTPException(404, f"this tenant has no API key {key_id!r}") from None
    return answer(KeyOut.of(revoked))


ROUTERS = (
    operations_router,
    records_router,
    retrieval_router,
    memory_router,
    users_router,
    keys_router,
    webhooks_router,
    jobs_router,
)
"""Every REST router, in the order ``create_app`` includes them (the webhooks' are in ``webhook_routes``,
the jobs' in ``job_routes``)."""


def _serve_the_rows_without_handlers() -> None:
    """Serve each operation that has no handler above from its row (:func:`row_handler`)."""
    by_tag = {router.tags[0]: router for router in ROUTERS}
    for operation, route in ROUTES.items():
        router = by_tag[route.tag]
        declared = {
            (getattr(r, "path", ""), verb) for r in router.routes for verb in getattr(r, "methods", ())
        }
        if (route.served, route.verb) not in declared:
            serves(router, operation)(row_handler(operation))


_serve_the_rows_without_handlers()
