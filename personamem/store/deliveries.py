"""The outbox's deliveries as the deliverer and the dead-letter list see them: claim, settle, retry.

Any number of deliverers (a server's workers, its machines) share one outbox. A deliverer claims
one due row at a time with a lease (:meth:`Deliveries.claim`): an UPDATE conditioned on the lease
having run out, which only one transaction can win on SQLite (writes are serialized) and on
PostgreSQL (a second UPDATE of the row waits, then finds the condition false), so no row is sent
by two deliverers at once. A deliverer killed mid-delivery leaves a lease that runs out, and the
row is sent again: delivery is at least once. A delivered row is deleted, so its ids do not linger;
a row out of attempts is kept as ``dead`` for the dead-letter list until an admin retries or
discards it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, update
from sqlmodel import col, select

from personamem.store.sql import SqlCatalog
from personamem.store.tables import OutboxRow, OutboxState, WebhookRow

__all__ = ["Deliveries", "Delivery"]

_PENDING, _DEAD = OutboxState.PENDING.value, OutboxState.DEAD.value
_MAX_ERROR = 300  # characters of a failure kept (a receiver's reply is not)
_CLAIM_TRIES = 5  # rows another deliverer takes first before a claim gives up until the next pass


@dataclass(frozen=True)
class Delivery:
    """A claimed row with where it goes: what the deliverer needs to send it and report back."""

    pk: int
    claim: str
    event_id: str
    webhook_id: str
    tenant: str
    type: str
    data: dict[str, Any]
    occurred_at: float
    queued_at: float
    attempts: int
    url: str
    secret: str


class Deliveries:
    """The ``webhook_outbox`` table's deliveries (every tenant's) and dead letters (one tenant's)."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    @staticmethod
    def _is_due(now: float) -> tuple[Any, ...]:
        return (
            col(OutboxRow.state) == _PENDING,
            col(OutboxRow.next_attempt_at) <= now,
            col(OutboxRow.claimed_until) <= now,
        )

    def _due(self, now: float, skip: Collection[str]) -> Any:
        query = select(col(OutboxRow.pk)).where(*self._is_due(now))
        if skip:
            query = query.where(col(OutboxRow.webhook_id).not_in(list(skip)))
        return query.order_by(col(OutboxRow.pk)).limit(1)

    def claim(self, lease_s: float, skip: Collection[str] = ()) -> Delivery | None:
        """The oldest due row (not of a webhook in ``skip``), leased for ``lease_s`` seconds; None: none due.

        A read finds the row, so an idle outbox costs no write transaction; the claim's UPDATE
        checks again that it is due, so of two deliverers that read one row only one takes it (the
        other tries the next row).
        """
        for _ in range(_CLAIM_TRIES):
            now = time.time()
            with self._catalog.session() as s:
                pk = s.exec(self._due(now, skip)).first()
            if pk is None:
                return None
            delivery = self._take(pk, now, lease_s)
            if delivery is not None:
                return delivery
        return None

    def _take(self, pk: int, now: float, lease_s: float) -> Delivery | None:
        """Lease row ``pk`` if it is still due; None: another deliverer took it, or its webhook went."""
        token = uuid.uuid4().hex
        with self._catalog.session(write=True) as s:
            won = s.execute(
                update(OutboxRow)
                .where(col(OutboxRow.pk) == pk, *self._is_due(now))
                .values(claimed_until=now + lease_s, claim=token)
            )
            if not won.rowcount:  # type: ignore[attr-defined]
                return None
            row = s.get(OutboxRow, pk)
            hook = None if row is None else s.get(WebhookRow, row.webhook_id)
            if row is None or hook is None:  # its webhook was deleted in between: nothing to send
                s.execute(delete(OutboxRow).where(col(OutboxRow.pk) == pk))
                return None
            return Delivery(
                pk, token, row.event_id, row.webhook_id, row.tenant, row.type, dict(row.data),
                row.occurred_at, row.queued_at, row.attempts, hook.url, hook.secret,
            )  # fmt: skip

    def delivered(self, delivery: Delivery) -> None:
        """The receiver took it (2xx): delete the row, so nothing of the event is kept."""
        with self._catalog.session(write=True) as s:
            s.execute(delete(OutboxRow).where(col(OutboxRow.pk) == delivery.pk))

    def failed(self, delivery: Delivery, error: str, retry_at: float | None) -> None:
        """Count a failed attempt: try again at ``retry_at``, or (None) keep it as a dead letter."""
        values: dict[str, Any] = {
            "attempts": delivery.attempts + 1,
            "last_error": error[:_MAX_ERROR],
            "claimed_until": 0.0,
            "claim": None,
        }
        values |= {"state": _DEAD} if retry_at is None else {"next_attempt_at": retry_at}
        self._settle(delivery, values)

    def release(self, delivery: Delivery, retry_at: float) -> None:
        """Give a claimed row back unsent, to be tried at ``retry_at``; no attempt is counted."""
        self._settle(delivery, {"claimed_until": 0.0, "claim": None, "next_attempt_at": retry_at})

    def _settle(self, delivery: Delivery, values: dict[str, Any]) -> None:
        """Update the row while this claim holds it (a lease that ran out may be another's now)."""
        with self._catalog.session(write=True) as s:
            s.execute(
                update(OutboxRow)
                .where(col(OutboxRow.pk) == delivery.pk, col(OutboxRow.claim) == delivery.claim)
                .values(**values)
            )

    # -- one tenant's dead letters ------------------------------------------------------------

    def dead(self, tenant: str, limit: int = 100) -> list[OutboxRow]:
        """The tenant's dead letters, newest first."""
        with self._catalog.session() as s:
            query = select(OutboxRow).where(col(OutboxRow.tenant) == tenant, col(OutboxRow.state) == _DEAD)
            return list(s.exec(query.order_by(col(OutboxRow.pk).desc()).limit(limit)))

    def retry(self, tenant: str, event_id: str) -> int:
        """Put the tenant's dead deliveries of an event back in the queue, attempts reset; how many."""
        now = time.time()
        with self._catalog.session(write=True) as s:
            done = s.execute(
                update(OutboxRow)
                .where(*self._dead_event(tenant, event_id))
                .values(state=_PENDING, attempts=0, queued_at=now, next_attempt_at=now, claimed_until=0.0)
            )
            return int(done.rowcount)  # type: ignore[attr-defined]

    def discard(self, tenant: str, event_id: str) -> int:
        """Delete the tenant's dead deliveries of an event; how many."""
        with self._catalog.session(write=True) as s:
            done = s.execute(delete(OutboxRow).where(*self._dead_event(tenant, event_id)))
            return int(done.rowcount)  # type: ignore[attr-defined]

    @staticmethod
    def _dead_event(tenant: str, event_id: str) -> tuple[Any, ...]:
        return (
            col(OutboxRow.tenant) == tenant,
            col(OutboxRow.event_id) == event_id,
            col(OutboxRow.state) == _DEAD,
        )

    def pending(self, tenant: str | None = None) -> int:
        """Deliveries waiting (of one tenant, or all): for tests and the operator's curiosity."""
        with self._catalog.session() as s:
            query = select(col(OutboxRow.pk)).where(col(OutboxRow.state) == _PENDING)
            if tenant is not None:
                query = query.where(col(OutboxRow.tenant) == tenant)
            return len(s.exec(query).all())
