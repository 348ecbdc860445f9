"""Per-user derived data (a BM25 index, a P-Anchor vector) cached while the user is unchanged, by bytes.

Every cache a store makes shares one :class:`BytePool`: one LRU over their entries, bounded by the
bytes each entry was estimated to hold when built (``store/footprint.py``). One pool rather than a
share per cache, because which caches fill depends on the pipeline served (BM25 alone, the learned
ranker over it, P-Anchor): a share kept for a cache nobody uses would be memory held back for
nothing. A value that holds another cached value counts it again (the ranker's signals hold the
user's BM25 index), which errs on the side of less memory. The pool's size is the derived values'
share of ``PERSONAMEM_CACHE_MB`` (``store/budget.py``); a cache may bound its count of users too.

A value of the user's records (a BM25 index, the ranker's signals) may also *grow*: after a write that
only appended records (``catalog_users.appended_to``), its cache's ``extend`` makes the next value from
the last one and the records stored since, instead of building it again from every record. An agent
that adds a turn and then searches paid a whole rebuild per turn (0.66 s at 5,000 records, the
default); growing costs the new records. Values are never changed in place: readers may still hold the
old one, and two threads growing the same one each make their own.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sized
from typing import Any, Generic, NamedTuple, TypeVar

from personamem.store.catalog_users import appended_to
from personamem.store.footprint import footprint

T = TypeVar("T")

__all__ = ["DERIVED_BYTES", "BytePool", "UserCache", "UserCaches"]

DERIVED_BYTES = 256 << 20  # a pool made without a budget (a cache made on its own)


class BytePool:
    """One LRU by estimated bytes over the entries of several :class:`UserCache`; thread-safe.

    Its lock guards its caches' entries too, so that evicting an entry of another cache is safe.
    """

    def __init__(self, max_bytes: int = DERIVED_BYTES) -> None:
        self.max_bytes = max_bytes
        self.nbytes = 0  # of every entry kept
        self.lock = threading.Lock()
        self._order: OrderedDict[tuple[int, str], int] = OrderedDict()  # (cache, key): bytes, oldest first
        self._members: weakref.WeakValueDictionary[int, UserCache[Any]] = weakref.WeakValueDictionary()
        self._numbers = itertools.count()
        self._gone: list[int] = []  # caches collected since: their bytes are released at the next admit

    def join(self, cache: UserCache[Any]) -> int:
        """Make ``cache`` a member; its number in the pool."""
        number = next(self._numbers)
        self._members[number] = cache
        # appends without the lock: a collection may run while this thread holds it
        weakref.finalize(cache, self._gone.append, number)
        return number

    def admit(self, number: int, key: str, nbytes: int) -> bool:
        """Count a new entry, evicting the least recently used; False if it is larger than the pool.

        The caller holds :attr:`lock`.
        """
        self._release_gone()
        self.drop(number, key)
        if nbytes > self.max_bytes:
            return False
        self._order[(number, key)] = nbytes
        self.nbytes += nbytes
        while self.nbytes > self.max_bytes:  # never reaches the new entry: it fits alone
            (owner, oldest), size = self._order.popitem(last=False)
            self.nbytes -= size
            if (cache := self._members.get(owner)) is not None:
                cache.forget_entry(oldest)
        return True

    def size(self, number: int, key: str) -> int | None:
        """The bytes an entry was admitted with (None: not kept). The caller holds :attr:`lock`."""
        return self._order.get((number, key))

    def touch(self, number: int, key: str) -> None:
        """The entry was used: it is now the most recent. The caller holds :attr:`lock`."""
        self._order.move_to_end((number, key))

    def drop(self, number: int, key: str) -> None:
        """Stop counting an entry its cache dropped. The caller holds :attr:`lock`."""
        size = self._order.pop((number, key), None)
        if size is not None:
            self.nbytes -= size

    def held(self, number: int) -> int:
        """Bytes of one member's entries."""
        with self.lock:
            return sum(size for (owner, _), size in self._order.items() if owner == number)

    def _release_gone(self) -> None:
        while self._gone:
            number = self._gone.pop()
            for entry in [entry for entry in self._order if entry[0] == number]:
                self.nbytes -= self._order.pop(entry)


class _Entry(NamedTuple, Generic[T]):
    """A cached value, the revision it is valid at, and its length when its size was last measured."""

    revision: str
    value: T
    sized_at: int | None  # None: not Sized, so never grown without being measured again


