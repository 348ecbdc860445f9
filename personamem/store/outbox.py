"""The webhooks' transactional outbox: each event is written in the transaction of the change it describes.

A change (records staged, superseded, deleted or expired, a user forgotten, a pipeline put live)
calls :func:`emit` with the SQL transaction it runs in, so a row per subscribed webhook lands in
``webhook_outbox`` if and only if the change commits: a process killed after the commit loses no
event (the deliverer, ``personamem/webhook_delivery.py``, finds the rows after a restart), and a
change rolled back sends none. A tenant without a webhook for the event's type gets no row; the cost
to a store without webhooks is one indexed read of the empty ``webhooks`` table per write.

Events carry ids only (the user's id, record ids, a pipeline's version), never a record's text or a
query: a receiver learns what happened and reads what its key may through the API, and an event
about erased data quotes none of it.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, select
from sqlmodel import Session, col

from personamem.records import EventKind
from personamem.store.tables import OutboxRow, StoreInfo, WebhookRow
from personamem.store.tenants import SEPARATOR

__all__ = ["EVENTS", "Event", "emit", "emit_forgotten", "emit_pipeline", "emit_records", "split_key"]

EVENTS = (
    "record.added",
    "record.updated",
    "record.superseded",
    "record.deleted",
    "record.expired",
    "user.forgotten",
    "pipeline.live",
)
"""Every event type a webhook may subscribe to."""

_OF_RECORD_EVENT: dict[str, str] = {
    "added": "record.added",
    "updated": "record.updated",
    "superseded": "record.superseded",
    "deleted": "record.deleted",
    "expired": "record.expired",
}  # a record's ``forgotten`` event is the user's one ``user.forgotten``

# built once: read in every write transaction (as catalog_staging's statements are)
_SUBSCRIBED = select(col(WebhookRow.webhook_id), col(WebhookRow.events)).where(
    col(WebhookRow.tenant) == bindparam("tenant")
)
_INSERT = OutboxRow.__table__.insert()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Event:
    """One event to write: its type, the store key of the user it is about (None: none), its ids."""

    type: str
    key: str | None
    data: dict[str, Any]


def split_key(key: str) -> tuple[str, str]:
    """(tenant, user id) of a store key; the tenant is ``""`` for the store's own users."""
    if key.startswith(SEPARATOR):
        _, tenant, user = key.split(SEPARATOR, 2)
        return tenant, user
    return "", key


def emit(s: Session | Connection, tenant: str, events: Sequence[Event]) -> int:
    """Write ``events`` of ``tenant`` for each of its webhooks that takes their type; return the rows.

    Joins the caller's transaction: the rows commit or roll back with the change. Every delivery
    of one event shares its id, which receivers de-duplicate by.
    """
    if not events:
        return 0
    hooks = list(s.execute(_SUBSCRIBED, {"tenant": tenant}))
    if not hooks:
        return 0
    now = time.time()
    rows = []
    for event in events:
        event_id = str(uuid.uuid4())
        rows += [
            {
                "event_id": event_id,
                "webhook_id": webhook_id,
                "tenant": tenant,
                "user_id": event.key,
                "type": event.type,
                "data": event.data,
                "occurred_at": now,
                "queued_at": now,
                "next_attempt_at": now,
            }
            for webhook_id, types in hooks
            if event.type in types
        ]
    if rows:
        s.execute(_INSERT, rows)
    return len(rows)


def emit_records(
    s: Session | Connection,
    key: str,
    changes: Iterable[tuple[str, EventKind]],
    superseded_by: Mapping[str, str] | None = None,
) -> None:
    """Events for a user key's records (record id, what happened), in the change's transaction.

    ``superseded_by`` maps a superseded record's id to the id of the record that replaced it.
    """
    tenant, user = split_key(key)
    events = []
    for record_id, kind in changes:
        data = {"user_id": user, "record_id": record_id}
        if superseded_by and record_id in superseded_by:
            data["superseded_by"] = superseded_by[record_id]
        events.append(Event(_OF_RECORD_EVENT[kind], key, data))
    emit(s, tenant, events)


def emit_forgotten(s: Session | Connection, key: str) -> None:
    """``user.forgotten`` for a user key, written after the user's rows (and undelivered events) went.

    Its row has no ``user_id``: a later forget of a user of the same id does not take it, and it
    carries the user's id alone until it is delivered (then the row is deleted).
    """
    tenant, user = split_key(key)
    emit(s, tenant, [Event("user.forgotten", None, {"user_id": user})])


def emit_pipeline(
    s: Session | Connection, setting: str, tenant: str | None, table: str | None, *, rolled_back: bool
) -> None:
    """``pipeline.live`` for a live pipeline put in place (``table``: its JSON; None: the default).

    A tenant's change goes to that tenant's webhooks. The store's own change (``tenant`` None)
    goes to the webhooks of the store's own users and of every tenant that follows it, i.e. has no
    setting of its own (``store_info`` key ``<setting>:<tenant>``).
    """
    parsed = json.loads(table) if table is not None else {}
    data = {
        "pipeline": None if table is None else hashlib.sha256(table.encode("utf-8")).hexdigest()[:16],
        "chosen_by": parsed.get("chosen_by"),
        "rolled_back": rolled_back,
        "scope": "store" if tenant is None else "tenant",
    }
    tenants = [tenant] if tenant is not None else _following(s, setting)
    for name in tenants:
        emit(s, name, [Event("pipeline.live", None, data)])


def _following(s: Session | Connection, setting: str) -> list[str]:
    """Tenants with a webhook (``""``: the store's own users) whose ``setting`` is the store's."""
    subscribed = {t for (t,) in s.execute(select(col(WebhookRow.tenant)).distinct())}
    own = [f"{setting}:{t}" for t in subscribed if t]
    taken: set[str] = set()
    if own:
        found = s.execute(select(col(StoreInfo.key)).where(col(StoreInfo.key).in_(own)))
        taken = {key.partition(":")[2] for (key,) in found}
    return sorted(subscribed - taken)
