"""What a store keeps per user beside the records: derived values in SQL, and per-process caches.

Mixed into :class:`~personamem.store.Store`, whose ``catalog``, ``caches`` and user keys (a tenant's
user id mapped to the store's) these read; both kinds are erased with the user.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from personamem.store.cache import UserCache, UserCaches
from personamem.store.derived import derive
from personamem.store.sql import SqlCatalog

__all__ = ["UserValues"]


class UserValues:
    """``derived`` / ``latest`` values (durable, in SQL) and ``user_cache`` (in memory) of each user."""

    catalog: SqlCatalog
    caches: UserCaches
    _key: Callable[[str], str]

    def derived(self, user_id: str, namespace: str, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, cached durably per user under (namespace, key); JSON values only.

        For expensive, deterministic-given-the-key steps such as LLM calls: repeated evaluations and
        requests do not pay twice, and ``forget`` erases the cache with the user. Values for unknown
        users or users being forgotten are computed but not kept.
        """
        return self.derived_many(namespace, [(user_id, key)], lambda missing: [compute()])[0]

    def derived_many(
        self,
        namespace: str,
        requests: Sequence[tuple[str, str]],
        compute: Callable[[list[int]], Sequence[Any]],
    ) -> list[Any]:
        """:meth:`derived` for many (user id, key) pairs, computing the uncached ones in one call."""
        return derive(self.catalog, namespace, [(self._key(user), key) for user, key in requests], compute)

    def latest(self, user_id: str, namespace: str, key: str) -> Any | None:
        """The value last written to a slot with :meth:`set_latest`, or None."""
        return self.catalog.get_derived(self._key(user_id), namespace, key)

    def set_latest(self, user_id: str, namespace: str, key: str, value: Any) -> bool:
        """Overwrite the user's slot (namespace, key) with a JSON value; False for unknown users.

        For derived state that is rebuilt rather than keyed by every input, such as a preference
        memory that records the revision it was built from; ``forget`` and ``delete`` erase it.
        """
        return self.catalog.replace_derived(self._key(user_id), namespace, key, value)

    def user_cache(
        self,
        build: Callable[[str], Any],
        *,
        max_users: int | None = None,
        extend: Callable[[str, Any], Any] | None = None,
    ) -> UserCache[Any]:
        """A per-user cache this store invalidates on writes, empties on ``forget`` and bounds by bytes.

        ``extend(user_id, value)`` grows a value after writes that only added records (None: build
        it again); see :class:`~personamem.store.cache.UserCache`.
        """
        return self.caches.new(build, key=self._key, max_users=max_users, extend=extend)
