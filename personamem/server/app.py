"""``personamem serve``: the SDK's calls as versioned JSON routes, one tenant per API key.

Every route but health and metrics takes ``Authorization: Bearer <key>`` (or ``X-API-Key``); the key
names a tenant and the route works on ``mem.tenant(tenant)``, so isolation is the store's, not the
route's. Each route names the scope a key needs as the type of its memory parameter (``Reader``,
``Writer``, ``Admin``: :mod:`personamem.server.auth`, which also meters keys with a rate). Errors
are JSON ``{"error": {"type", "message"}}`` with a 4xx status for anything the request got wrong;
a 500 says only that the server failed (the traceback goes to the server's log).
Answers are :mod:`personamem.contract`'s models, dumped once by pydantic, so each has the JSON
shape the SDK's ``to_json``, the CLI and the MCP tools give it and the clients read back.
Handlers are plain functions: FastAPI runs them in its thread pool, and ``PersonaMem`` is
thread-safe. (No ``from __future__ import annotations`` here: FastAPI reads the handlers'
annotations at definition time.)
"""

import logging
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import Route

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
    CheckpointError,
    ConfigError,
    IngestError,
    InvalidInputError,
    InvalidRecordError,
    LLMError,
    MethodError,
    MissingExtraError,
    PartialWriteError,
    PermissionDeniedError,
    PersonaMemError,
    RateLimitedError,
    StoreError,
    collect_fallbacks,
)
from personamem.interactions import FeedbackReport
from personamem.memory import PersonaMem, open_memory
from personamem.methods import SERVED_BY_DEFAULT, ServedMethods
from personamem.portability import Imported, export_lines
from personamem.records import check_user_id
from personamem.server.auth import Admin, Reader, Writer, authorize
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
from personamem.server.ui import install_ui
from personamem.settings import settings
from personamem.store.keys import ApiKey, KeyScope

if TYPE_CHECKING:
    from personamem.mcp_server import HttpEndpoint

__all__ = ["DEFAULT_MAX_BODY_BYTES", "app_from_env", "create_app"]

log = logging.getLogger("personamem.server")

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
_STATUS: list[tuple[type[PersonaMemError], int]] = [  # most specific first
    (PartialWriteError, 503),
    (InvalidInputError, 422),
    (MethodError, 400),
    (ConfigError, 400),
    (CheckpointError, 400),
    (MissingExtraError, 501),
    (LLMError, 503),
    (StoreError, 503),
    (PersonaMemError, 400),
]


def _answer(result: BaseModel, status: int = 200) -> Response:
    """``result`` as its contract model dumps it (pydantic serializes once; no second validation)."""
    return Response(result.model_dump_json(), status, media_type="application/json")


def _error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else headers
    return JSONResponse({"error": {"type": kind, "message": message, **extra}}, status, headers=headers)


class _Api(FastAPI):
    """FastAPI with a request whose *declared* body is over the limit refused in the JSON error shape.

    FastAPI's own limit (Starlette's, the outermost middleware but one) answers that case in plain
    text, replacing whatever the app answers; a middleware of ours would sit inside it. So this
    check wraps the whole stack. Bodies without a length, or longer than declared, are still
    counted by FastAPI's limit as they arrive and reach our handler as an HTTPException (JSON).
    """

    def build_middleware_stack(self) -> Any:
        """The usual stack inside the declared-length check."""
        inner = super().build_middleware_stack()
        limit = self.max_body_size

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and limit is not None:
                declared = Headers(scope=scope).get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    message = f"the request body is {declared} bytes; this server takes at most {limit}"
                    await _error(413, "PayloadTooLarge", message)(scope, receive, send)
                    return
            await inner(scope, receive, send)

        return app


