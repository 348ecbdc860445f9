"""When a record holds: validity intervals, supersession and expiry, as one read sees them.

A record is *current* at time ``t`` when ``valid_from <= t < valid_until`` (an open end is no
bound); ``supersede`` ends the old record's interval where the new one's starts. An *expired*
record (``expires_at`` passed) is hidden from every read at once, whatever the read asks for, and
erased by the next sweep. Most users have no bounded record: the store learns that from a token in
the row it reads anyway (``users.bounds_token`` is NULL), so their reads pay nothing.

Which time a read looks at is the call's :class:`~personamem.store.read.Read`, passed down to the
store (``store/visibility.py`` applies it).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from personamem.errors import InvalidInputError
from personamem.records import Record
from personamem.store.read import Read

__all__ = ["Bounds", "Timeline", "holds", "is_current", "supersession"]


@dataclass(frozen=True)
class Bounds:
    """One bounded record's interval and expiry, epoch seconds (None: unbounded)."""

    record_id: str
    vector_id: str
    valid_from: float | None
    valid_until: float | None
    expires_at: float | None

    def visible(self, read: Read, now: float) -> bool:
        """Whether a read at ``read`` (made at ``now``) may see the record."""
        if self.expires_at is not None and self.expires_at <= now:
            return False
        if read.include_superseded:
            return True
        return holds(self.valid_from, self.valid_until, now if read.as_of is None else read.as_of)


def holds(valid_from: float | None, valid_until: float | None, at: float) -> bool:
    """Whether ``[valid_from, valid_until)`` (epoch seconds; None: open) contains ``at``."""
    return (valid_from is None or valid_from <= at) and (valid_until is None or at < valid_until)


def is_current(record: Record) -> bool:
    """Whether the record's validity interval contains now (its expiry aside)."""
    start, end = (None if t is None else t.timestamp() for t in (record.valid_from, record.valid_until))
    return holds(start, end, time.time())


def supersession(old: Record, new: Record) -> tuple[Record, Record]:
    """``new`` as the record that replaces ``old``, and ``old`` ended where it starts.

    The new record starts at its ``valid_from`` (default now) and names ``old`` in ``supersedes``.

    Raises:
        InvalidInputError: ``old`` is no longer current at that time, or starts at it or later.
    """
    start = new.valid_from or datetime.now(UTC)
    if old.valid_until is not None and old.valid_until <= start:
        raise InvalidInputError(
            f"record {old.id!r} stopped being current at {old.valid_until.isoformat()}; "
            "supersede the record that replaced it"
        )
    if old.valid_from is not None and start <= old.valid_from:
        raise InvalidInputError(
            f"record {old.id!r} starts at {old.valid_from.isoformat()}; the new fact must start later"
        )
    new = new.model_copy(update={"valid_from": start, "supersedes": new.supersedes or old.id})
    return new, old.model_copy(update={"valid_until": start})


class Timeline:
    """A user's bounded records, as of one ``bounds_token``; answers which a read must not see."""

    def __init__(self, bounds: Sequence[Bounds]) -> None:
        self.bounds = list(bounds)

    def hidden(self, read: Read) -> tuple[set[str], set[str]]:
        """Record ids and vector ids hidden from ``read`` by its time."""
        now = time.time()
        gone = [b for b in self.bounds if not b.visible(read, now)]
        return {b.record_id for b in gone}, {b.vector_id for b in gone}
