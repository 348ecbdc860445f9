"""A record's history: who added, changed, replaced or erased it, and when.

Each write appends its events in the transaction that makes the write (``SqlCatalog.stage``,
``delete_records``, ``finish_forget``), so no write is without its event and no event without its
write. Events are keyed by a keyed pseudonym of (user key, record id) and hold the record's text
while it exists; erasure takes the text out of every event of the record and appends one more,
content free, so what is left of an erased record is when, what and by whom. Tenant views key by
their own user keys, so one tenant never reads another's history.

The actor comes from a context variable: ``"sdk"`` unless the server says otherwise for a request
(:func:`set_actor`, in the request's own task), so no write method grows a parameter for it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime

from sqlalchemy import Connection, update
from sqlmodel import Session, col, select

from personamem.records import EventKind, RecordEvent
from personamem.store.engine import Database, chunks
from personamem.store.pseudonyms import Pseudonyms
from personamem.store.tables import RecordEventRow

__all__ = ["SDK", "EventTable", "key_actor", "set_actor"]

SDK = "sdk"
"""The actor of a write made in process."""

_ACTOR: ContextVar[str] = ContextVar("personamem_actor", default=SDK)
_INSERT_EVENT = RecordEventRow.__table__.insert()  # type: ignore[attr-defined]


def key_actor(key_id: str, tenant: str) -> str:
    """The actor of a write made through the server with API key ``key_id`` of ``tenant``."""
    return f"key:{key_id}@{tenant}"


def set_actor(actor: str) -> None:
    """Record ``actor`` as the author of the writes made in the rest of this context.

    For a context that ends with its caller: an HTTP request's task (a thread it hands work to
    copies the context, so the request's writes carry the actor and nothing else does).
    """
    _ACTOR.set(actor)


class EventTable(Database):
    """The ``record_events`` table's reads and writes; the writes join their caller's transaction."""

    @staticmethod
    def _log_events(
        s: Session | Connection,
        names: Pseudonyms,
        user_id: str,
        events: Iterable[tuple[str, EventKind, str | None]],
    ) -> None:
        """Append events (record id, event, text) of a user key, at now, by the actor in force."""
        at, actor = time.time(), _ACTOR.get()
        rows = [
            {"subject": names.history(user_id, rid), "event": event, "at": at, "actor": actor, "text": text}
            for rid, event, text in events
        ]
        if rows:
            s.execute(_INSERT_EVENT, rows)

    @classmethod
    def _erase_history(
        cls, s: Session, names: Pseudonyms, user_id: str, record_ids: Sequence[str], event: EventKind
    ) -> None:
        """Take the text out of these records' events and append ``event``, content free, to each."""
        for ids in chunks([names.history(user_id, rid) for rid in record_ids]):
            s.execute(update(RecordEventRow).where(col(RecordEventRow.subject).in_(ids)).values(text=None))
        cls._log_events(s, names, user_id, [(rid, event, None) for rid in record_ids])

    def history(self, names: Pseudonyms, user_id: str, record_id: str) -> list[RecordEvent]:
        """The events of a user key's record, oldest first (none for a record never written)."""
        with self.session() as s:
            rows = s.exec(
                select(RecordEventRow)
                .where(RecordEventRow.subject == names.history(user_id, record_id))
                .order_by(col(RecordEventRow.pk))
            )
            return [
                RecordEvent.model_construct(  # stored rows were written from checked values
                    record_id=record_id,
                    event=row.event,
                    at=datetime.fromtimestamp(row.at, UTC),
                    actor=row.actor,
                    text=row.text,
                )
                for row in rows
            ]
