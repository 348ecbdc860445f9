"""``personamem serve``: the SDK's calls as versioned JSON routes, one tenant per API key.

Every route but health and metrics takes ``Authorization: Bearer <key>`` (or ``X-API-Key``); the key
names a tenant and the route works on ``mem.tenant(tenant)``, so isolation is the store's, not the
route's. Each route names the scope a key needs as the type of its memory parameter (``Reader``,
``Writer``, ``Admin``: :mod:`personamem.server.auth`, which also meters keys with a rate). Errors
are JSON ``{"error": {"type", "message"}}`` with a 4xx status for anything the request got wrong;
a 500 says only that the server failed (the traceback goes to the server's log).
Answers are :mod:`personamem.contract`'s models, dumped once by pydantic, so each has the JSON
shape the SDK's ``to_json``, the CLI and the MCP tools give it and the clients read back.
The routes are :mod:`personamem.server.routes`' module-level routers; this module builds the app
around them (state, middleware, error handlers, MCP, the inspector).
Handlers are plain functions: FastAPI runs them in its thread pool, and ``PersonaMem`` is
thread-safe. (No ``from __future__ import annotations`` here: FastAPI reads the handlers'
annotations at definition time.)
"""

import logging
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter, Histogram
from sqlalchemy.exc import DBAPIError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.routing import Route

from personamem.auto_improve import from_settings
from personamem.errors import (
    CheckpointError,
    ConfigError,
    DiskFullError,
    InvalidInputError,
    LLMError,
    MethodError,
    MissingExtraError,
    PartialWriteError,
    PermissionDeniedError,
    PersonaMemError,
    RateLimitedError,
    StoreError,
    StoreUnavailableError,
)
from personamem.job_runner import from_settings as job_runner
from personamem.memory import PersonaMem, open_memory
from personamem.methods import SERVED_BY_DEFAULT, ServedMethods
from personamem.request_models import problems_text
from personamem.server.auth import authorize
from personamem.server.mcp_route import LazyMcp
from personamem.server.otel import TraceContext, export_from_env
from personamem.server.routes import ROUTERS
from personamem.server.ui import install_ui
from personamem.settings import settings
from personamem.store.engine import connection_lost
from personamem.store.keys import ApiKey, KeyScope
from personamem.webhook_delivery import from_settings as webhook_deliverer

__all__ = ["DEFAULT_MAX_BODY_BYTES", "RETRY_AFTER_UNAVAILABLE", "app_from_env", "create_app"]

