"""A full disk under the store: telling a failed write that ran out of space, and the error that says so.

Only a failure raises :class:`~personamem.errors.DiskFullError`, never a guess from the free space
alone. Most failures say it themselves: SQLite's "database or disk is full" (``SQLITE_FULL``, also
what Chroma's own SQLite reports), the OS's ``ENOSPC`` or ``EDQUOT``, PostgreSQL's SQLSTATE 53100.
Chroma's compaction failures name no cause (measured with Chroma 1.5.9 on a full tmpfs: "Failed to
apply logs to the metadata segment"), and SQLite sometimes says "disk I/O error" instead; so one
of those counts as a full disk when its folder's filesystem has under :data:`LOW_SPACE` free right
then (``shutil.disk_usage``, one ``statfs``).
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from pathlib import Path

from personamem.errors import DiskFullError

__all__ = ["LOW_SPACE", "disk_full", "free_bytes", "low_on_space", "says_full", "sqlite_io_error"]

LOW_SPACE = 16 << 20
"""Free bytes under which a write failure that names no cause is put down to the disk: Chroma grows an
HNSW file by megabytes at a time, so its failures start while some space is still free."""

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_FULL_SQLSTATE = "53100"  # PostgreSQL's disk_full
_FULL_WORDS = ("database or disk is full", "no space left on device", "disk quota exceeded")


def says_full(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, reports a full disk (or quota)."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL_ERRNOS:
            return True
        code = getattr(current, "sqlite_errorcode", None)  # the extended code: its low byte is the primary
        if isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL:
            return True
        if _FULL_SQLSTATE in (getattr(current, "sqlstate", None), getattr(current, "pgcode", None)):
            return True
        driver = getattr(current, "orig", None)  # SQLAlchemy's: its own text quotes the statement's values
        if driver is None and any(words in str(current).lower() for words in _FULL_WORDS):
            return True
        todo += [e for e in (current.__cause__, current.__context__, driver) if isinstance(e, BaseException)]
    return False


def sqlite_io_error(error: BaseException) -> bool:
    """Whether ``error`` is SQLite's "disk I/O error", which a write that found no space may raise too."""
    code = getattr(getattr(error, "orig", error), "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_IOERR


def free_bytes(path: Path) -> int | None:
    """Bytes free to this process on the filesystem holding ``path`` (or its nearest existing parent)."""
    for place in (path, *path.parents):
        if place.exists():
            try:
                return shutil.disk_usage(place).free
            except OSError:
                return None
    return None


def low_on_space(path: Path) -> bool:
    """Whether the filesystem holding ``path`` has under :data:`LOW_SPACE` free."""
    free = free_bytes(path)
    return free is not None and free < LOW_SPACE


def _mount_point(path: Path) -> Path:
    place = path.resolve()
    while not os.path.ismount(place) and place != place.parent:
        place = place.parent
    return place


def disk_full(path: Path | str, doing: str, error: BaseException) -> DiskFullError:
    """The error for ``doing`` (what failed) that ran out of space at ``path`` (a file, a folder or a URL).

    A local path's message names its filesystem and the bytes free there, so an operator knows what
    to clear; a database URL's names only the database (its disk is the server's).
    """
    if isinstance(path, Path):
        free = free_bytes(path)
        left = "an unknown number of" if free is None else f"{free:,}"
        where = f"{path} (filesystem {_mount_point(path)}, {left} bytes free)"
    else:
        free, where = None, path
    reason = getattr(error, "orig", None) or error  # not SQLAlchemy's text: it quotes record values
    message = (
        f"the disk is full: {doing} at {where} failed ({reason}); reads keep working and records "
        "already stored are kept; free space there and writes work again"
    )
    return DiskFullError(message, path=str(path), free=free)
