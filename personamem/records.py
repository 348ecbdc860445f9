"""The record: one unit of a user's history (a turn, a session, a purchase, a post, a statement).

A record's id is stable: the caller may supply one (benchmark ids such as PersonaBench ``segment_id``
or LoCoMo ``dia_id`` must survive ingest so gold labels resolve), otherwise it is a hash of the
content, which makes re-ingesting the same data idempotent. Ids are unique per user, not globally:
two users may own records with the same id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from personamem.errors import InvalidInputError, InvalidRecordError

__all__ = [
    "ROLES",
    "EventKind",
    "Record",
    "RecordEvent",
    "RecordKind",
    "as_utc",
    "canonical_role",
    "check_user_id",
    "content_id",
    "parse_item",
    "parse_record",
    "parse_records",
]

JsonScalar = str | int | float | bool | None


class RecordKind(StrEnum):
    """What a record is; retrieval treats all kinds alike, rendering and analysis may not."""

    CONVERSATION = "conversation"  # a turn or session between the user and another person
    DIALOG = "dialog"  # a user–assistant exchange
    PURCHASE = "purchase"
    POST = "post"
    QA = "qa"  # an (input, output) pair, e.g. a question the user answered
    KNOWLEDGE = "knowledge"  # a personal knowledge statement ("I'm vegetarian.")
    NOTE = "note"  # anything else the application wants remembered


ROLES = ("user", "assistant", "system", "tool")
"""Who wrote a chat record (``metadata["role"]``): the person, the model, its instructions, a tool."""
_ROLE_NAMES = {
    **{role: role for role in ROLES},
    "human": "user",  # LangChain's message types
    "ai": "assistant",
    "chatbot": "assistant",  # LlamaIndex's and other SDKs' names
    "model": "assistant",
    "developer": "system",
    "function": "tool",
}


def canonical_role(value: str) -> str:
    """A chat role in the words of :data:`ROLES` (``human`` is ``user``, ``ai`` is ``assistant``...).

    A role none of them names (``critic``) is kept as given: it is the application's own.
    """
    return _ROLE_NAMES.get(value.strip().lower(), value)


def content_id(
    kind: str, text: str, input: str | None, output: str | None, timestamp: datetime | None
) -> str:
    """Hash of what makes a record itself; the timestamp keeps two identical purchases apart."""
    canonical = json.dumps(
        [kind, text, input, output, timestamp.isoformat() if timestamp else None], ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


class Record(BaseModel):
    """One item of a user's history.

    ``text`` is what gets embedded and searched. A record built from an (input, output) pair (PURPLE's
    unit) may leave ``text`` empty; it is then rendered from the pair.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # strict: bytes or numbers as ids would be coerced to another user's string id
    user_id: StrictStr
    text: StrictStr = ""
    id: StrictStr = ""
    kind: RecordKind = RecordKind.NOTE
    category: StrictStr | None = None
    timestamp: datetime | None = None
    metadata: dict[str, JsonScalar] = Field(default_factory=dict)
    input: StrictStr | None = None
    output: StrictStr | None = None
    # when the record holds (see personamem/store/timeline.py): [valid_from, valid_until), None = open
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    supersedes: StrictStr | None = None  # the id of the record this one replaced (``supersede``)
    expires_at: datetime | None = None  # invisible from then on, and erased by the next sweep
    # a report, never stored: the user's existing record this one nearly duplicates (``add``)
    duplicate_of: StrictStr | None = Field(default=None, exclude=True)

    @field_validator("user_id", "text", "id", "category", "input", "output", "supersedes")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        return None if value is None else _utf8(value)

    @field_validator("metadata")
    @classmethod
    def _storable_metadata(cls, value: dict[str, JsonScalar]) -> dict[str, JsonScalar]:
        for key, item in value.items():
            _utf8(key)
            if isinstance(item, str):
                _utf8(item)
        role = value.get("role")
        if isinstance(role, str) and canonical_role(role) != role:  # one word per author, whatever the SDK
            return {**value, "role": canonical_role(role)}
        return value

    @property
    def role(self) -> str | None:
        """Who wrote it (``metadata["role"]`` in :data:`ROLES`' words; None: not a chat turn, or unknown)."""
        role = self.metadata.get("role")
        return canonical_role(role) if isinstance(role, str) else None

    @property
    def session(self) -> str | None:
        """Which conversation it is a turn of, as text (None: none named).

        ``metadata["session"]`` (the LlamaIndex memory block's and the benchmark loaders' key), else
        ``metadata["session_id"]`` (LangChain's chat history's). The default ranks a turn with its
        neighbours in the same session (``retrieval/ranker.py``).
        """
        session = self.metadata.get("session", self.metadata.get("session_id"))
        return None if session is None else str(session)

    @field_validator("valid_from", "valid_until", "expires_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)

    @field_validator("user_id")
    @classmethod
    def _user_id_present(cls, value: str) -> str:
        if not value or not value.strip():
            raise ValueError("user_id must be a non-empty string")
        return value

    @field_validator("id")
    @classmethod
    def _id_has_text(cls, value: str) -> str:
        if value and not value.strip():
            raise ValueError("id must not be blank")
        return value

    @model_validator(mode="after")
    def _fill_text_and_id(self) -> Record:
        if self.valid_from and self.valid_until and self.valid_until <= self.valid_from:
            raise ValueError(
                f"valid_until ({self.valid_until.isoformat()}) must be after valid_from "
                f"({self.valid_from.isoformat()})"
            )
        text = self.text
        if not text.strip():
            if self.input is None and self.output is None:
                raise ValueError("text must be non-empty (or give an input/output pair)")
            text = "\n".join(part for part in (self.input, self.output) if part)
            if not text.strip():
                raise ValueError("text, input and output are all empty")
            object.__setattr__(self, "text", text)
        if not self.id:
            object.__setattr__(
                self, "id", content_id(self.kind.value, text, self.input, self.output, self.timestamp)
            )
        return self


EventKind = Literal["added", "updated", "superseded", "deleted", "expired", "forgotten"]
"""What happened to a record: written new, changed, replaced as the current fact, or erased (by
``delete``, by its expiry, or by ``forget`` of its user)."""


class RecordEvent(BaseModel):
    """One event of a record's history (``PersonaMem.history``), oldest first.

    ``actor`` is who did it: ``"sdk"`` in process, ``"key:<key id>@<tenant>"`` through the server.
    ``text`` is the record's text as of the event while the record exists; once it is erased only
    the event, its time and its actor are kept, so ``text`` is None in every event.
    """

    model_config = ConfigDict(frozen=True)

    record_id: str
    event: EventKind
    at: datetime
    actor: str
    text: str | None = None


def as_utc(moment: datetime) -> datetime:
    """``moment`` in UTC; a naive time is taken as UTC already (validity and expiry compare instants)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _utf8(value: str) -> str:
    """``value`` if SQL can store it: a lone surrogate (valid in JSON as an escape) is not UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"holds a character that is not valid UTF-8 (a lone surrogate, {value[exc.start]!r}, at "
            f"position {exc.start}); it cannot be stored"
        ) from None
    return value


