"""The live pipeline: the ``[pipeline]`` table that serves a store's users, kept with the data.

``personamem improve`` puts it here, so every process and server worker over the store serves it
(within :data:`~personamem.store.settings.FRESH_S` seconds of the change); the table it replaced is
kept beside it, so one rollback undoes a bad choice. A tenant without its own follows the store's.
A candidate on trial (``personamem/interleaving.py``) is kept here too, with the trials decided so far.
Putting a table live (or rolling back) writes a ``pipeline.live`` webhook event in the same
transaction (``outbox.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlmodel import Session

from personamem.store.outbox import emit_pipeline
from personamem.store.settings import TenantSetting
from personamem.store.sql import SqlCatalog
from personamem.store.tables import StoreInfo

__all__ = ["PIPELINE_KEY", "LivePipeline"]

PIPELINE_KEY = "pipeline"  # store_info: the live pipeline table (JSON); "pipeline:<tenant>" for one tenant
TRIALS_KEPT = 20  # decided trials kept per tenant, newest last (for ``improve --status`` and the inspector)
_NO_PIPELINE = "none"  # the previous live pipeline, where there was none (the package default served)


class LivePipeline:
    """Each tenant's live pipeline table and the one it replaced; shared by a store and its tenant views."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._live = TenantSetting(catalog, PIPELINE_KEY)
        self._replaced = TenantSetting(catalog, f"{PIPELINE_KEY}.previous")
        self._trial = TenantSetting(catalog, f"{PIPELINE_KEY}.trial")
        self._decided = TenantSetting(catalog, f"{PIPELINE_KEY}.trials")

    def table(self, tenant: str | None) -> str | None:
        """The table that serves the tenant's users, as JSON (None: the package default)."""
        return self._live.get(tenant)

    def serve(self, tenant: str | None, table: Mapping[str, Any]) -> None:
        """Serve ``table`` to the tenant's users; the one it replaces is kept for :meth:`rollback`."""
        previous = self._live.own(tenant)
        self._replaced.set(tenant, _NO_PIPELINE if previous is None else previous)
        self._put_live(tenant, json.dumps(dict(table), sort_keys=True), rolled_back=False)

    def rollback(self, tenant: str | None) -> bool:
        """Put back the table that the last :meth:`serve` replaced; False if none."""
        previous = self._replaced.own(tenant)
        if previous is None:
            return False
        self._put_live(tenant, None if previous == _NO_PIPELINE else previous, rolled_back=True)
        self._replaced.set(tenant, None)
        return True

    def _put_live(self, tenant: str | None, table: str | None, *, rolled_back: bool) -> None:
        """Set the tenant's own live table, announcing the table now served in the same transaction."""

        def announce(s: Session) -> None:
            served = table
            if served is None and tenant is not None:  # the tenant follows the store's table again
                stored = s.get(StoreInfo, PIPELINE_KEY)
                served = None if stored is None else stored.value
            emit_pipeline(s, PIPELINE_KEY, tenant, served, rolled_back=rolled_back)

        self._live.set(tenant, table, also=announce)

    def trial(self, tenant: str | None) -> str | None:
        """The trial over the tenant's users (JSON of :class:`~personamem.interleaving.Trial`; None: none).

        The store's where the tenant has none. Read on every call: cached as every setting is.
        """
        return self._trial.get(tenant)

    def start_trial(self, tenant: str | None, trial: str) -> None:
        """Put a candidate on trial for the tenant's users (it replaces a trial running)."""
        self._trial.set(tenant, trial)

    def end_trial(self, tenant: str | None, decided: Mapping[str, Any] | None = None) -> None:
        """Stop the tenant's trial, keeping ``decided`` (what it counted and decided) in its history."""
        self._trial.set(tenant, None)
        if decided is not None:
            history = [*self.decided(tenant)[-(TRIALS_KEPT - 1) :], dict(decided)]
            self._decided.set(tenant, json.dumps(history, sort_keys=True))

    def decided(self, tenant: str | None) -> list[dict[str, Any]]:
        """The tenant's decided trials, oldest first."""
        stored = self._decided.own(tenant)
        return [] if stored is None else list(json.loads(stored))