class UserCache(Generic[T]):
    """An LRU of per-user values, each valid for the user's revision it was built at.

    Validity is checked against the store's revision token on every read, so a write from another
    process invalidates the entry too; ``evict`` drops a user at once (used by ``forget``). Entries are
    kept under the store's user key (``key`` maps a tenant's user id to it), so ``forget`` finds them
    whichever tenant view built them. Each value's size is estimated once, when built (``size``); the
    pool evicts by those bytes, and a value larger than the whole pool is returned and not kept (the
    user is then :meth:`oversized`, so a caller can serve it by cheaper means than a rebuild per read).
    ``max_users`` bounds the count of users as well (None: bytes alone). ``extend(user_id, value)``,
    where given, grows a value built before appends to the user (None: build it again instead).
    """

    def __init__(
        self,
        revision: Callable[[str], str | None],
        build: Callable[[str], T],
        *,
        key: Callable[[str], str] = str,
        max_users: int | None = None,
        pool: BytePool | None = None,
        size: Callable[[T], int] = footprint,
        extend: Callable[[str, T], T | None] | None = None,
    ):
        self._revision = revision
        self._build = build
        self._extend = extend
        self._key = key
        self._max_users = max_users
        self._size = size
        self._entries: OrderedDict[str, _Entry[T]] = OrderedDict()
        self._oversized: set[str] = set()  # keys whose value, when last built, was larger than the pool
        self._pool = pool if pool is not None else BytePool()
        self._number = self._pool.join(self)

    @property
    def nbytes(self) -> int:
        """Estimated bytes of the values this cache keeps."""
        return self._pool.held(self._number)

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, user_id: str) -> T:
        """The cached value, made again if the user was written since it was built.

        Grown (``extend``) where the writes since only added records, else built again. The
        revision is read before the value's records, so a value holds at least what its revision
        names (a record written meanwhile is in it too, and is not read again when the value grows).
        """
        key = self._key(user_id)
        revision = self._revision(key) or ""
        with self._pool.lock:
            entry = self._entries.get(key)
            if entry is not None and entry.revision == revision:
                self._entries.move_to_end(key)
                self._pool.touch(self._number, key)
                return entry.value
            held = self._pool.size(self._number, key)
        grown = None  # made outside the lock: slow, and other users need not wait
        if entry is not None and self._extend is not None and appended_to(entry.revision, revision):
            grown = self._extend(user_id, entry.value)
        if grown is not None and held is not None and entry is not None and _close(entry.sized_at, grown):
            # sized as the value it grew from, per record: sizing anew took 3-7 ms a value
            value, nbytes, sized_at = grown, _scaled(held, entry.value, grown), entry.sized_at
        else:
            value = self._build(user_id) if grown is None else grown
            nbytes, sized_at = self._size(value), len(value) if isinstance(value, Sized) else None
        with self._pool.lock:
            self._entries.pop(key, None)
            if not self._pool.admit(self._number, key, nbytes):
                self._oversized.add(key)
            else:
                self._oversized.discard(key)
                self._entries[key] = _Entry(revision, value, sized_at)
                while self._max_users is not None and len(self._entries) > self._max_users:
                    oldest, _ = self._entries.popitem(last=False)
                    self._pool.drop(self._number, oldest)
        return value

    def oversized(self, user_id: str) -> bool:
        """Whether the user's value, when last built, was larger than the whole pool (so it is not kept).

        Remembered across the user's revisions until :meth:`evict`: a history that outgrew the pool
        rarely shrinks back, and finding out again would cost a build.
        """
        return self._key(user_id) in self._oversized

    def evict(self, key: str) -> None:
        """Drop the entry of the user stored under ``key``."""
        with self._pool.lock:
            self._oversized.discard(key)
            self.forget_entry(key)
            self._pool.drop(self._number, key)

    def forget_entry(self, key: str) -> None:
        """Drop the entry the pool evicted; the caller holds the pool's lock."""
        self._entries.pop(key, None)


def _close(sized_at: int | None, value: object) -> bool:
    """Whether ``value`` holds less than half as many records again as when its line was last sized."""
    return sized_at is not None and isinstance(value, Sized) and len(value) < 1.5 * max(sized_at, 1)


def _scaled(nbytes: int, old: object, new: object) -> int:
    """``nbytes``, the size of ``old``, scaled to ``new`` by their lengths where both have one."""
    if isinstance(old, Sized) and isinstance(new, Sized) and len(old):
        return nbytes * len(new) // len(old)
    return nbytes


class UserCaches:
    """Every per-user cache made over one store, within one byte budget, so ``forget`` can empty them all.

    Held weakly: a cache its owner dropped is not kept alive only to be evicted from.
    """

    def __init__(self, revision: Callable[[str], str | None], *, max_bytes: int = DERIVED_BYTES) -> None:
        self._revision = revision
        self.pool = BytePool(max_bytes)
        self._caches: weakref.WeakSet[UserCache[Any]] = weakref.WeakSet()

    def new(
        self,
        build: Callable[[str], T],
        *,
        key: Callable[[str], str] = str,
        max_users: int | None = None,
        extend: Callable[[str, T], T | None] | None = None,
    ) -> UserCache[T]:
        """A cache of ``build(user_id)``, valid at the user's revision and evicted with the user.

        ``extend``: see :class:`UserCache`.
        """
        cache = UserCache(self._revision, build, key=key, max_users=max_users, pool=self.pool, extend=extend)
        self._caches.add(cache)
        return cache

    def evict(self, key: str) -> None:
        """Drop the user stored under ``key`` from every cache."""
        for cache in list(self._caches):
            cache.evict(key)
