"""JSON Lines ingest: one record per line, validated whole before anything is stored."""

from __future__ import annotations

from pathlib import Path

from personamem.errors import InvalidRecordError
from personamem.ingest._json import JsonFile
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
    source = JsonFile(Path(path))
    records = []
    for number, data in source.objects():
        try:
            records.append(parse_record(data, default_user=user_id))
        except InvalidRecordError as exc:
            raise source.error(str(exc), line=number) from None
    return records
