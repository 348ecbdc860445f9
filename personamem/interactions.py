"""The interaction log: what each ``search``/``context`` call returned, and what happened next.

Opt-in (``log_interactions = true`` in the pipeline config). Every logged call gets an id, which the
application reports back with :meth:`PersonaMem.feedback <personamem.memory.PersonaMem.feedback>`:
the answer the user accepted, a rating, the records the answer used. The trainers learn from it
(``personamem train ... --from-store``). It is per-user data: ``forget`` erases it, and deleting a
record takes it out of every logged result.

The exchange format is JSON Lines, one :class:`Interaction` per line::

    {"id": "5f0c...", "user_id": "ana", "call": "context", "method": "pipeline",
     "query": "what should I cook?", "time": "2026-11-25T10:00:00Z",
     "results": [{"record_id": "r1", "score": 0.61}, {"record_id": "r7", "score": 0.44}],
     "feedback": {"answer": "A lentil curry.", "rating": 1.0, "used_record_ids": ["r1"],
                  "time": "2026-11-25T10:00:09Z"}}

``feedback`` is null until the application reports one; within it every field may be null.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from personamem.errors import InvalidInputError
from personamem.jsonfile import JsonFile, write_lines

__all__ = [
    "MAX_ANSWER",
    "MAX_USED",
    "Feedback",
    "FeedbackReport",
    "Interaction",
    "LoggedResult",
    "first_error",
    "parse_interactions",
    "read_interactions",
    "write_interactions",
]

Call = Literal["search", "context"]


class LoggedResult(BaseModel):
    """One record a call returned, with the score of the stage that placed it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    record_id: str = Field(min_length=1)
    score: float


class Feedback(BaseModel):
    """What the application reported after a call; a field left None was not reported."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    answer: str | None = None
    """The answer the user accepted (PURPLE's target, whose log-likelihood is its reward)."""
    rating: float | None = None
    """The user's rating of the answer, higher is better (the trainers can keep only rated ≥ a bar)."""
    used_record_ids: list[str] | None = None
    """The records the accepted answer used (PG-Ret's logged pairs, MemRerank's chosen items)."""
    time: datetime | None = None


MAX_ANSWER = 32_768
"""Longest accepted answer in characters (the log keeps it for training; a page of text is plenty)."""
MAX_USED = 1000
"""Most record ids one report may name (a search returns at most 1000 records)."""


class FeedbackReport(BaseModel):
    """What an application reports after a logged call: the one declaration of ``feedback``.

    ``PersonaMem.feedback``, both clients (before sending) and the REST body (``POST /v1/feedback``)
    validate through this model, and the log stores it, so a report refused by one is refused by all
    with the same message. Fields left None keep what an earlier report said.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    interaction_id: str = Field(max_length=64)
    """The logged call's id (``Context.interaction_id``, ``Hits.interaction_id``)."""
    answer: str | None = Field(default=None, max_length=MAX_ANSWER)
    """The answer the user accepted (what PURPLE learns to make likely)."""
    rating: float | None = None
    """The user's rating of it, higher is better."""
    used_record_ids: list[str] | None = Field(default=None, max_length=MAX_USED)
    """The records the answer used (PG-Ret's and MemRerank's positives), kept once each, in order."""

    @field_validator("interaction_id", mode="before")
    @classmethod
    def _id(cls, value: object) -> object:
        if not isinstance(value, str) or not value:
            raise ValueError(f"interaction_id must be a non-empty string, got {value!r}")
        return value

    @field_validator("answer", mode="before")
    @classmethod
    def _answer(cls, value: object) -> object:
        if value is not None and not isinstance(value, str):
            raise ValueError(f"answer must be a string, got {type(value).__name__}")
        return value

    @field_validator("rating", mode="before")
    @classmethod
    def _rating(cls, value: object) -> object:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"rating must be a number, got {value!r}")
        return value

    @field_validator("used_record_ids", mode="before")
    @classmethod
    def _used(cls, value: object) -> object:
        if value is None:
            return None
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise ValueError("used_record_ids must be a list of record ids")
        if not all(isinstance(r, str) and r for r in value):
            raise ValueError("used_record_ids must be a list of record ids")
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _something(self) -> FeedbackReport:
        if self.answer is None and self.rating is None and self.used_record_ids is None:
            raise ValueError("feedback needs at least one of answer, rating or used_record_ids")
        return self

    @classmethod
    def of(cls, interaction_id: object, **fields: object) -> FeedbackReport:
        """The report, or InvalidInputError naming what is wrong (the SDK's and the clients' door).

        Raises:
            InvalidInputError: as the REST route's 422 says it.
        """
        try:
            return cls.model_validate({"interaction_id": interaction_id, **fields})
        except ValidationError as exc:
            problems = [str(error["msg"]).removeprefix("Value error, ") for error in exc.errors()]
            raise InvalidInputError("; ".join(problems)) from None


class Interaction(BaseModel):
    """One logged call, as exported and imported."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=64)
    user_id: str = Field(min_length=1)
    call: Call
    method: str
    query: str
    time: datetime
    results: list[LoggedResult]
    feedback: Feedback | None = None

    @field_validator("time")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        """Naive times are taken as UTC, so logs from several machines order correctly."""
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    @property
    def accepted_answer(self) -> str | None:
        """The reported answer, stripped; None when there is none."""
        answer = self.feedback.answer if self.feedback else None
        return answer.strip() if answer and answer.strip() else None

    @property
    def used(self) -> list[str]:
        """The records the answer used ([] when not reported)."""
        return list(self.feedback.used_record_ids or []) if self.feedback else []


def read_interactions(path: str | Path) -> list[Interaction]:
    """Every line of a JSONL export, validated whole before the caller stores any of it.

    Raises:
        IngestError: the file is missing, or a line is not UTF-8, not JSON or not an interaction
            (the message names the file, the line and the field).
    """
    source = JsonFile(Path(path))
    return parse_interactions(source, source.objects())


def parse_interactions(source: JsonFile, lines: Iterable[tuple[int, dict[str, Any]]]) -> list[Interaction]:
    """Interactions from (line number, object) pairs of ``source``; a repeated id is refused.

    Raises:
        IngestError: naming ``source``, the line and the field.
    """
    found: list[Interaction] = []
    seen: dict[str, int] = {}
    for number, data in lines:
        try:
            item = Interaction.model_validate(data)
        except ValidationError as exc:
            raise source.error(first_error(exc), line=number) from None
        if item.id in seen:
            raise source.error(f"interaction id {item.id!r} repeats line {seen[item.id]}", line=number)
        seen[item.id] = number
        found.append(item)
    return found


def write_interactions(path: str | Path, interactions: Iterable[Interaction]) -> int:
    """Write a JSONL export (written to a temporary file, then renamed); returns the line count."""
    return write_lines(Path(path), (item.model_dump_json() for item in interactions))


def first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as ``field.path: message`` (for errors naming a line)."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "the line"
    return f"{where}: {error['msg']}"
