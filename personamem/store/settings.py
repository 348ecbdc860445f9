"""Settings kept with the data (``store_info``), per tenant, so every process and server worker applies them.

A setting has a store-wide value under ``key`` and a tenant's own under ``key:<tenant>``; a tenant
without its own follows the store's. Reads are cached for :data:`FRESH_S` seconds per process: a
setting is read on hot paths (every add reads the TTL, every search the live pipeline), and a change
made by another process is picked up within that time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlmodel import Session

from personamem.store.sql import SqlCatalog

__all__ = ["FRESH_S", "TenantSetting"]

FRESH_S = 5.0
"""How long a process serves a setting it read before reading it again."""


class TenantSetting:
    """One named setting of every tenant; shared by a store and its tenant views."""

    def __init__(self, catalog: SqlCatalog, key: str) -> None:
        self._catalog = catalog
        self.key = key
        self._read: dict[str | None, tuple[float, str | None]] = {}  # tenant -> (fresh until, value)
        self._lock = threading.Lock()

    def _keys(self, tenant: str | None) -> list[str]:
        return ([f"{self.key}:{tenant}"] if tenant else []) + [self.key]

    def get(self, tenant: str | None) -> str | None:
        """The tenant's own value, else the store's (None: unset)."""
        until, value = self._read.get(tenant, (0.0, None))
        if time.monotonic() < until:
            return value
        found = (self._catalog.info(key) for key in self._keys(tenant))
        value = next((stored for stored in found if stored is not None), None)
        self._read[tenant] = (time.monotonic() + FRESH_S, value)
        return value

    def own(self, tenant: str | None) -> str | None:
        """What this tenant (None: the store) set itself, read now; None where it follows the store's."""
        return self._catalog.info(self._keys(tenant)[0])

    def set(
        self, tenant: str | None, value: str | None, also: Callable[[Session], None] | None = None
    ) -> None:
        """Set the tenant's own value (None: the store's), or remove it with None.

        ``also`` runs in the same transaction (a webhook event announcing the change).
        """
        self._catalog.set_info(self._keys(tenant)[0], value, also)
        with self._lock:
            self._read.clear()  # a tenant without its own value follows the store's
