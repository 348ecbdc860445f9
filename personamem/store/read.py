"""One read: the time it looks at and the filter it keeps to, passed down as one frozen value.

A search or context call takes its read options as keywords (:class:`ReadOptions`, declared once
for every surface), parses them into a :class:`Read` before anything is read, and hands that value
to every stage that asks the store for records (``read=``). The store's
:class:`~personamem.store.visibility.Visibility` is the one place that applies it. Calls that are
not a user's read (a near-duplicate check, an import) read :data:`NOW`, the default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack

from personamem.errors import InvalidInputError
from personamem.records import as_utc
from personamem.store.filters import Filter, parse_filters

__all__ = ["NOW", "Read", "ReadOptions", "epoch"]


class ReadOptions(TypedDict, total=False):
    """The read options of ``search`` and ``context`` on every surface."""

    as_of: datetime | str | None
    """Answer from the facts current at this time (a datetime or ISO 8601 string; naive means UTC;
    default now)."""
    include_superseded: bool
    """Every version of every fact instead of the current ones."""
    filters: Mapping[str, Any] | None
    """Only the records this filter admits (the grammar: :mod:`personamem.store.filters`)."""


@dataclass(frozen=True)
class Read:
    """What one read sees: the facts current at ``as_of`` (epoch seconds; None: now), or every version.

    Of those, the ones ``filter`` admits (None: all).
    """

    as_of: float | None = None
    include_superseded: bool = False
    filter: Filter | None = None

    @classmethod
    def of(cls, **options: Unpack[ReadOptions]) -> Read:
        """The read the options spell, checked whole before any read.

        Raises:
            TypeError: an option :class:`ReadOptions` does not declare (as for any keyword a call
                does not take: the options arrive as ``**read``).
            InvalidInputError: an ``as_of`` that is not a time, or a bad filter (naming the part).
        """
        unknown = sorted(set(options) - set(ReadOptions.__annotations__))
        if unknown:
            raise TypeError(
                f"unexpected read option(s) {', '.join(map(repr, unknown))}: "
                f"the read options are {', '.join(ReadOptions.__annotations__)}"
            )
        return cls(
            epoch(options.get("as_of")),
            bool(options.get("include_superseded", False)),
            parse_filters(options.get("filters")),
        )


NOW = Read()
"""The facts current now, unfiltered: what a read that names no options sees."""


def epoch(moment: datetime | str | None) -> float | None:
    """Epoch seconds of a datetime or ISO 8601 string (naive means UTC); None stays None.

    Raises:
        InvalidInputError: a string that is not an ISO 8601 time.
    """
    if moment is None:
        return None
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            raise InvalidInputError(f"as_of must be an ISO 8601 time, got {moment!r}") from None
    if not isinstance(moment, datetime):
        raise InvalidInputError(f"as_of must be a datetime or an ISO 8601 string, got {moment!r}")
    return as_utc(moment).timestamp()
