"""API keys: each names one tenant, a scope and an optional rate; the store keeps only a hash of the secret.

A key reads ``pm_<key id>_<secret>``. The key id is public (it appears in listings and logs, and
revoking takes it); the secret is 256 random bits, shown once at creation. We keep SHA-256 of the
secret rather than a slow password hash: slow hashes protect guessable passwords, and a 256-bit
secret cannot be guessed, while a slow hash would cost milliseconds on every request.

A key's scope says what it may do (:class:`KeyScope`: read < write < admin); a key made before
scopes existed has none stored and acts as ``admin``, as it did. A key's rate is requests per
minute, enforced by :meth:`KeyRing.admit` with the generic cell rate algorithm (GCRA) on one row
per key in the same SQL database, so every worker and every machine of a server shares the limit.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from sqlalchemy import Float, bindparam, case, insert, update
from sqlalchemy import select as select_columns
from sqlmodel import Field, col, select

from personamem.errors import InvalidInputError, PermissionDeniedError
from personamem.store.sql import SqlCatalog
from personamem.store.tables import StoreTable
from personamem.store.tenants import check_tenant

__all__ = ["ApiKey", "KeyRing", "KeyScope", "check_rate", "require_scope", "retry_seconds"]

_PREFIX = "pm_"
_WINDOW_S = 60.0  # a rate is per minute; a burst may spend a whole minute's requests at once
_SLACK_S = 1e-3  # float rounding of epoch seconds must not refuse the last request of a burst


class KeyScope(StrEnum):
    """What a key may do; each scope allows everything the ones before it do."""

    READ = "read"
    """Search, context, records, counts, exports, the inspector, MCP's reading tools."""
    WRITE = "write"
    """``read`` and every change to users' records: add, update, delete, forget, import, feedback."""
    ADMIN = "admin"
    """``write`` and the tenant's settings and keys: time-to-live, purge, creating and revoking keys."""

    def allows(self, needed: KeyScope) -> bool:
        """Whether a key of this scope may make a call that needs ``needed``."""
        order = list(KeyScope)
        return order.index(self) >= order.index(needed)


def require_scope(scope: KeyScope | None, needed: KeyScope, what: str) -> None:
    """Refuse ``what`` (a route, a tool), which needs ``needed``, to a key of ``scope`` below it.

    The one check behind the REST routes' dependencies and MCP's tools, so both answer alike.

    Raises:
        PermissionDeniedError: ``scope`` is None or too small; it names both scopes.
    """
    if scope is None or not scope.allows(needed):
        have = None if scope is None else scope.value
        message = f"this API key's scope is {have!r}; {what} needs {needed.value!r}"
        raise PermissionDeniedError(message, needed=needed.value, scope=have)


class ApiKeyRow(StoreTable, table=True):
    """One API key: its public id, its tenant, the SHA-256 of its secret, its scope and its rate."""

    __tablename__ = "api_keys"

    key_id: str = Field(primary_key=True)
    tenant: str = Field(index=True)
    secret_sha256: str
    label: str = ""
    created_at: str  # ISO 8601, UTC
    revoked_at: str | None = None
    scope: str | None = None  # NULL: made before scopes existed, acts as admin (store/tables.py adds it)
    rate_per_minute: int | None = None  # NULL: no limit


class KeyRateRow(StoreTable, table=True):
    """A rated key's theoretical arrival time (GCRA): when its next request would be on schedule."""

    __tablename__ = "api_key_rates"

    key_id: str = Field(primary_key=True)
    tat: float  # epoch seconds


@dataclass(frozen=True)
class ApiKey:
    """What a listing shows of a key (never its secret).

    Attributes:
        key_id: the public id (``pm_<key_id>_...``).
        tenant: the tenant the key opens.
        label: the note given at creation.
        created_at: when it was created (ISO 8601, UTC).
        revoked_at: when it was revoked, or None.
        scope: what it may do.
        rate: most requests per minute (bursts up to as many at once), or None for no limit.
    """

    key_id: str
    tenant: str
    label: str
    created_at: str
    revoked_at: str | None
    scope: KeyScope = KeyScope.ADMIN
    rate: int | None = None

    @property
    def active(self) -> bool:
        """True until the key is revoked."""
        return self.revoked_at is None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_rate(rate: object) -> int | None:
    """``rate`` if it is None or a whole number of requests per minute of at least 1.

    Raises:
        InvalidInputError: anything else.
    """
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int) or rate < 1):
        raise InvalidInputError(f"rate must be a whole number of requests per minute >= 1, got {rate!r}")
    return rate


def _scope(value: KeyScope | str) -> KeyScope:
    try:
        return KeyScope(value)
    except ValueError:
        names = ", ".join(s.value for s in KeyScope)
        raise InvalidInputError(f"scope must be one of {names}, got {value!r}") from None


# GCRA in one statement: the key's next arrival moves on by one interval unless that puts it more
# than a window ahead of now; the row is updated (request admitted) or left as it was (refused)
_NOW = bindparam("now", type_=Float)
_INTERVAL = bindparam("interval", type_=Float)
_START = case((col(KeyRateRow.tat) > _NOW, col(KeyRateRow.tat)), else_=_NOW)
_ADMIT = (
    update(KeyRateRow)
    .where(col(KeyRateRow.key_id) == bindparam("id"))
    .where(_START + _INTERVAL - _NOW <= _WINDOW_S + _SLACK_S)
    .values(tat=_START + _INTERVAL)
)
_TAT = select_columns(col(KeyRateRow.tat)).where(col(KeyRateRow.key_id) == bindparam("id"))


