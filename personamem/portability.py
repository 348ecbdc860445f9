"""One user's data as JSON Lines, and back into any store: the data-portability pair of ``forget``.

An export is a header line, then one line per record, then (when asked) one per logged
interaction::

    {"personamem_export": 1, "user_id": "ana", "exported_at": "2026-11-25T21:50:00+00:00"}
    {"record": {"id": "vegan", "text": "I'm vegan.", "kind": "knowledge", ...}}
    {"interaction": {"id": "...", "call": "context", "query": "...", "results": [...], ...}}

Records keep their ids, kinds, timestamps and metadata, so importing a file into another store gives
the same records, and importing it twice changes nothing (writes are idempotent by id). Interaction
ids are unique in a store, so an export imported as *another* user gets ids derived from the new
user id and the old id (again idempotent). The user's preference memory is not exported: it is
derived from the records and rebuilt from them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from personamem.errors import InvalidRecordError
from personamem.interactions import Interaction, parse_interactions
from personamem.jsonfile import JsonFile, write_lines
from personamem.records import Record, parse_record

__all__ = [
    "EXPORT_VERSION",
    "Imported",
    "UserExport",
    "export_lines",
    "read_export",
    "write_export",
]

EXPORT_VERSION = 1


@dataclass(frozen=True)
class UserExport:
    """A parsed export: whose it is, and what it holds."""

    user_id: str
    records: list[Record]
    interactions: list[Interaction]


class Imported(BaseModel):
    """What an import added: records new or changed, and interactions not already logged.

    Also ``POST /v1/import``'s answer (a model, so the route and the clients share its JSON shape).
    """

    model_config = ConfigDict(frozen=True)

    records: int
    interactions: int


def export_lines(
    user_id: str, records: Iterable[Record], interactions: Iterable[Interaction] = ()
) -> Iterator[str]:
    """The export of ``user_id`` as JSON lines (without newlines): its records, then its logged calls."""
    now = datetime.now(UTC).isoformat()
    yield json.dumps({"personamem_export": EXPORT_VERSION, "user_id": user_id, "exported_at": now})
    for record in records:
        payload = record.model_dump(mode="json", exclude={"user_id"}, exclude_defaults=True)
        yield json.dumps({"record": {"id": record.id, **payload}}, ensure_ascii=False)
    for item in interactions:
        payload = item.model_dump(mode="json", exclude={"user_id"})
        yield json.dumps({"interaction": payload}, ensure_ascii=False)


def read_export(path: str | Path, *, user_id: str | None = None) -> UserExport:
    """Parse an export whole before anything is stored; ``user_id`` imports it as another user.

    Raises:
        IngestError: the file is missing or not an export, or a line is not valid (naming the line).
    """
    source = JsonFile(Path(path))
    lines = source.objects()
    first = next(lines, None)
    if first is None or first[1].get("personamem_export") != EXPORT_VERSION:
        found = "an empty file" if first is None else f"line {first[0]}: {json.dumps(first[1])[:80]}"
        raise source.error(
            f"not a personamem export (version {EXPORT_VERSION}): it starts with "
            f'{{"personamem_export": {EXPORT_VERSION}, "user_id": ...}}, found {found}'
        )
    exporter = first[1].get("user_id")
    if not isinstance(exporter, str) or not exporter.strip():
        raise source.error("the header names no user_id", line=first[0])
    owner = user_id or exporter
    records: list[Record] = []
    logged: list[tuple[int, dict[str, Any]]] = []
    for number, data in lines:
        if set(data) == {"record"} and isinstance(data["record"], dict):
            try:
                records.append(parse_record({**data["record"], "user_id": owner}))
            except InvalidRecordError as exc:
                raise source.error(str(exc), line=number) from None
        elif set(data) == {"interaction"} and isinstance(data["interaction"], dict):
            logged.append((number, {**data["interaction"], "user_id": owner}))
        else:
            keys = ", ".join(sorted(data)) or "none"
            expected = 'a line holds one "record" or one "interaction" object'
            raise source.error(f"{expected}, found keys: {keys}", line=number)
    interactions = parse_interactions(source, logged)
    if owner != exporter:  # interaction ids are unique per store: derive the copy's, reproducibly
        interactions = [
            item.model_copy(update={"id": uuid.uuid5(uuid.NAMESPACE_URL, f"{owner}\x1f{item.id}").hex})
            for item in interactions
        ]
    return UserExport(owner, records, interactions)


def write_export(path: str | Path, lines: Iterator[str]) -> int:
    """Write export lines to ``path`` (a temporary file, then renamed); returns the lines after the header."""
    return write_lines(Path(path), lines) - 1
