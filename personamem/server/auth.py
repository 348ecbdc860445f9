"""Who may call a route: the request's API key, its tenant, its scope and its rate.

Each route states the scope it needs in its signature, as the type of its memory parameter:
``tenant: Reader`` (``read``), ``Writer`` (``write``) or ``Admin`` (``admin``), the one
:data:`TENANT_OF` gives for a contract operation's row (``scope``); health and metrics take none.
The dependency reads the key from SQL on every request (so a revocation reaches every worker at
once) and answers, in this order: 401 without a valid key, 403 when the key's scope is too small
(naming both scopes), 429 with ``Retry-After`` when a key with a rate is over it (the count is kept
in SQL, shared by every worker: :meth:`~personamem.inspection.keys.KeyRing.admit`), and otherwise hands the
route its tenant's view of the memory. ``create_app`` puts the memory in ``app.state.memory``; the
inspector's routes and MCP's gate use the same dependencies.

(No ``from __future__ import annotations``: FastAPI reads the dependencies' annotations.)
"""

from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from personamem.errors import RateLimitedError
from personamem.memory import PersonaMem
from personamem.store.history import key_actor, set_actor
from personamem.store.keys import ApiKey, KeyScope, require_scope, retry_seconds

__all__ = ["TENANT_OF", "Admin", "Reader", "Writer", "authorize"]


def _key_in(request: Request) -> str | None:
    """The key of ``Authorization: Bearer <key>``, else of ``X-API-Key``."""
    header = request.headers.get("authorization", "")
    key = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else None
    return key or request.headers.get("x-api-key")


def authorize(request: Request, needed: KeyScope) -> tuple[PersonaMem, ApiKey]:
    """The tenant's memory and the key of a request that may make a call needing ``needed``.

    Raises:
        HTTPException: 401, no valid key.
        PermissionDeniedError: 403, the key's scope is below ``needed``.
        RateLimitedError: 429, the key is over its rate (nothing else was done).
    """
    mem: PersonaMem = request.app.state.memory
    key = _key_in(request)
    found = mem.inspection.keys.check(key) if key else None
    if found is None:
        raise HTTPException(401, "a valid API key is required (Authorization: Bearer <key>)")
    require_scope(found.scope, needed, f"{request.method} {request.url.path}")
    if found.rate is not None and (wait := mem.inspection.keys.admit(found)) > 0:
        seconds = retry_seconds(wait)
        raise RateLimitedError(
            f"API key {found.key_id} is over its rate of {found.rate} requests per minute; "
            f"retry in {seconds} s",
            retry_after=seconds,
        )
    return mem.tenant(found.tenant), found


async def _access(request: Request, needed: KeyScope) -> PersonaMem:
    """:func:`authorize` (in a worker thread: it reads SQL), then the key as the request's actor.

    Async so the actor is set in the request's own task, where the route runs (a sync dependency
    runs in a copy of the context, and what it sets is lost): the records' events name the key.
    """
    mem, key = await run_in_threadpool(authorize, request, needed)
    set_actor(key_actor(key.key_id, key.tenant))
    return mem


async def _reader(request: Request) -> PersonaMem:
    return await _access(request, KeyScope.READ)


async def _writer(request: Request) -> PersonaMem:
    return await _access(request, KeyScope.WRITE)


async def _admin(request: Request) -> PersonaMem:
    return await _access(request, KeyScope.ADMIN)


Reader = Annotated[PersonaMem, Depends(_reader)]
"""The tenant's memory for a route a ``read`` key may call."""
Writer = Annotated[PersonaMem, Depends(_writer)]
"""The tenant's memory for a route that changes records: ``write`` keys and above."""
Admin = Annotated[PersonaMem, Depends(_admin)]
"""The tenant's memory for a route that changes the tenant's settings or keys: ``admin`` keys only."""

TENANT_OF: dict[KeyScope, Any] = {KeyScope.READ: Reader, KeyScope.WRITE: Writer, KeyScope.ADMIN: Admin}
"""The memory parameter's type of a route needing each scope (a contract row's ``scope``)."""
