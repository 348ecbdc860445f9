"""The store's SQL schema: one SQLModel class per table, and how a record maps to its row.

Any table with a ``user_id`` column is per-user data and is wiped by
:meth:`~personamem.store.sql.SqlCatalog.finish_forget`, so caches added later (PBR outputs,
preference memories) are forgotten without having to register anywhere. That relies on every table
being defined when the catalog opens: keep tables here (or in a module the catalog imports).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import numpy as np
from sqlalchemy import JSON, Column, Index, LargeBinary, UniqueConstraint, bindparam
from sqlmodel import Field, SQLModel, col, select

from personamem.records import Record, RecordKind
from personamem.store.pseudonyms import Pseudonyms

__all__ = [
    "ADDED_COLUMNS",
    "RECORD_COLUMNS",
    "TIMES",
    "USER_STATUS",
    "DerivedRow",
    "InteractionRow",
    "JobChunkRow",
    "JobRow",
    "JobState",
    "OutboxRow",
    "OutboxState",
    "RecordEventRow",
    "RecordRow",
    "RecordStatus",
    "StoreInfo",
    "StoreTable",
    "UserRow",
    "UserStatus",
    "WebhookRow",
    "content_hash",
    "is_bounded",
    "record_from_columns",
    "row_values",
    "vector_blob",
]


class RecordStatus(StrEnum):
    """Where a record is in the write protocol: pending → (vector upserted) → indexed."""

    PENDING = "pending"
    INDEXED = "indexed"


class UserStatus(StrEnum):
    """A user being forgotten keeps this mark until rows and vectors are both gone."""

    ACTIVE = "active"
    FORGETTING = "forgetting"


class StoreTable(SQLModel):
    """The store's tables' base: each table's pydantic schema is built on first use, not at import.

    Rows are read through SQLAlchemy and raw statements, never validated by pydantic on a search, so
    a one-shot command need not build a dozen schemas first (the module imports in 35 ms instead of
    48-75, ``-X importtime``).
    """

    model_config = SQLModel.model_config | {"defer_build": True}


class UserRow(StoreTable, table=True):
    """One row per user; ``revision`` is a fresh token on every write, keying per-user caches.

    A random token rather than a counter: a counter restarts when a forgotten user comes back, and a
    cache built before the forget could then pass for current. ``index_token`` changes only when the
    set of the user's *indexed* vectors changes (marked indexed, or put back to pending): it keys
    each process's view of the vector index, which a staged record (served from SQL) leaves valid.
    """

    __tablename__ = "users"

    user_id: str = Field(primary_key=True)
    revision: str = Field(default_factory=lambda: uuid.uuid4().hex)
    status: str = UserStatus.ACTIVE.value
    index_token: str | None = None
    # NULL while the user has no bounded record (validity, expiry): reads then skip the timeline;
    # otherwise changes whenever a write may have changed the user's bounds (keys ``Timeline``)
    bounds_token: str | None = None


class RecordRow(StoreTable, table=True):
    """A stored record; ``pk`` gives insertion order, ``(user_id, record_id)`` is the identity."""

    __tablename__ = "records"
    __table_args__ = (
        UniqueConstraint("user_id", "record_id"),
        # search hits come back as vector ids: without this SQLite scans all of the user's rows
        UniqueConstraint("user_id", "vector_id"),
        Index("ix_records_user_bounded", "user_id", "bounded"),  # a user's timeline, without a scan
        # a user's indexed rows (the vectors a search copies): without it SQLite's planner, which has
        # no statistics, walked the status index, every indexed row of the store (39 ms at 54,000)
        Index("ix_records_user_status", "user_id", "status"),
    )

    pk: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(index=True)
    record_id: str
    vector_id: str
    text: str
    kind: str
    category: str | None = None
    timestamp: str | None = None  # ISO 8601 as given: keeps naive and aware times exactly
    meta: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    input: str | None = None
    output: str | None = None
    content_hash: str
    status: str = Field(default=RecordStatus.PENDING.value, index=True)
    # the record's vector as ``Store.add`` wrote it (float32 bytes): searches score a pending record
    # from here until the vector index has it; kept once indexed, so repair needs no re-encoding and
    # a worker can read a user's vectors when the index cannot be opened (a full disk). The name
    # predates the keeping: renaming it waits for schema migrations (issue 62)
    pending_vector: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    # validity and expiry as epoch seconds (UTC): compared in SQL by the sweep, in Python by reads
    valid_from: float | None = None
    valid_until: float | None = None
    supersedes: str | None = None
    expires_at: float | None = Field(default=None, index=True)  # the sweep's query
    bounded: bool = False  # any of the three times set: the user's timeline holds this record

    def to_record(self) -> Record:
        """The public, immutable form."""
        stored = (self.user_id, self.record_id, self.text, self.kind, self.category, self.timestamp)
        times = (self.valid_from, self.valid_until, self.supersedes, self.expires_at)
        return record_from_columns(*stored, self.meta, self.input, self.output, *times)


class StoreInfo(StoreTable, table=True):
    """Key/value facts about the store, e.g. which encoder its vectors came from."""

    __tablename__ = "store_info"

    key: str = Field(primary_key=True)
    value: str


class DerivedRow(StoreTable, table=True):
    """A value derived from a user's data by an expensive step (an LLM's pseudo utterances...).

    Keyed by (user, namespace, key) where the caller's key covers every input of the step (query,
    model, seed, the records shown), so a hit is always valid; the ``user_id`` column makes
    ``forget`` erase it with the user's records.
    """

    __tablename__ = "derived"
    __table_args__ = (UniqueConstraint("user_id", "namespace", "key"),)

    pk: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(index=True)
    namespace: str
    key: str
    value: Any = Field(sa_column=Column(JSON, nullable=False))


class InteractionRow(StoreTable, table=True):
    """One logged ``search``/``context`` call and what the application reported after it.

    Per-user data like the records: the ``user_id`` column makes ``forget`` erase it, and
    :meth:`~personamem.store.sql.SqlCatalog.delete_records` takes deleted records out of ``results``
    and ``used``.
    """

    __tablename__ = "interactions"

    pk: int | None = Field(default=None, primary_key=True)
    interaction_id: str = Field(unique=True)
    user_id: str = Field(index=True)
    call: str  # "search" or "context"
    method: str
    query: str
    results: list[Any] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))  # [id, score]
    time: str  # ISO 8601, UTC
    answer: str | None = None
    rating: float | None = None
    used: list[Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    feedback_time: str | None = None
    # what a context call showed the LLM (text, timings, warnings, usage) for the inspector; dropped
    # when a record it may quote is deleted
    trace: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    # on a call served interleaved: {"trial": id, "teams": {record id: team}, "outcome": win/loss/tie}
    interleaving: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))


class RecordEventRow(StoreTable, table=True):
    """One event of a record's history (``store/history.py``).

    Keyed by a pseudonym of (user key, record id), never by either id, and without a ``user_id``
    column on purpose: erasure (``delete``, expiry, ``forget``) keeps the event, its time and its
    actor but takes ``text`` out, so what is left names nobody and quotes nothing.
    """

    __tablename__ = "record_events"

    pk: int | None = Field(default=None, primary_key=True)  # the order of events
    subject: str = Field(index=True)
    event: str
    at: float  # epoch seconds, UTC
    actor: str
    text: str | None = None


class WebhookRow(StoreTable, table=True):
    """A tenant's webhook: where its events go, which ones, and the secret that signs them.

    The secret is kept as given (not hashed, unlike an API key's): every delivery is signed with it
    (HMAC-SHA256), so the server must be able to read it back. It never leaves the server again.
    """

    __tablename__ = "webhooks"

    webhook_id: str = Field(primary_key=True)
    tenant: str = Field(index=True)  # "" for the store's own users (no tenant)
    url: str
    events: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    secret: str
    created_at: str  # ISO 8601, UTC


class OutboxState(StrEnum):
    """A delivery waits (``pending``) until a 2xx deletes it, or gives up (``dead``) after its attempts."""

    PENDING = "pending"
    DEAD = "dead"


class OutboxRow(StoreTable, table=True):
    """One event to deliver to one webhook, written in the transaction of the change it describes.

    ``user_id`` is the store key of the user the event is about (NULL for ``user.forgotten`` and
    ``pipeline.live``): the column makes ``forget`` erase the user's undelivered events with the rest
    of the user's rows, while the ``user.forgotten`` event written after them stays. ``data`` holds
    ids only, never record or query text (``store/outbox.py``).
    """

    __tablename__ = "webhook_outbox"
    __table_args__ = (
        UniqueConstraint("event_id", "webhook_id"),
        Index("ix_webhook_outbox_due", "state", "next_attempt_at"),  # the deliverer's claim
    )

    pk: int | None = Field(default=None, primary_key=True)  # the order events are delivered in
    event_id: str  # shared by the event's deliveries to each of the tenant's webhooks
    webhook_id: str = Field(index=True)
    tenant: str = Field(index=True)
    user_id: str | None = Field(default=None, index=True)
    type: str
    data: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    occurred_at: float  # epoch seconds, UTC
    queued_at: float  # when its attempts started (an admin's retry starts them again)
    state: str = OutboxState.PENDING.value
    attempts: int = 0
    next_attempt_at: float = 0.0
    claimed_until: float = 0.0  # a deliverer's lease: nobody else claims the row before then
    claim: str | None = None
    last_error: str | None = None


class JobState(StrEnum):
    """Where a background job is: ``open`` (lines still arriving) → ``queued`` → ``running`` → an end.

    ``done``, ``failed`` and ``cancelled`` are ends: the job's lines are gone, its counts stay.
    """

    OPEN = "open"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobRow(StoreTable, table=True):
    """A tenant's background job (a bulk import), its progress and its lease (``store/jobs.py``).

    Holds counts and per-line errors, never a record's text: the input is in ``job_chunks``. Every
    line before ``next_line`` is committed (stored, skipped or failed), so a runner that takes the
    job over after a crash starts there. A runner holds the job while ``claimed_until`` is ahead.
    """

    __tablename__ = "jobs"

    job_id: str = Field(primary_key=True)
    tenant: str = Field(index=True)  # "" for the store's own users (no tenant)
    kind: str  # "import"
    state: str = Field(default=JobState.QUEUED.value, index=True)
    lines: int = 0  # records uploaded (blank lines are not counted)
    last_line: int = 0  # the highest line number uploaded: the next chunk starts after it
    next_line: int = 1  # the resume point: every line before it is committed
    processed: int = 0  # lines committed: stored + skipped + failed + forgotten
    stored: int = 0  # records new or changed
    skipped: int = 0  # records already stored as they are
    failed: int = 0  # lines that could not be stored (each in ``errors``, up to the cap)
    forgotten: int = 0  # lines erased by a forget of their user before they were stored
    errors: list[Any] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    message: str | None = None  # why the job failed or was cancelled
    attempts: int = 0  # claims since the last committed batch (a crash loop ends the job)
    created_at: float  # epoch seconds, UTC
    updated_at: float
    started_at: float | None = None
    finished_at: float | None = None
    claimed_until: float = 0.0  # a runner's lease, or when a failed batch is tried again
    claimed_by: str | None = None  # the claim: host, process and a token of its own


class JobChunkRow(StoreTable, table=True):
    """A run of an uploaded job's consecutive lines of one user, deleted once its step commits.

    Lines ``line``..``last`` of the file, each a record, up to ``store/jobs.py``'s ``CHUNK`` of them:
    an import of 100,000 lines is a few hundred rows to write, read and delete, not 100,000 (a line a
    row cost a tenth of the job's throughput against ``add_many``). ``user_id`` is the store key of
    the lines' user: the column makes ``forget`` erase the user's waiting lines with the rest of the
    user's rows (``SqlCatalog.finish_forget``), so no job keeps text of a forgotten user.
    """

    __tablename__ = "job_chunks"

    job_id: str = Field(primary_key=True)
    line: int = Field(primary_key=True)  # the file's line number of the chunk's first line
    last: int  # of its last line: every line between is the same user's record
    user_id: str = Field(index=True)
    records: str  # the validated records as a JSON array, one per line in order


TIMES = ("valid_from", "valid_until", "supersedes", "expires_at")

ADDED_COLUMNS: tuple[tuple[str, str], ...] = (
    ("records", "pending_vector"),
    ("users", "index_token"),
    ("users", "bounds_token"),
    ("interactions", "trace"),
    ("interactions", "interleaving"),
    *(("records", name) for name in (*TIMES, "bounded")),
    ("api_keys", "scope"),  # NULL on keys made before scopes: they act as admin (store/keys.py)
    ("api_keys", "rate_per_minute"),
)
"""(table, column) added since the table was first created: opening an older store adds them."""

# read on every write and logged call: built once (as are catalog_users' and catalog_staging's)
USER_STATUS = select(UserRow.status).where(col(UserRow.user_id) == bindparam("user_id"))

RECORD_COLUMNS = (
    "user_id, record_id, text, kind, category, timestamp, meta, input, output, "
    "valid_from, valid_until, supersedes, expires_at"
)
"""The columns :func:`record_from_columns` takes, in its order, for raw SQL reads."""


def content_hash(record: Record) -> str:
    """What decides whether a re-added record changed (its id and user excluded)."""
    payload = record.model_dump(mode="json", exclude={"user_id", "id"})
    for name in TIMES:  # unset, they leave the hash as it was before they existed
        if payload.get(name) is None:
            payload.pop(name, None)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def row_values(record: Record, names: Pseudonyms) -> dict[str, Any]:
    """The record's ``records`` row as a pending write, its vector id keyed by ``names``."""
    return {
        "user_id": record.user_id,
        "record_id": record.id,
        "vector_id": names.vector_id(record.user_id, record.id),
        "text": record.text,
        "kind": record.kind.value,
        "category": record.category,
        "timestamp": record.timestamp.isoformat() if record.timestamp else None,
        "meta": dict(record.metadata),
        "input": record.input,
        "output": record.output,
        "content_hash": content_hash(record),
        "status": RecordStatus.PENDING.value,
        "valid_from": _seconds(record.valid_from),
        "valid_until": _seconds(record.valid_until),
        "supersedes": record.supersedes,
        "expires_at": _seconds(record.expires_at),
        "bounded": is_bounded(record),
    }


def is_bounded(record: Record) -> bool:
    """Whether the record has a validity bound or an expiry (it then joins the user's timeline)."""
    return bool(record.valid_from or record.valid_until or record.expires_at)


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def record_from_columns(
    user_id: str,
    record_id: str,
    text_: str,
    kind: str,
    category: str | None,
    timestamp: str | None,
    meta: dict[str, Any],
    input_: str | None,
    output: str | None,
    valid_from: float | None = None,
    valid_until: float | None = None,
    supersedes: str | None = None,
    expires_at: float | None = None,
) -> Record:
    """A record from its stored columns (:data:`RECORD_COLUMNS`, with ``meta`` decoded).

    Not validated again: every stored row passed :class:`Record`'s validation on its way in, and
    validating the ten hits of a search cost a quarter of a millisecond, a twentieth of the query's
    encoding (``bench/add_vs_mem0.py``).
    """
    return Record.model_construct(
        user_id=user_id,
        id=record_id,
        text=text_,
        kind=RecordKind(kind),
        category=category,
        timestamp=datetime.fromisoformat(timestamp) if timestamp else None,
        metadata=meta,
        input=input_,
        output=output,
        valid_from=_moment(valid_from),
        valid_until=_moment(valid_until),
        supersedes=supersedes,
        expires_at=_moment(expires_at),
    )


def vector_blob(vector: np.ndarray) -> bytes:
    """A vector as ``pending_vector`` stores it: little-endian float32 bytes."""
    return np.asarray(vector, dtype="<f4").tobytes()
