"""What a read must not see of a user's records: what its time hides and what its filter rejects.

The time is the read's (``store/timeline.py``), the filter the call's (``store/filters.py``); both
travel in context variables. What they hide is worked out per user and kept in this process: a
timeline while the user's bounds token holds (most users have none and pay nothing), a filter's
index while the user's revision holds.
"""

from __future__ import annotations

from personamem.store.cache import UserCaches
from personamem.store.filters import FilterIndex, FilterVerdict, read_filter
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

    def hidden(self, key: str) -> set[str]:
        """Ids of the user's records the read in force must not see, by its time or its filter."""
        token = self._catalog.bounds_token(key)
        hidden = set() if token is None else self._timeline(key, token).hidden()[0]
        verdict = self.verdict(key)
        return hidden if verdict is None else hidden | verdict.rejected

    def hidden_vectors(self, key: str, token: str | None) -> set[str]:
        """Vector ids of the user's records hidden from the read time in force, as of bounds ``token``."""
        return set() if token is None else self._timeline(key, token).hidden()[1]

    def verdict(self, key: str) -> FilterVerdict | None:
        """What the filter in force says of the user's records (None: no filter)."""
        read = read_filter()
        return None if read is None else self._filters.get(key).verdict(read)

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