def check_user_id(user_id: object) -> str:
    """``user_id`` if it is a non-empty string; the one check every read and erase path makes.

    Raises:
        InvalidInputError: bytes, a number, None, an empty string (a lax coercion would read or
            erase another user's records).
    """
    if not isinstance(user_id, str) or not user_id.strip():
        raise InvalidInputError(f"user_id must be a non-empty string, got {user_id!r}")
    try:
        return _utf8(user_id)
    except ValueError as exc:
        raise InvalidInputError(f"user_id {exc}") from None


def parse_record(data: dict[str, Any], *, default_user: str | None = None) -> Record:
    """Build a record from a plain dict (a JSONL line, an API payload), with one readable error.

    ``default_user`` fills ``user_id`` when the dict has none; a dict naming a different user is an
    error rather than a silent reassignment, since that would file data under the wrong person.
    """
    data = dict(data)
    if default_user is not None:
        given = data.get("user_id")
        if given is not None and given != default_user:
            raise InvalidRecordError(f"record names user_id {given!r} but the batch is for {default_user!r}")
        data["user_id"] = default_user
    try:
        return Record.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'record'}: {err['msg'].removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise InvalidRecordError(problems) from None


def parse_records(
    records: Iterable[Record | Mapping[str, Any] | str], *, user_id: str | None
) -> list[Record]:
    """Validate a batch (records, dicts with Record fields, or plain texts of ``user_id``) before any write.

    Raises:
        InvalidRecordError: naming the position of the first bad record; a record of another user
            than ``user_id`` is one.
    """
    parsed = []
    for position, item in enumerate(records):
        try:
            parsed.append(parse_item(item, user_id=user_id))
        except InvalidRecordError as exc:
            raise InvalidRecordError(f"record {position}: {exc}") from None
    return parsed


def parse_item(item: Record | Mapping[str, Any] | str, *, user_id: str | None) -> Record:
    """One item of a batch as :func:`parse_records` reads it: a Record as it is (valid already).

    Raises:
        InvalidRecordError: not a valid record, or a record of another user than ``user_id``.
    """
    if isinstance(item, Record):
        if user_id is not None and item.user_id != user_id:
            raise InvalidRecordError(f"record is for user {item.user_id!r}, not {user_id!r}")
        return item
    if isinstance(item, str):
        return parse_record({"text": item}, default_user=user_id)
    if isinstance(item, Mapping):
        return parse_record(dict(item), default_user=user_id)
    raise InvalidRecordError(f"expected a Record, a dict or a text, got {type(item).__name__}")
