"""The application's own format, JSON Lines: one record per line, all validated before anything is stored."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from personamem.errors import InvalidRecordError
from personamem.jsonfile import JsonFile
from personamem.records import Record, parse_record

__all__ = ["JsonlOptions", "read_jsonl"]


class JsonlOptions(BaseModel):
    """How a JSON Lines file is read."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, validate_by_name=True
    )

    user_id: str | None = Field(default=None, alias="user")
    """Owner of JSONL lines that name no user_id."""


def read_jsonl(path: str | Path, *, user_id: str | None = None) -> list[Record]:
    """Parse every line of ``path`` into a record; the first bad line raises with file and line.

    Each line is a JSON object with Record fields (``text`` and ``user_id`` at least, or ``user_id``
    given here). Blank lines are skipped. Reading everything first means a bad line late in the file
    stores nothing from it.

    Raises:
        IngestError: the file is missing, a line is not UTF-8, not JSON, not an object, or not a
            valid record.
    """
    source = JsonFile(Path(path))
    records = []
    for number, data in source.objects():
        try:
            records.append(parse_record(data, default_user=user_id))
        except InvalidRecordError as exc:
            raise source.error(str(exc), line=number) from None
    return records