class KeyRing:
    """Create, check, list and revoke the API keys kept in a store's SQL database, and meter their rates."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    def create(
        self,
        tenant: str,
        *,
        label: str = "",
        scope: KeyScope | str = KeyScope.WRITE,
        rate: int | None = None,
    ) -> tuple[str, ApiKey]:
        """A new key for ``tenant``: the full key (shown once, never stored) and its listing.

        Args:
            tenant: the tenant the key opens.
            label: a note for listings.
            scope: what the key may do (``write`` unless told: reading and changing records).
            rate: most requests per minute, bursts included (None: no limit).

        Raises:
            InvalidInputError: a bad tenant name, scope or rate.
        """
        row = ApiKeyRow(
            key_id=secrets.token_hex(6),
            tenant=check_tenant(tenant),
            secret_sha256="",
            label=label,
            created_at=_now(),
            scope=_scope(scope).value,
            rate_per_minute=check_rate(rate),
        )
        secret = secrets.token_urlsafe(32)
        row.secret_sha256 = _digest(secret)
        with self._catalog.session(write=True) as s:
            s.add(row)
            if row.rate_per_minute is not None:  # on schedule from now: a full burst is available
                s.add(KeyRateRow(key_id=row.key_id, tat=time.time()))
        return f"{_PREFIX}{row.key_id}_{secret}", _listing(row)

    def check(self, key: str) -> ApiKey | None:
        """The listing of an active key, or None for a malformed, unknown or revoked key."""
        if not key.startswith(_PREFIX):
            return None
        key_id, _, secret = key.removeprefix(_PREFIX).partition("_")
        if not key_id or not secret:
            return None
        with self._catalog.session() as s:
            row = s.get(ApiKeyRow, key_id)
        # compare even when unknown, so timing does not tell which key ids exist
        stored = row.secret_sha256 if row is not None else _digest("")
        if not hmac.compare_digest(stored, _digest(secret)) or row is None or row.revoked_at is not None:
            return None
        return _listing(row)

    def tenant_of(self, key: str) -> str | None:
        """The tenant of an active key, or None for a malformed, unknown or revoked key."""
        found = self.check(key)
        return None if found is None else found.tenant

    def admit(self, key: ApiKey, *, now: float | None = None) -> float:
        """Count one request of ``key`` against its rate: 0 if it may go now, else seconds to wait.

        GCRA: each request moves the key's theoretical arrival time (TAT) on by ``60 / rate``
        seconds from whichever is later, itself or now; a request that would move it more than a
        minute ahead of now is refused and moves nothing. So a key may burst ``rate`` requests, then
        ``rate`` per minute. The check and the move are one conditional ``UPDATE`` in a write
        transaction (SQLite's ``BEGIN IMMEDIATE``, a row lock on PostgreSQL), so requests through
        any worker or machine are counted once each. A key without a rate is never refused and
        costs nothing here.
        """
        if key.rate is None:
            return 0.0
        interval = _WINDOW_S / key.rate
        now = time.time() if now is None else now
        values = {"id": key.key_id, "now": now, "interval": interval}
        with self._catalog.transaction() as connection:
            if connection.execute(_ADMIT, values).rowcount == 1:
                return 0.0
            tat = connection.execute(_TAT, values).scalar_one_or_none()
            if tat is None:  # no row: ``create`` makes one with the key, so only if it was removed since
                connection.execute(insert(KeyRateRow).values(key_id=key.key_id, tat=now + interval))
                return 0.0
        return max(tat + interval - _WINDOW_S - now, 0.001)

    def revoke(self, key_id: str, *, tenant: str | None = None) -> ApiKey:
        """Revoke a key by its id (among ``tenant``'s keys only, if given); twice keeps the first time.

        Raises:
            InvalidInputError: no key has this id (or none of ``tenant``'s).
        """
        with self._catalog.session(write=True) as s:
            row = s.get(ApiKeyRow, key_id)
            if row is None or (tenant is not None and row.tenant != tenant):
                raise InvalidInputError(f"no API key has id {key_id!r}")
            if row.revoked_at is None:
                row.revoked_at = _now()
                s.add(row)
            return _listing(row)

    def list(self, tenant: str | None = None) -> list[ApiKey]:
        """Every key (or one tenant's), oldest first."""
        with self._catalog.session() as s:
            stmt = select(ApiKeyRow).order_by(col(ApiKeyRow.created_at), col(ApiKeyRow.key_id))
            if tenant is not None:
                stmt = stmt.where(ApiKeyRow.tenant == tenant)
            return [_listing(row) for row in s.exec(stmt)]


def retry_seconds(wait: float) -> int:
    """A wait from :meth:`KeyRing.admit` as a ``Retry-After`` value: whole seconds, at least 1."""
    return max(1, math.ceil(wait))


def _listing(row: ApiKeyRow) -> ApiKey:
    scope = KeyScope.ADMIN if row.scope is None else KeyScope(row.scope)
    when = (row.created_at, row.revoked_at)
    return ApiKey(row.key_id, row.tenant, row.label, *when, scope, row.rate_per_minute)
