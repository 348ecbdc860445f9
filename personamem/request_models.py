"""What each REST request of a :class:`~personamem.contract.MemoryApi` operation may hold.

A route row (:data:`~personamem.contract.ROUTES`) names the models here: ``body`` for the JSON body,
``query`` for the query string. The server reads requests with them and the clients
(:mod:`personamem.remote`) build requests with them, so a request one side would refuse is refused
by the other with the same message, before it travels. Records travel as
:class:`~personamem.records.Record` fields, validated by the SDK's own rules where they are stored.
Nothing here imports FastAPI.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "MAX_BATCH",
    "MAX_CANDIDATES",
    "MAX_K",
    "MAX_QUERY",
    "MAX_REFRESH_BATCH",
    "AddIn",
    "BatchIn",
    "ContextIn",
    "CountQuery",
    "DeleteIn",
    "ExportQuery",
    "HistoryQuery",
    "ImportQuery",
    "RecordsQuery",
    "RefreshIn",
    "RerankIn",
    "SearchIn",
    "StrictBody",
    "SupersedeIn",
    "TtlIn",
    "UpdateIn",
    "UserQuery",
    "problems_text",
]

MAX_K = 1000
"""Most records one search returns (a larger k is a 422, not a slow request)."""
MAX_BATCH = 10_000
"""Most records one batch request adds, and most records one page lists (the body size limit applies too)."""
MAX_QUERY = 8192
"""Longest query in characters (longer ones are truncated by the encoder anyway)."""
MAX_CANDIDATES = 100
"""Most candidates one rerank orders: each 5-way choice is an LLM call (about 130 for 100)."""
MAX_REFRESH_BATCH = 64
"""Most users per LLM call in a refresh (one batched generation holds them all in memory)."""


def problems_text(problems: Iterable[Mapping[str, Any]]) -> str:
    """Pydantic's validation problems as one line, ``where: what; ...`` (the server's 422 message)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in problem['loc'])}: {str(problem['msg']).removeprefix('Value error, ')}"
        for problem in problems
    )


class StrictBody(BaseModel):
    """A request body that refuses keys it does not declare (a misspelt field is a 422, not ignored)."""

    model_config = ConfigDict(extra="forbid")


class _Fields(BaseModel):
    """A body of record fields: the store validates them (as the SDK does), so extra keys are allowed."""

    model_config = ConfigDict(extra="allow")


class AddIn(_Fields):
    """``POST /v1/records``: ``user_id``, the record's fields and what to do with a near-copy.

    The record's fields (text, id, kind, category, timestamp...) are the extra keys.
    """

    user_id: str
    duplicates: str | None = None
    """``keep``, ``skip`` or ``merge`` (None: the memory's policy)."""
    duplicate_threshold: float | None = None
    duplicate_of: Any = Field(default=None, exclude=True)
    """A report of an answer (a client sending a record back): never stored, never sent on."""


class UpdateIn(_Fields):
    """``PATCH /v1/records/{record_id}``: the fields to replace (not the record's id or user)."""

    @model_validator(mode="after")
    def _not_identity(self) -> UpdateIn:
        if {"id", "user_id", "record_id"} & (self.model_extra or {}).keys():
            raise ValueError("update cannot change a record's id or user; delete it and add a new one")
        return self


class SearchIn(StrictBody):
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


class ContextIn(StrictBody):
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


class SupersedeIn(StrictBody):
    """``POST /v1/records/supersede``: the new record's fields replace record ``old_id`` as the fact."""

    user_id: str
    old_id: str = Field(min_length=1)
    record: dict[str, Any]


class TtlIn(StrictBody):
    """``PUT /v1/ttl``: the tenant's default time-to-live of new records, in seconds (null: none)."""

    seconds: float | None = Field(default=None, gt=0)


class BatchIn(StrictBody):
    """``POST /v1/records/batch``: records (dicts with Record fields or texts), one transaction."""

    records: list[dict[str, Any] | str] = Field(min_length=1, max_length=MAX_BATCH)
    user_id: str | None = None


class DeleteIn(StrictBody):
    """``POST /v1/records/delete``."""

    user_id: str
    ids: list[str] = Field(min_length=1, max_length=MAX_BATCH)


class RefreshIn(StrictBody):
    """``POST /v1/memory/refresh``: the users named, or ``"all": true`` for every user of the tenant."""

    user_ids: list[str] | None = Field(default=None, min_length=1, max_length=MAX_BATCH)
    all: bool = False
    batch_size: int = Field(default=8, ge=1, le=MAX_REFRESH_BATCH)

    @model_validator(mode="after")
    def _users_or_all(self) -> RefreshIn:
        if (self.user_ids is not None) == self.all:
            raise ValueError('name the users ("user_ids": [...]) or all of them ("all": true), not both')
        return self


class RerankIn(StrictBody):
    """``POST /v1/rerank``: candidate texts to order for the user's request."""

    user_id: str
    query: str = Field(max_length=MAX_QUERY)
    candidates: list[str] = Field(max_length=MAX_CANDIDATES)
    k: int | None = Field(default=None, ge=1)


class UserQuery(BaseModel):
    """``?user_id=``: the user a record, a memory or an erasure belongs to."""

    user_id: str


class RecordsQuery(UserQuery):
    """``GET /v1/records``: a page of the user's records, in insertion order."""

    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=1000, ge=1, le=MAX_BATCH)


class HistoryQuery(UserQuery):
    """``GET /v1/history``: one record's events."""

    record_id: str


class ExportQuery(UserQuery):
    """``GET /v1/export``: the user's export, with their logged interactions if asked."""

    interactions: bool = False


class ImportQuery(BaseModel):
    """``POST /v1/import``: store the export (the body) as its own user, or as ``user_id``."""

    user_id: str | None = None


class CountQuery(BaseModel):
    """``GET /v1/count``: records of one user, or (no ``user_id``) of the whole tenant."""

    user_id: str | None = None
