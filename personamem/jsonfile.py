"""Reading JSON files with errors that say which file, where in it, and what is wrong.

The benchmark readers (:mod:`personamem.datasets`), exports and interaction logs share this so that
every malformed input fails the same way: one :class:`~personamem.errors.IngestError` naming the file
(and the line, for syntax errors), never a bare ``KeyError`` or ``TypeError`` from deep inside a loader.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from personamem.errors import IngestError

T = TypeVar("T")

_JSON_NAMES: dict[type, str] = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


def _json_name(kind: type) -> str:
    return _JSON_NAMES.get(kind, kind.__name__)


@dataclass(frozen=True)
class JsonFile:
    """One input file; its methods check the parsed data and raise errors that name the file."""

    path: Path

    def error(self, message: str, line: int | None = None) -> IngestError:
        """Build (not raise) an error about this file, so callers can ``raise`` it where they are."""
        return IngestError(message, path=str(self.path), line=line)

    def load(self) -> Any:
        """Parse the file as UTF-8 JSON.

        Raises:
            IngestError: the file is missing, unreadable, not UTF-8, or not valid JSON (with its line).
        """
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise self.error("file not found") from None
        except IsADirectoryError:
            raise self.error("is a directory, expected a JSON file") from None
        except UnicodeDecodeError as exc:
            raise self.error(f"not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
        except OSError as exc:
            raise self.error(f"cannot read file: {exc.strerror or exc}") from None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.error(f"invalid JSON: {exc.msg} (column {exc.colno})", line=exc.lineno) from None

    def objects(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """Each non-blank line of a JSON Lines file as (line number, object).

        Raises:
            IngestError: the file is missing, or a line is not UTF-8, not JSON or not an object (with
                its line).
        """
        if not self.path.is_file():
            raise self.error("file not found")
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise self.error(
                        f"not valid UTF-8 (byte {exc.start}); re-encode the file as UTF-8", line=number
                    ) from None
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise self.error(f"invalid JSON: {exc.msg} at column {exc.colno}", line=number) from None
                if not isinstance(data, dict):
                    raise self.error(f"expected a JSON object, got {type(data).__name__}", line=number)
                yield number, data

    def expect(self, value: object, kind: type[T], where: str) -> T:
        """Return ``value`` if it has the JSON type ``kind``; ``where`` says what it is, for the error."""
        if isinstance(value, kind) and not (isinstance(value, bool) and kind in (int, float)):
            return value
        raise self.error(f"{where}: expected {_json_name(kind)}, got {_json_name(type(value))}")

    def field(self, obj: dict[str, Any], key: str, kind: type[T], where: str) -> T:
        """Return the required field ``obj[key]``, checked to be of type ``kind``."""
        if key not in obj:
            raise self.error(f"{where}: missing required field {key!r}")
        return self.expect(obj[key], kind, f"{where}, field {key!r}")

    def text(self, obj: dict[str, Any], key: str, where: str) -> str:
        """Return the required field ``obj[key]`` as a non-blank string.

        Ids and user names go through this: a blank one would silently become a content hash or be
        rejected later by the record model with no file or position in the message.
        """
        value = self.field(obj, key, str, where)
        if not value.strip():
            raise self.error(f"{where}: field {key!r} is blank")
        return value

    def time(self, value: str, fmt: str, where: str) -> datetime:
        """Parse ``value`` with ``strptime`` format ``fmt`` (naive: the benchmarks give no time zone)."""
        try:
            return datetime.strptime(value, fmt)
        except ValueError:
            raise self.error(f"{where}: cannot parse time {value!r} (expected format {fmt!r})") from None


def write_lines(path: Path, lines: Iterable[str]) -> int:
    """Write JSON Lines to ``path`` through a temporary file renamed at the end; returns the line count.

    A crash or a failing source leaves the old file (or none), never half of a new one.
    """
    partial = path.with_name(path.name + ".partial")
    count = 0
    with partial.open("w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")
            count += 1
    partial.replace(path)
    return count
