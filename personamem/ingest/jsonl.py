"""JSON Lines ingest: one record per line, validated whole before anything is stored."""

from __future__ import annotations

import json
from pathlib import Path

from personamem.errors import IngestError, InvalidRecordError
from personamem.records import Record, parse_record

__all__ = ["read_jsonl"]


def read_jsonl(path: str | Path, *, user_id: str | None = None) -> list[Record]:
    """Parse every line of ``path`` into a record; the first bad line raises with file and line.

    Each line is a JSON object with Record fields (``text`` and ``user_id`` at least, or ``user_id``
    given here). Blank lines are skipped. Reading everything first means a bad line late in the file
    stores nothing from it.

    Raises:
        IngestError: the file is missing, a line is not UTF-8, not JSON, not an object, or not a
            valid record.
    """
    path = Path(path)
    if not path.is_file():
        raise IngestError("file not found", path=str(path))
    records = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise IngestError(
                    f"not valid UTF-8 (byte {exc.start}); re-encode the file as UTF-8",
                    path=str(path),
                    line=number,
                ) from None
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise IngestError(
                    f"invalid JSON: {exc.msg} at column {exc.colno}", path=str(path), line=number
                ) from None
            if not isinstance(data, dict):
                raise IngestError(
                    f"expected a JSON object, got {type(data).__name__}", path=str(path), line=number
                )
            try:
                records.append(parse_record(data, default_user=user_id))
            except InvalidRecordError as exc:
                raise IngestError(str(exc), path=str(path), line=number) from None
    return records
