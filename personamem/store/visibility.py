"""What a read must not see of a user's records: what its time hides and what its filter rejects.

The time and the filter are the call's :class:`~personamem.store.read.Read`, passed to every
method here: this is the one place the hiding rules are applied. What they hide is worked out per
user and kept in this process: a timeline while the user's bounds token holds (most users have none
and pay nothing), a filter's index while the user's revision holds.
"""

from __future__ import annotations

from personamem.store.cache import UserCaches
from personamem.store.filters import FilterIndex, FilterVerdict
from personamem.store.read import Read
from personamem.store.sql import SqlCatalog
from personamem.store.timeline import Timeline

__all__ = ["Visibility"]

_MAX_TIMELINES = 1024  # users whose timeline is kept; all are dropped at once past it


class Visibility:
    """The records each read hides, by store key; shared by a store and its tenant views."""

    def __init__(self, catalog: SqlCatalog, caches: UserCaches) -> None:
        self._catalog = catalog
        self._timelines: dict[str, tuple[str, Timeline]] = {}
        # per store key, at its revision: which records each filter asked of the user admits
        self._filters = caches.new(self._filter_index)

    def hidden(self, key: str, read: Read) -> set[str]:
        """Ids of the user's records ``read`` must not see, by its time or its filter."""
        token = self._catalog.bounds_token(key)
        hidden = set() if token is None else self._timeline(key, token).hidden(read)[0]
        verdict = self.verdict(key, read)
        return hidden if verdict is None else hidden | verdict.rejected

    def hidden_vectors(self, key: str, token: str | None, read: Read) -> set[str]:
        """Vector ids of the user's records hidden from ``read``'s time, as of bounds ``token``."""
        return set() if token is None else self._timeline(key, token).hidden(read)[1]

    def verdict(self, key: str, read: Read) -> FilterVerdict | None:
        """What ``read``'s filter says of the user's records (None: no filter)."""
        return None if read.filter is None else self._filters.get(key).verdict(read.filter)

    def _filter_index(self, key: str) -> FilterIndex:
        records = self._catalog.records_by_vector(key)
        return FilterIndex(list(records.values()), list(records))

    def _timeline(self, key: str, token: str) -> Timeline:
        """The user's timeline as of ``token``, kept per user while the token holds."""
        cached = self._timelines.get(key)
        if cached is not None and cached[0] == token:
            return cached[1]
        timeline = self._catalog.timeline(key)
        if len(self._timelines) >= _MAX_TIMELINES:
            self._timelines.clear()
        self._timelines[key] = (token, timeline)
        return timeline
