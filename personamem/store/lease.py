"""A lease kept with the data: one holder at a time across processes and machines, until it expires.

``improve`` running on its own (``personamem/auto_improve.py``) must run in one process per store,
whichever of a server's workers or machines notices the feedback first. The lease is a row of
``store_info`` whose value names its holder and its expiry; taking it is an insert (two inserts of
one key cannot both commit) or, once expired, an update conditioned on the value read (two takeovers
cannot both match), so it holds on SQLite and PostgreSQL alike. A holder that dies leaves a lease
that expires; a live holder renews it.
"""

from __future__ import annotations

import json
import time

from sqlalchemy import delete, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from personamem.store.sql import SqlCatalog
from personamem.store.tables import StoreInfo

__all__ = ["Lease"]


class Lease:
    """The lease named ``key`` in ``store_info``, held for ``ttl_s`` seconds at a time."""

    def __init__(self, catalog: SqlCatalog, key: str, ttl_s: float) -> None:
        self._catalog = catalog
        self.key = key
        self.ttl_s = ttl_s

    def acquire(self, holder: str) -> bool:
        """Take or renew the lease for ``holder``; False while another holder's has not expired."""
        now = time.time()
        value = json.dumps({"holder": holder, "until": now + self.ttl_s})
        try:
            with self._catalog.session(write=True) as s:
                row = s.get(StoreInfo, self.key)
                if row is None:
                    s.add(StoreInfo(key=self.key, value=value))
                    return True
                held = json.loads(row.value)
                if held["holder"] != holder and held["until"] > now:
                    return False
                taken = s.execute(
                    update(StoreInfo)
                    .where(col(StoreInfo.key) == self.key, col(StoreInfo.value) == row.value)
                    .values(value=value)
                )
                return bool(taken.rowcount)  # type: ignore[attr-defined]
        except IntegrityError:  # another process inserted it first
            return False

    def release(self, holder: str) -> None:
        """Give the lease up, if ``holder`` still holds it."""
        with self._catalog.session(write=True) as s:
            row = s.get(StoreInfo, self.key)
            if row is not None and json.loads(row.value)["holder"] == holder:
                s.execute(
                    delete(StoreInfo).where(col(StoreInfo.key) == self.key, col(StoreInfo.value) == row.value)
                )

    def holder(self) -> str | None:
        """Who holds the lease now (None: nobody, or it expired)."""
        stored = self._catalog.info(self.key)
        if stored is None:
            return None
        held = json.loads(stored)
        return str(held["holder"]) if held["until"] > time.time() else None
