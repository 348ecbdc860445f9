"""Per-user derived data (a BM25 index, a P-Anchor vector) cached while the user is unchanged."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["UserCache", "UserCaches"]


class UserCache(Generic[T]):
    """An LRU of per-user values, each valid for the user's revision it was built at.

    Validity is checked against the store's revision token on every read, so a write from another
    process invalidates the entry too; ``evict`` drops a user at once (used by ``forget``). Entries are
    kept under the store's user key (``key`` maps a tenant's user id to it), so ``forget`` finds them
    whichever tenant view built them.
    """

    def __init__(
        self,
        revision: Callable[[str], str | None],
        build: Callable[[str], T],
        *,
        key: Callable[[str], str] = str,
        max_users: int = 256,
    ):
        self._revision = revision
        self._build = build
        self._key = key
        self._max_users = max_users
        self._entries: OrderedDict[str, tuple[str, T]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, user_id: str) -> T:
        """The cached value, rebuilt if the user was written since it was built."""
        key = self._key(user_id)
        revision = self._revision(key) or ""
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == revision:
                self._entries.move_to_end(key)
                return entry[1]
        value = self._build(user_id)  # built outside the lock: slow, and other users need not wait
        with self._lock:
            self._entries[key] = (revision, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_users:
                self._entries.popitem(last=False)
        return value

    def evict(self, key: str) -> None:
        """Drop the entry of the user stored under ``key``."""
        with self._lock:
            self._entries.pop(key, None)


class UserCaches:
    """Every per-user cache made over one store, so that ``forget`` can empty them all.

    Held weakly: a cache its owner dropped is not kept alive only to be evicted from.
    """

    def __init__(self, revision: Callable[[str], str | None]) -> None:
        self._revision = revision
        self._caches: weakref.WeakSet[UserCache[Any]] = weakref.WeakSet()

    def new(
        self, build: Callable[[str], T], *, key: Callable[[str], str] = str, max_users: int = 256
    ) -> UserCache[T]:
        """A cache of ``build(user_id)``, valid at the user's revision and evicted with the user."""
        cache = UserCache(self._revision, build, key=key, max_users=max_users)
        self._caches.add(cache)
        return cache

    def evict(self, key: str) -> None:
        """Drop the user stored under ``key`` from every cache."""
        for cache in list(self._caches):
            cache.evict(key)
