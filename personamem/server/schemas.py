"""The JSON bodies of the REST API (v1): what a request may hold and what a response holds.

Records travel as :class:`~personamem.records.Record` fields (``model_dump(mode="json")``), so the
server validates them with the same rules as the SDK and a client rebuilds the same objects.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from personamem.pipeline import Context
from personamem.records import Record
from personamem.retrieval import Hit

__all__ = [
    "MAX_BATCH",
    "MAX_CANDIDATES",
    "MAX_K",
    "BatchIn",
    "ContextIn",
    "DeleteIn",
    "RefreshIn",
    "RerankIn",
    "SearchIn",
    "SupersedeIn",
    "TtlIn",
    "context_json",
    "hit_json",
    "record_json",
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
    method: str = "dense"
    as_of: datetime | None = None
    include_superseded: bool = False

    @field_validator("k")
    @classmethod
    def _k_in_range(cls, k: int) -> int:
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be at least 1 and at most {MAX_K}, got {k}")
        return k


class ContextIn(_Body):
    """``POST /v1/context``; ``pipeline`` names a method run over the server's config."""

    user_id: str
    query: str = Field(min_length=1, max_length=MAX_QUERY)
    budget_tokens: int | None = Field(default=None, ge=1, le=1_000_000)
    pipeline: str | None = None
    as_of: datetime | None = None
    include_superseded: bool = False


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


class FeedbackIn(_Body):
    """``POST /v1/feedback``: what happened after a logged search or context call."""

    interaction_id: str = Field(min_length=1, max_length=64)
    answer: str | None = Field(default=None, max_length=MAX_QUERY * 4)
    rating: float | None = None
    used_record_ids: list[str] | None = Field(default=None, max_length=MAX_K)


def record_json(record: Record) -> dict[str, Any]:
    """A record as JSON, with the near-duplicate ``add`` reported (not a stored field)."""
    return {**record.model_dump(mode="json"), "duplicate_of": record.duplicate_of}


def hit_json(hit: Hit) -> dict[str, Any]:
    """A hit as JSON: its rank, score and the whole record."""
    return {"rank": hit.rank, "score": hit.score, "record": hit.record.model_dump(mode="json")}


def context_json(context: Context) -> dict[str, Any]:
    """A context as JSON, with whole records (``Context.to_json`` keeps only id and text)."""
    body = context.to_json()
    body["records"] = [hit_json(h) for h in context.hits]
    body["dropped"] = [hit_json(h) for h in context.dropped]
    return body
