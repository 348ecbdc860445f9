"""Records' time-to-live: the default each tenant sets, and the sweep that erases expired records.

A default time-to-live is a setting kept with the data (``store/settings.py``), stamped on new
records that set no expiry of their own. Expired records are hidden from reads the moment they
expire (``store/timeline.py``); the sweep is what erases them, through the same path as
``Store.delete``, so their bytes go as a deleted record's do. Every process with the store open
sweeps; two sweeping at once find the same ids and the second deletes nothing.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from personamem.errors import InvalidInputError
from personamem.records import EventKind, Record
from personamem.settings import settings
from personamem.store.settings import TenantSetting
from personamem.store.sql import SqlCatalog
from personamem.store.tenants import Tenancy

__all__ = ["SWEEP_S", "TTL_KEY", "Expiry", "ExpirySweeper", "check_ttl", "unexpired"]

TTL_KEY = "ttl"  # store_info: a default time-to-live in seconds; "ttl:<tenant>" for one tenant

# seconds between sweeps (PERSONAMEM_SWEEP_S overrides; 0 turns the background sweep off, e.g. when a
# scheduled `personamem purge` does it); a sweep with nothing expired is one indexed SQL query
SWEEP_S = 60.0


def check_ttl(seconds: object) -> float | None:
    """``seconds`` as a default time-to-live (None: none), checked the same in the SDK and the clients.

    Raises:
        InvalidInputError: anything but None or a positive number (a bool is not one).
    """
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    if seconds is not None and (not number or not seconds > 0):  # type: ignore[operator]
        raise InvalidInputError(f"a time-to-live must be a positive number of seconds, got {seconds!r}")
    return None if seconds is None else float(seconds)  # type: ignore[arg-type]


def unexpired(records: list[Record]) -> list[Record]:
    """``records`` without those whose expiry has passed (hidden at once; the sweep erases them)."""
    now = datetime.now(UTC)
    return [r for r in records if r.expires_at is None or r.expires_at > now]


class Expiry:
    """Records' time-to-live: each tenant's default, stamped on writes, and the purge of what passed.

    One per store, shared by its tenant views, which name their tenant on every call.
    """

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog
        self._ttl = TenantSetting(catalog, TTL_KEY)

    def ttl(self, tenant: str | None) -> float | None:
        """The default time-to-live of new records in seconds (the tenant's, else the store's)."""
        stored = self._ttl.get(tenant)
        return None if stored in (None, "off") else float(stored)

    def set_ttl(self, tenant: str | None, seconds: float | None) -> None:
        """Give new records of ``tenant`` (None: the whole store) a default time-to-live.

        Records stored already keep their expiry; a record's own ``expires_at`` wins. A tenant
        without its own setting takes the store's; None for a tenant means no default for it
        (kept as "off", so that it stops following the store's).

        Raises:
            InvalidInputError: a time-to-live that is not a positive number of seconds.
        """
        seconds = check_ttl(seconds)
        self._ttl.set(tenant, repr(seconds) if seconds is not None else ("off" if tenant else None))

    def stamp(self, tenant: str | None, records: Sequence[Record]) -> Sequence[Record]:
        """Records given the tenant's default time-to-live where they set no expiry of their own."""
        ttl = self.ttl(tenant)
        if ttl is None or all(r.expires_at is not None for r in records):
            return records
        expires = datetime.now(UTC) + timedelta(seconds=ttl)
        return [r.model_copy(update={"expires_at": expires}) if r.expires_at is None else r for r in records]

    def purge(
        self, tenancy: Tenancy | None, erase: Callable[[str, Sequence[str], EventKind], list[str]]
    ) -> int:
        """Erase the expired records of ``tenancy``'s users (None: every user's); return how many."""
        purged = 0
        for key, record_ids in self._catalog.expired(time.time()).items():
            if tenancy is None or tenancy.user(key) is not None:
                purged += len(erase(key, record_ids, "expired"))
        return purged


class ExpirySweeper:
    """A daemon thread that calls ``purge`` at open and then every ``interval`` seconds until closed.

    An interval of 0 starts no thread: expired records stay hidden until something purges them.
    """

    def __init__(self, purge: Callable[[], int], interval: float | None = None) -> None:
        self._purge = purge
        if interval is None:
            interval = settings().sweep_s
        self.interval = SWEEP_S if interval is None else interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="personamem-expiry", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._purge()
            except Exception as error:  # the next sweep tries again; reads hide expired records anyway
                warnings.warn(f"expiry sweep failed ({error}); retrying in {self.interval:g} s", stacklevel=1)
            self._stop.wait(self.interval)

    def close(self) -> None:
        """Stop sweeping; waits for a sweep in progress to finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
