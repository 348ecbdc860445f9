"""The JSON bodies of the REST API (v1) that only the server reads: what a request may hold.

What a response holds is :mod:`personamem.contract`'s (one shape for the SDK, the CLI, MCP and the
clients), and the feedback body is :class:`~personamem.interactions.FeedbackReport`. Records travel
as :class:`~personamem.records.Record` fields, so the server validates them with the same rules as
the SDK and a client rebuilds the same objects.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from personamem.store.keys import ApiKey, KeyScope

__all__ = [
    "MAX_BATCH",
    "MAX_CANDIDATES",
    "MAX_K",
    "BatchIn",
    "ContextIn",
    "DeleteIn",
    "KeyIn",
    "KeyOut",
    "KeysOut",
    "NewKeyOut",
    "RefreshIn",
    "RerankIn",
    "SearchIn",
    "SupersedeIn",
    "TtlIn",
]

MAX_K = 1000
"""Most records one search returns (a larger k is a 422, not a slow request)."""
MAX_BATCH = 10_000
"""Most records one batch request adds (the body size limit applies too)."""
MAX_QUERY = 8192
"""Longest query in characters (longer ones are truncated by the encoder anyway)."""
MAX_CANDIDATES = 100
"""Most candidates one rerank orders: each 5-way choice is an LLM call (about 130 for 100)."""
MAX_REFRESH_BATCH = 64
"""Most users per LLM call in a refresh (one batched generation holds them all in memory)."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchIn(_Body):
    """``POST /v1/search``."""

    user_id: str
    query: str = Field(min_length=1, max_length=MAX_QUERY)
    k: int = 5
    method: str | None = None
    """A method name; none: the pipeline the server serves (its store's live pipeline, else the default)."""
    as_of: datetime | None = None
    include_superseded: bool = False
    filters: dict[str, Any] | None = None
    """Only records this filter admits (the grammar: ``personamem.store.filters``); a bad one is a 422."""

    @field_validator("k")
    @classmethod
    def _k_in_range(cls, k: int) -> int:
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be at least 1 and at most {MAX_K}, got {k}")
        return k


class ContextIn(_Body):
    """``POST /v1/context``; ``method`` names a method run over the server's config.

    ``pipeline`` is still read as ``method``'s deprecated name (the SDK's rule: ``pipeline``
    configures a memory, ``method`` picks what one call runs).
    """

    user_id: str
    query: str = Field(min_length=1, max_length=MAX_QUERY)
    budget_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    method: str | None = None
    as_of: datetime | None = None
    include_superseded: bool = False
    filters: dict[str, Any] | None = None
    """As in ``POST /v1/search``."""

    @model_validator(mode="before")
    @classmethod
    def _old_name(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "pipeline" not in data:
            return data
        data = dict(data)
        old = data.pop("pipeline")
        if old is not None and data.get("method") is not None:
            raise ValueError("give method only: pipeline is its deprecated name, not a second choice")
        if old is not None:
            data["method"] = old
        return data


class SupersedeIn(_Body):
    """``POST /v1/records/supersede``: the new record's fields replace record ``old_id`` as the fact."""

    user_id: str
    old_id: str = Field(min_length=1)
    record: dict[str, Any]


class TtlIn(_Body):
    """``PUT /v1/ttl``: the tenant's default time-to-live of new records, in seconds (null: none)."""

    seconds: float | None = Field(default=None, gt=0)


class BatchIn(_Body):
    """``POST /v1/records/batch``: records (dicts with Record fields or texts), one transaction."""

    records: list[dict[str, Any] | str] = Field(min_length=1, max_length=MAX_BATCH)
    user_id: str | None = None


class DeleteIn(_Body):
    """``POST /v1/records/delete``."""

    user_id: str
    ids: list[str] = Field(min_length=1, max_length=MAX_BATCH)


class RefreshIn(_Body):
    """``POST /v1/memory/refresh``: the users named, or ``"all": true`` for every user of the tenant."""

    user_ids: list[str] | None = Field(default=None, min_length=1, max_length=MAX_BATCH)
    all: bool = False
    batch_size: int = Field(default=8, ge=1, le=MAX_REFRESH_BATCH)

    @model_validator(mode="after")
    def _users_or_all(self) -> RefreshIn:
        if (self.user_ids is not None) == self.all:
            raise ValueError('name the users ("user_ids": [...]) or all of them ("all": true), not both')
        return self


class RerankIn(_Body):
    """``POST /v1/rerank``: candidate texts to order for the user's request."""

    user_id: str
    query: str = Field(max_length=MAX_QUERY)
    candidates: list[str] = Field(max_length=MAX_CANDIDATES)
    k: int | None = Field(default=None, ge=1)


class KeyIn(_Body):
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
