"""API keys: each names one tenant; the store keeps only a hash of the secret.

A key reads ``pm_<key id>_<secret>``. The key id is public (it appears in listings and logs, and
revoking takes it); the secret is 256 random bits, shown once at creation. We keep SHA-256 of the
secret rather than a slow password hash: slow hashes protect guessable passwords, and a 256-bit
secret cannot be guessed, while a slow hash would cost milliseconds on every request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlmodel import Field, SQLModel, col, select

from personamem.errors import InvalidInputError
from personamem.store.sql import SqlCatalog
from personamem.store.tenants import check_tenant

__all__ = ["ApiKey", "KeyRing"]

_PREFIX = "pm_"


class ApiKeyRow(SQLModel, table=True):
    """One API key: its public id, its tenant and the SHA-256 of its secret."""

    __tablename__ = "api_keys"

    key_id: str = Field(primary_key=True)
    tenant: str = Field(index=True)
    secret_sha256: str
    label: str = ""
    created_at: str  # ISO 8601, UTC
    revoked_at: str | None = None


@dataclass(frozen=True)
class ApiKey:
    """What a listing shows of a key (never its secret)."""

    key_id: str
    tenant: str
    label: str
    created_at: str
    revoked_at: str | None

    @property
    def active(self) -> bool:
        """True until the key is revoked."""
        return self.revoked_at is None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class KeyRing:
    """Create, check, list and revoke the API keys kept in a store's SQL database."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    def create(self, tenant: str, *, label: str = "") -> tuple[str, ApiKey]:
        """A new key for ``tenant``: the full key (shown once, never stored) and its listing."""
        row = ApiKeyRow(
            key_id=secrets.token_hex(6),
            tenant=check_tenant(tenant),
            secret_sha256="",
            label=label,
            created_at=_now(),
        )
        secret = secrets.token_urlsafe(32)
        row.secret_sha256 = _digest(secret)
        with self._catalog.session(write=True) as s:
            s.add(row)
        return f"{_PREFIX}{row.key_id}_{secret}", _listing(row)

    def tenant_of(self, key: str) -> str | None:
        """The tenant of an active key, or None for a malformed, unknown or revoked key."""
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
        return row.tenant

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key by its id; revoking twice keeps the first time.

        Raises:
            InvalidInputError: no key has this id.
        """
        with self._catalog.session(write=True) as s:
            row = s.get(ApiKeyRow, key_id)
            if row is None:
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


def _listing(row: ApiKeyRow) -> ApiKey:
    return ApiKey(row.key_id, row.tenant, row.label, row.created_at, row.revoked_at)
