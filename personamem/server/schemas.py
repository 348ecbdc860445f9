"""The JSON bodies of the routes only the server has: API keys (the SDK has no key calls).

The :class:`~personamem.contract.MemoryApi` operations' requests are
:mod:`personamem.request_models`' and their answers :mod:`personamem.contract`'s, named by each
operation's row in :data:`~personamem.contract.ROUTES`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from personamem.request_models import StrictBody
from personamem.store.keys import ApiKey, KeyScope

__all__ = ["KeyIn", "KeyOut", "KeysOut", "NewKeyOut"]


class KeyIn(StrictBody):
    """``POST /v1/keys``: a new key for the caller's own tenant."""

    scope: KeyScope = KeyScope.WRITE
    rate: int | None = Field(default=None, ge=1, description="Most requests per minute (null: no limit).")
    label: str = Field(default="", max_length=200)


class KeyOut(BaseModel):
    """One API key as ``/v1/keys`` lists it (never its secret; the SDK has no key calls, so it lives here)."""

    key_id: str
    tenant: str
    label: str
    scope: KeyScope
    rate: int | None
    created_at: str
    revoked_at: str | None

    @classmethod
    def of(cls, key: ApiKey) -> KeyOut:
        """The listing's JSON shape."""
        return cls.model_validate(key, from_attributes=True)


class KeysOut(BaseModel):
    """``GET /v1/keys``: the tenant's keys, oldest first."""

    keys: list[KeyOut]


class NewKeyOut(KeyOut):
    """``POST /v1/keys``: the new key's listing and the key itself, shown this once."""

    key: str