class _Metrics:
    """Request counts and latencies per route, in a registry of this app's own (Prometheus text)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "personamem_requests", "HTTP requests", ["method", "route", "status"], registry=self.registry
        )
        self.seconds = Histogram(
            "personamem_request_seconds", "HTTP request latency", ["method", "route"], registry=self.registry
        )

    def observe(self, request: Request, status: int, seconds: float) -> None:
        route = getattr(request.scope.get("route"), "path", "unmatched")
        self.requests.labels(request.method, route, str(status)).inc()
        self.seconds.labels(request.method, route).observe(seconds)


def _mcp_access(request: Request) -> tuple[PersonaMem, ApiKey]:
    """MCP's gate: any valid key within its rate passes; each tool then checks the key's scope."""
    return authorize(request, KeyScope.READ)


def _tenant_name(tenant: PersonaMem) -> str:
    name = tenant.tenant_name
    assert name is not None  # the auth dependencies give tenant views only
    return name


_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def _declarer(app: FastAPI) -> Callable[..., Callable[[_Handler], _Handler]]:
    """``serves(operation, **options)``: a handler's decorator at the operation's route in ``ROUTES``."""

    def serves(operation: str, **options: Any) -> Callable[[_Handler], _Handler]:
        route = ROUTES[operation]
        return app.api_route(route.served, methods=[route.verb], **options)

    return serves


def create_app(
    mem: PersonaMem,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    methods: ServedMethods = SERVED_BY_DEFAULT,
) -> FastAPI:
    """The REST API over ``mem``; the app closes ``mem`` when it shuts down.

    ``methods`` are the method names requests may give (REST, the inspector and MCP alike); it
    becomes ``mem.served_methods``, so a request never names a file or folder the operator did not
    allow (:class:`~personamem.methods.ServedMethods`).
    """
    mem.served_methods = methods
    mcp = _mcp_endpoint()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp.running() if mcp is not None else nullcontext():
            yield
        mem.close()

    app = _Api(
        title="personamem",
        version=version("personamem"),
        description="Per-user memory for LLM applications: store, search, context, forget.",
        lifespan=lifespan,
        max_body_size=max_body_bytes,  # counted as it arrives: an undeclared length cannot pass it
        telemetry={"tracing": False, "metrics": False, "logs": False},  # paths name users
    )
    app.state.memory = mem  # what the key dependencies (personamem.server.auth) open tenants of
    serves = _declarer(app)
    metrics = _Metrics()
    _install_error_handlers(app)
    # MCP (streamable HTTP) over the same keys and tenants; 501 naming the extra when mcp is missing
    app.router.routes.append(Route("/mcp", mcp.app if mcp else _no_mcp, methods=["GET", "POST", "DELETE"]))

    @app.middleware("http")
    async def _observe(request: Request, call_next: Callable[[Request], Awaitable[Any]]) -> Any:
        start = time.perf_counter()
        response = await call_next(request)
        metrics.observe(request, response.status_code, time.perf_counter() - start)
        return response

    @app.get("/v1/health", tags=["operations"])
    def health() -> JSONResponse:
        """Whether the store answers (for load balancers); needs no key and names no tenant."""
        try:
            mem.keys.tenant_of("pm_health_check")
        except StoreError as exc:
            log.warning("health check failed: %s", exc)
            return JSONResponse({"status": "unavailable"}, 503)
        return JSONResponse({"status": "ok", "version": app.version})

    @app.get("/v1/metrics", tags=["operations"], response_class=PlainTextResponse)
    def prometheus() -> PlainTextResponse:
        """Request counts and latencies per route, in Prometheus' text format (no tenant labels)."""
        return PlainTextResponse(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @serves("add", status_code=201, tags=["records"])
    def add(body: dict[str, Any], tenant: Writer) -> JSONResponse:
        """Add one record: ``user_id`` and Record fields (text, id, kind, category, timestamp...)."""
        fields = dict(body)
        user_id = fields.pop("user_id", None)
        if not isinstance(user_id, str):
            raise InvalidRecordError(f"user_id must be a non-empty string, got {user_id!r}")
        fields.pop("duplicate_of", None)  # a report of a response, sent back by a client: not stored
        return JSONResponse(record_json(tenant.add(user_id, **fields)), 201)

    @serves("supersede", status_code=201, tags=["records"])
    def supersede(body: SupersedeIn, tenant: Writer) -> JSONResponse:
        """Store a record that replaces ``old_id`` as the current fact; the old one stays in history."""
        fields = {k: v for k, v in body.record.items() if k not in ("user_id", "duplicate_of")}
        return JSONResponse(record_json(tenant.supersede(body.user_id, body.old_id, **fields)), 201)

    @serves("ttl", tags=["records"], response_model=Ttl)
    def ttl(tenant: Admin) -> Response:
        """The tenant's default time-to-live of new records in seconds (null: records do not expire)."""
        found = tenant.ttl()
        return _answer(Ttl(seconds=None if found is None else found.total_seconds()))

    @serves("set_ttl", tags=["records"], response_model=Ttl)
    def set_ttl(body: TtlIn, tenant: Admin) -> Response:
        """Set the tenant's default time-to-live of new records (null: none)."""
        tenant.set_ttl(body.seconds)
        return _answer(Ttl(seconds=body.seconds))

    @serves("purge", tags=["records"], response_model=Purged)
    def purge(tenant: Admin) -> Response:
        """Erase the tenant's expired records now (a background sweep does it every minute too)."""
        return _answer(Purged(purged=tenant.purge()))

    @serves("add_many", status_code=201, tags=["records"], response_model=RecordBatch)
    def add_many(body: BatchIn, tenant: Writer) -> Response:
        """Add many records in one transaction: after any failure, all of them or none are stored."""
        records = tenant.add_many(body.records, user_id=body.user_id, batch_size=len(body.records))
        return _answer(RecordBatch(records=records), 201)

    @serves("delete", tags=["records"], response_model=Deleted)
    def delete(body: DeleteIn, tenant: Writer) -> Response:
        """Delete records by id (ids the user does not have are skipped); returns the ids deleted."""
        return _answer(Deleted(deleted=tenant.delete(body.user_id, body.ids)))

    @serves("records", tags=["records"], response_model=RecordPage)
    def memory(user_id: str, tenant: Reader, offset: int = 0, limit: int = 1000) -> Response:
        """The user's memory: their records in insertion order, a page at a time."""
        if offset < 0 or not 1 <= limit <= MAX_BATCH:
            raise InvalidInputError(f"need offset >= 0 and 1 <= limit <= {MAX_BATCH}, got {offset}, {limit}")
        records = tenant.records(user_id)
        return _answer(RecordPage(count=len(records), records=records[offset : offset + limit]))

    @serves("history", tags=["records"], response_model=RecordHistory)
    def history(user_id: str, record_id: str, tenant: Reader) -> Response:
        """A record's events, oldest first, with who made them; an erased record's without its text."""
        return _answer(RecordHistory(events=tenant.history(user_id, record_id)))

    @serves("export", tags=["records"], response_class=StreamingResponse)
    def export(user_id: str, tenant: Reader, interactions: bool = False) -> StreamingResponse:
        """The user's export as JSON Lines (see ``personamem.portability``), for ``POST /v1/import``."""
        lines = export_lines(tenant, check_user_id(user_id), interactions=interactions)
        return StreamingResponse((line + "\n" for line in lines), media_type="application/x-ndjson")

    @serves("import_user", status_code=201, tags=["records"])
    async def import_user(request: Request, tenant: Writer, user_id: str | None = None) -> dict[str, Any]:
        """Store a user's export (the body, JSON Lines), as its user or ``user_id``; idempotent."""
        body = await request.body()
        added = await run_in_threadpool(_import_export, tenant, body, user_id)
        return {"records": added.records, "interactions": added.interactions}

    # a record id is the rest of the path, so ids with "/" work; user ids travel in queries and bodies
    @serves("get", tags=["records"])
    def get(record_id: str, user_id: str, tenant: Reader) -> JSONResponse:
        """One record; 404 when the user has no record with this id."""
        record = tenant.get(user_id, record_id)
        if record is None:
            raise HTTPException(404, f"user {user_id!r} has no record {record_id!r}")
        return JSONResponse(record_json(record))

    @serves("update", tags=["records"])
    def update(record_id: str, user_id: str, body: dict[str, Any], tenant: Writer) -> JSONResponse:
        """Replace fields of one record (not its id or user); it is re-indexed."""
        if {"id", "user_id", "record_id"} & body.keys():
            raise InvalidInputError("update cannot change a record's id or user; delete it and add a new one")
        return JSONResponse(record_json(tenant.update(user_id, record_id, **body)))

    @app.delete("/v1/records/{record_id:path}", tags=["records"], response_model=Deleted)
    def delete_one(record_id: str, user_id: str, tenant: Writer) -> Response:
        """Delete one record, leaving no trace of it; 404 when there is no such record."""
        deleted = tenant.delete(user_id, [record_id])
        if not deleted:
            raise HTTPException(404, f"user {user_id!r} has no record {record_id!r}")
        return _answer(Deleted(deleted=deleted))

    @serves("search", tags=["retrieval"], response_model=SearchResult)
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

    @serves("feedback", tags=["retrieval"], response_model=FeedbackResult)
    def feedback(body: FeedbackReport, tenant: Writer) -> Response:
        """Report the accepted answer, a rating or the records used for a logged call (422 if unknown)."""
        tenant.feedback(**body.model_dump())
        return _answer(FeedbackResult(interaction_id=body.interaction_id))

    @serves("context", tags=["retrieval"], response_model=Context)
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

    @serves("memory", tags=["memory"])
    def preference_memory(user_id: str, tenant: Reader) -> dict[str, Any]:
        """The user's preference memory with its evidence record ids; rebuilt first if the history changed.

        ``stale`` is true when the rebuild failed or did not finish in time (``warnings`` say which).
        """
        with collect_fallbacks() as notes:
            memory = tenant.memory(user_id)
        return {**memory.to_json(), "warnings": notes}

    @serves("refresh_memories", tags=["memory"], response_model=Built)
    def refresh_memories(body: RefreshIn, tenant: Writer) -> Response:
        """Build the missing or stale memories of the users named (or all); returns how many were built."""
        users = None if body.all else body.user_ids
        return _answer(Built(built=tenant.refresh_memories(users, batch_size=body.batch_size)))

    @serves("rerank", tags=["memory"], response_model=Reranked)
    def rerank(body: RerankIn, tenant: Writer) -> Response:
        """Candidate indices, best first, by the setwise LLM reranker given the user's memory."""
        with collect_fallbacks() as notes:
            order = tenant.rerank(body.user_id, body.query, body.candidates, k=body.k)
        return _answer(Reranked(order=order, warnings=notes))

    @serves("users", tags=["users"], response_model=Users)
    def users(tenant: Reader) -> Response:
        """The tenant's users with at least one record, sorted."""
        return _answer(Users(users=tenant.users()))

    @serves("forget", tags=["users"], response_model=Forgotten)
    def forget(user_id: str, tenant: Writer) -> Response:
        """Erase the user: records, vectors, cached derived data."""
        return _answer(Forgotten(forgotten=tenant.forget(user_id)))

    install_ui(app)

    @app.get("/v1/keys", tags=["keys"], response_model=KeysOut)
    def keys(tenant: Admin) -> Response:
        """The tenant's API keys, oldest first: ids, scopes, rates, labels (never the secrets)."""
        listed = tenant.keys.list(_tenant_name(tenant))
        return _answer(KeysOut(keys=[KeyOut.of(key) for key in listed]))

    @app.post("/v1/keys", status_code=201, tags=["keys"], response_model=NewKeyOut)
    def create_key(body: KeyIn, tenant: Admin) -> Response:
        """A new key for the caller's tenant (``scope``, ``rate`` per minute); the key is shown this once."""
        key, listing = tenant.keys.create(
            _tenant_name(tenant), label=body.label, scope=body.scope, rate=body.rate
        )
        return _answer(NewKeyOut(key=key, **KeyOut.of(listing).model_dump()), 201)

    @app.delete("/v1/keys/{key_id}", tags=["keys"], response_model=KeyOut)
    def revoke_key(key_id: str, tenant: Admin) -> Response:
        """Revoke one of the tenant's keys (every worker refuses it from the next request); 404 if not its."""
        try:
            revoked = tenant.keys.revoke(key_id, tenant=_tenant_name(tenant))
        except InvalidInputError:
            raise HTTPException(404, f"this tenant has no API key {key_id!r}") from None
        return _answer(KeyOut.of(revoked))

    @serves("count", tags=["users"], response_model=Count)
    def count(tenant: Reader, user_id: str | None = None) -> Response:
        """Records of one user (0 for an unknown user), or of all the tenant's users."""
        return _answer(Count(count=tenant.count(user_id)))

    return app


def _mcp_endpoint() -> "HttpEndpoint | None":
    """The MCP tools for ``/mcp``, each call on its key's tenant (None without the ``mcp`` extra)."""
    try:
        from personamem.mcp_server import http_endpoint
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "mcp":
            raise
        return None
    return http_endpoint(_mcp_access)


def _no_mcp(_: Request) -> JSONResponse:
    raise MissingExtraError(["mcp"], "mcp")


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


def _install_error_handlers(app: FastAPI) -> None:
    """JSON errors: 4xx for the request's mistakes, 503 for a failing store or LLM, 500 otherwise."""

    @app.exception_handler(PersonaMemError)
    async def _known(_: Request, exc: PersonaMemError) -> JSONResponse:
        status = next(code for kind, code in _STATUS if isinstance(exc, kind))
        extra: dict[str, Any] = (
            {"stored": exc.stored, "total": exc.total} if isinstance(exc, PartialWriteError) else {}
        )
        if status >= 500:
            log.error("%s: %s", type(exc).__name__, exc)
        return _error(status, type(exc).__name__, str(exc), **extra)

    @app.exception_handler(PermissionDeniedError)
    async def _denied(_: Request, exc: PermissionDeniedError) -> JSONResponse:
        return _error(403, "PermissionDenied", str(exc), needed=exc.needed, scope=exc.scope)

    @app.exception_handler(RateLimitedError)
    async def _limited(_: Request, exc: RateLimitedError) -> JSONResponse:
        seconds = int(exc.retry_after)  # whole seconds, at least 1 (server.auth rounds up)
        return _error(429, "RateLimited", str(exc), {"Retry-After": str(seconds)}, retry_after=seconds)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            reason = problems[0].get("ctx", {}).get("error", "parse error")
            return _error(400, "MalformedJSON", f"the body is not valid JSON: {reason}")
        text = "; ".join(
            f"{'.'.join(str(p) for p in problem['loc'])}: {str(problem['msg']).removeprefix('Value error, ')}"
            for problem in problems
        )
        return _error(422, "InvalidInputError", text)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        kinds = {401: "AuthenticationError", 404: "NotFound", 405: "MethodNotAllowed", 413: "PayloadTooLarge"}
        message = exc.detail
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        return _error(exc.status_code, kinds.get(exc.status_code, "HTTPError"), str(message))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, "InternalError", "the server failed on this request; its log has the details")


def app_from_env() -> FastAPI:
    """The app ``personamem serve`` runs (a uvicorn factory, so every worker process builds its own).

    Reads the CLI's settings from the environment (:mod:`personamem.settings`): the store, SQL and
    Chroma locations, the pipeline file, the body limit and the ``--allow-method`` entries (checked
    again here).
    """
    env = settings()
    if env.store is None:
        raise ConfigError("PERSONAMEM_STORE is not set: start the server with `personamem serve`")
    methods = ServedMethods.allowing(env.allow_methods or [])
    mem = open_memory(env.store, sql_url=env.sql_url, chroma_url=env.chroma_url, pipeline=env.config)
    return create_app(mem, max_body_bytes=env.max_body_bytes or DEFAULT_MAX_BODY_BYTES, methods=methods)
