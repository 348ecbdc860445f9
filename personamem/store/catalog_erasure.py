"""Erasure in SQL: deleting records, and forgetting a user, with every trace in the same transaction.

A deleted record takes its events' text, the user's derived values and its mentions in the
interaction log with it; a forgotten user takes every row with its ``user_id``. On SQLite the file
is vacuumed after, so the bytes leave the disk too. The vector index's half is the store's: the
rows left behind wait ``pending`` with their vectors while it rebuilds the user's collection.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import numpy as np
from sqlalchemy import delete, update
from sqlmodel import Session, SQLModel, col, select

from personamem.records import EventKind
from personamem.store.catalog_staging import InDatabaseIndex
from personamem.store.catalog_users import bump_revision
from personamem.store.derived import DerivedValues
from personamem.store.engine import Database, chunks
from personamem.store.history import EventTable
from personamem.store.interaction_table import InteractionTable
from personamem.store.outbox import emit_forgotten, emit_records
from personamem.store.pseudonyms import Pseudonyms
from personamem.store.tables import RecordRow, RecordStatus, UserRow, UserStatus, vector_blob

__all__ = ["SqlErasure"]


class SqlErasure:
    """Deletes of records and the two steps of a user's forget."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def delete_records(
        self,
        user_id: str,
        record_ids: Sequence[str],
        kept: tuple[list[str], np.ndarray],
        names: Pseudonyms,
        event: EventKind = "deleted",
        index: InDatabaseIndex | None = None,
    ) -> list[str]:
        """Delete the user's records with these ids in one transaction; return the ids deleted.

        Their events lose their text and gain ``event`` (``deleted``, or ``expired`` for the sweep),
        content free, in the same transaction, as do their webhook events (ids only). The user's other
        records go back to ``pending`` with their vectors (``kept``: vector ids and vectors as read
        from the index), because the caller rebuilds the user's collection to erase the deleted
        vectors; a crash during the rebuild leaves pending rows that repair indexes. The user's derived
        values are dropped too: an LLM's output may quote a deleted record.

        ``index``, a vector index in this database, loses the deleted records' vectors in the same
        transaction instead: the other rows stay indexed and nothing is rebuilt.
        """
        with self._db.session(write=True) as s:
            found: list[str] = []
            for ids in chunks(list(record_ids)):
                found += s.exec(
                    select(RecordRow.record_id).where(
                        RecordRow.user_id == user_id, col(RecordRow.record_id).in_(ids)
                    )
                )
            if not found:
                return []
            for ids in chunks(found):
                s.execute(
                    delete(RecordRow).where(
                        col(RecordRow.user_id) == user_id, col(RecordRow.record_id).in_(ids)
                    )
                )
            EventTable._erase_history(s, names, user_id, found, event)
            emit_records(s, user_id, [(rid, event) for rid in found])
            DerivedValues._drop_derived(s, user_id)
            InteractionTable._scrub_interactions(s, user_id, set(found))
            if index is None:
                _requeue(s, user_id, kept)
            else:
                ids = [names.vector_id(user_id, rid) for rid in found]
                index.remove(s.connection(), ids, name=names.collection(user_id))
                bump_revision(s, user_id, index_token=uuid.uuid4().hex)
        self._db._vacuum()
        return found

    def requeue(self, user_id: str, kept: tuple[list[str], np.ndarray]) -> None:
        """Put the user's indexed rows back to ``pending`` with their vectors, before a rebuild.

        Repair's half of :meth:`delete_records`, for a delete that died before its rebuild.
        """
        with self._db.session(write=True) as s:
            _requeue(s, user_id, kept)

    def begin_forget(self, user_id: str) -> bool:
        """Mark the user as being forgotten; False if the user is unknown."""
        with self._db.session(write=True) as s:
            user = s.get(UserRow, user_id)
            if user is None:
                return False
            user.status = UserStatus.FORGETTING.value
            user.revision = user.index_token = uuid.uuid4().hex
            s.add(user)
            return True

    def finish_forget(self, user_id: str, names: Pseudonyms) -> None:
        """Delete every row of the user in every table that has a ``user_id`` column.

        The events of the user's records (a table without one) lose their text and gain a content
        free ``forgotten`` event, in the same transaction; the user's undelivered webhook events go
        with the user's rows, and one ``user.forgotten`` (the user's id alone) is written after them.

        On SQLite the database is then vacuumed: secure-delete zeroes deleted cells, but a b-tree
        page rebuilt while rows move keeps stale bytes in its unused space (an index entry with a
        forgotten user id was found there), and the WAL holds the old pages until checkpointed.
        """
        with self._db.session(write=True) as s:
            record_ids = list(s.exec(select(RecordRow.record_id).where(RecordRow.user_id == user_id)))
            EventTable._erase_history(s, names, user_id, record_ids, "forgotten")
            for table in reversed(SQLModel.metadata.sorted_tables):
                if "user_id" in table.c:  # the user's undelivered webhook events too
                    s.execute(table.delete().where(table.c.user_id == user_id))
            emit_forgotten(s, user_id)
        self._db._vacuum()


def _requeue(s: Session, user_id: str, kept: tuple[list[str], np.ndarray]) -> None:
    """The user's indexed rows back to ``pending``, each with its kept vector, else the one ``kept`` has."""
    blobs = dict(zip(kept[0], (vector_blob(v) for v in kept[1]), strict=True))
    rows = s.exec(
        select(RecordRow.pk, RecordRow.vector_id, RecordRow.pending_vector).where(
            RecordRow.user_id == user_id, RecordRow.status == RecordStatus.INDEXED.value
        )
    ).all()
    # one executemany (an ORM bulk update by primary key); a row with no vector, in SQL or in the
    # index, is re-encoded by repair
    pending = RecordStatus.PENDING.value
    changes = [{"pk": pk, "status": pending, "pending_vector": own or blobs.get(v)} for pk, v, own in rows]
    if changes:
        s.execute(update(RecordRow), changes)
    bump_revision(s, user_id, index_token=uuid.uuid4().hex)