log = logging.getLogger("personamem.server")

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
RETRY_AFTER_UNAVAILABLE = 1
"""The ``Retry-After`` (seconds) of a 503 while the SQL database is unreachable: a restart takes a few."""
_STATUS: list[tuple[type[PersonaMemError], int]] = [  # most specific first
    (DiskFullError, 507),  # Insufficient Storage: the operator frees space, a retry does not help
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

    async def middleware(self, request: Request, call_next: Callable[[Request], Awaitable[Any]]) -> Any:
        """The app's HTTP middleware: time each request and count it under the route that answered."""
        start = time.perf_counter()
        response = await call_next(request)
        self.observe(request, response.status_code, time.perf_counter() - start)
        return response

    def observe(self, request: Request, status: int, seconds: float) -> None:
        route = getattr(request.scope.get("route"), "path", "unmatched")
        self.requests.labels(request.method, route, str(status)).inc()
        self.seconds.labels(request.method, route).observe(seconds)


def _mcp_access(request: Request) -> tuple[PersonaMem, ApiKey]:
    """MCP's gate: any valid key within its rate passes; each tool then checks the key's scope."""
    return authorize(request, KeyScope.READ)


def create_app(
    mem: PersonaMem,
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    methods: ServedMethods = SERVED_BY_DEFAULT,
) -> FastAPI:
    """The REST API over ``mem``; the app closes ``mem`` when it shuts down.

    ``methods`` are the method names requests may give (REST, the inspector and MCP alike); it
    becomes ``mem.served_methods``, so a request never names a file or folder the operator did not
    allow (:class:`~personamem.methods.ServedMethods`). The routes are :mod:`personamem.server.routes`'
    routers, which find ``mem`` and the metrics on ``app.state``.
    """
    mem.served_methods = methods
    mcp = LazyMcp(_mcp_access)  # MCP over the same keys and tenants; the SDK loads on the first call

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        stop_export = export_from_env()  # spans to the collector the OTEL_* variables name, if any
        improving = from_settings(mem)  # improve on its own once enough feedback came in
        if improving is not None:
            improving.start()
        delivering = webhook_deliverer(mem)  # every process sends the outbox's due events
        delivering.start()
        importing = job_runner(mem)  # every process runs queued bulk imports, a batch at a time
        importing.start()
        yield
        await mcp.close()  # after the calls in flight, if one started MCP's session manager
        importing.close()  # after the batch in progress; its job is handed on
        delivering.close()
        if improving is not None:
            improving.close()
        mem.close()
        if stop_export is not None:
            stop_export()

    app = _Api(
        title="personamem",
        version=version("personamem"),
        description="Per-user memory for LLM applications: store, search, context, forget.",
        lifespan=lifespan,
        max_body_size=max_body_bytes,  # counted as it arrives: an undeclared length cannot pass it
        telemetry={"tracing": False, "metrics": False, "logs": False},  # paths name users
    )
    app.state.memory = mem  # what the key dependencies (personamem.server.auth) open tenants of
    app.state.metrics = metrics = _Metrics()  # what /v1/metrics reads
    _install_error_handlers(app)
    _install_unavailable_handlers(app)
    app.router.routes.append(Route("/mcp", mcp, methods=["GET", "POST", "DELETE"]))  # 501 without the extra
    app.middleware("http")(metrics.middleware)
    app.add_middleware(TraceContext)  # outermost: the caller's trace is the parent of every span
    for router in ROUTERS:
        app.include_router(router)
    install_ui(app)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    """JSON errors: 4xx for the request's mistakes, 5xx for the server's failures, 500 for unknown ones.

    A failing store or LLM is 503; a full disk 507 (Insufficient Storage), which a retry does not fix.
    """

    @app.exception_handler(PersonaMemError)
    async def _known(_: Request, exc: PersonaMemError) -> JSONResponse:
        status = next(code for kind, code in _STATUS if isinstance(exc, kind))
        extra: dict[str, Any] = {}
        if isinstance(exc, PartialWriteError):
            extra = {"stored": exc.stored, "total": exc.total}
        elif isinstance(exc, DiskFullError):
            extra = {"path": exc.path, "free": exc.free}
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
        return _error(422, "InvalidInputError", problems_text(problems))

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


def _install_unavailable_handlers(app: FastAPI) -> None:
    """503 with ``Retry-After`` while the SQL database cannot be reached (restarting, refusing, dropped).

    The store raises :class:`StoreUnavailableError`; a driver error that reached the app another way
    (a statement run outside ``Database``'s transactions) is read the same way, so a database restart
    is never a raw 500. Other driver errors are the server's failure (500), as before.
    """

    @app.exception_handler(StoreUnavailableError)
    async def _unavailable(_: Request, exc: StoreUnavailableError) -> JSONResponse:
        log.warning("StoreUnavailableError: %s", exc)
        seconds = RETRY_AFTER_UNAVAILABLE
        headers = {"Retry-After": str(seconds)}
        return _error(503, "StoreUnavailableError", str(exc), headers, retry_after=seconds)

    async def _driver(request: Request, exc: Exception) -> JSONResponse:
        if connection_lost(exc):
            reason = exc.orig if isinstance(exc, DBAPIError) else exc  # not the statement and its values
            lost = StoreUnavailableError(f"the SQL database is unavailable: {reason}")
            return await _unavailable(request, lost)
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return _error(500, "InternalError", "the server failed on this request; its log has the details")

    app.add_exception_handler(DBAPIError, _driver)
    psycopg = sys.modules.get("psycopg")  # loaded once the store connected to PostgreSQL
    if psycopg is not None:
        app.add_exception_handler(psycopg.Error, _driver)


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
