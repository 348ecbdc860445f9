"""The write protocol's SQL ends (``store.py`` numbers the steps): staging rows, then marking them indexed.

Staging commits a batch's rows ``pending``, with their vectors kept in the row, together with the
records' events, their webhook deliveries (``outbox.py``) and the users' fresh revisions, in one
transaction; once the vectors are in the
index, :meth:`Staging.mark_indexed` closes the protocol. With a vector index in the same database
(:class:`InDatabaseIndex`) the vectors are written in the staging transaction and nothing is left
pending. Waiting out a concurrent forget is the catalog's (``SqlCatalog.stage``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from sqlalchemy import Connection, bindparam, case, or_, tuple_, update
from sqlmodel import col, select

from personamem.records import EventKind, Record
from personamem.store.catalog_users import APPENDED_REVISION, appended, bump_revision, ensure_user
from personamem.store.engine import Database, chunks
from personamem.store.history import EventTable
from personamem.store.outbox import emit_records
from personamem.store.pseudonyms import Pseudonyms
from personamem.store.tables import (
    TIMES,
    RecordRow,
    RecordStatus,
    UserRow,
    UserStatus,
    content_hash,
    is_bounded,
    row_values,
    vector_blob,
)

__all__ = ["InDatabaseIndex", "IndexedUser", "Staging"]


class InDatabaseIndex(Protocol):
    """A vector index in the catalog's own database (pgvector): it writes inside the catalog's transaction."""

    def write(self, connection: Connection, name: str, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Add or replace collection ``name``'s vectors for ``ids`` before the caller commits."""

    def remove(self, connection: Connection, ids: Sequence[str], *, name: str) -> None:
        """Delete collection ``name``'s vectors for ``ids`` before the caller commits."""


@dataclass(frozen=True)
class IndexedUser:
    """What :meth:`SqlCatalog.stage_indexed` indexed of one user, for the caller's view of the index."""

    before: str | None
    """The user's index token before the write; the view moves only if it was current there."""
    after: str
    vector_ids: list[str]
    vectors: np.ndarray


# staging's fixed statements, built once like the user row's (``catalog_users.py``)
_RECORD_STATES = select(RecordRow.record_id, RecordRow.content_hash, RecordRow.status).where(
    col(RecordRow.user_id) == bindparam("user_id"),
    col(RecordRow.record_id).in_(bindparam("ids", expanding=True)),
)
# a write that stores a bounded record, or writes to a user who has one, renews the bounds token
_BUMP_REVISION = (
    update(UserRow)
    .where(col(UserRow.user_id) == bindparam("key"))
    .values(
        revision=bindparam("fresh"),
        bounds_token=case(
            (or_(bindparam("bounded"), col(UserRow.bounds_token).is_not(None)), bindparam("fresh")),
            else_=None,
        ),
    )
)
_RELABELLED = ("category", "timestamp", "meta", *TIMES, "bounded", "content_hash")
_RELABEL = (  # a record's fields change, its text and vector do not (``supersede``, a merge)
    update(RecordRow)
    .where(col(RecordRow.user_id) == bindparam("key"), col(RecordRow.record_id) == bindparam("rid"))
    .values(**{field: bindparam(field) for field in _RELABELLED})
)
# the revision bump of a write whose vectors are indexed in its own transaction
_BUMP_INDEXED = _BUMP_REVISION.values(index_token=bindparam("token"))
# the same bumps for a write that only inserted new records (``catalog_users.APPENDED_REVISION``)
_BUMP_APPENDED = {
    False: _BUMP_REVISION.values(revision=APPENDED_REVISION),
    True: _BUMP_INDEXED.values(revision=APPENDED_REVISION),
}
# a row indexed with the vector just written, kept so the user's vectors can be read without the index
_ROWS = RecordRow.__table__.c  # type: ignore[attr-defined]
_INDEXED_WITH_VECTOR = (  # Core, not ORM: an executemany of it is not the ORM's bulk update by key
    update(RecordRow.__table__)  # type: ignore[attr-defined]
    .where(_ROWS.user_id == bindparam("key"), _ROWS.record_id == bindparam("rid"))
    .where(_ROWS.content_hash == bindparam("hash"))
    .values(status=RecordStatus.INDEXED.value, pending_vector=bindparam("blob"))
)

_Event = tuple[str, EventKind, str | None]
"""An event to log: (record id, event, the record's text)."""


class Staging:
    """The ``records`` rows' write states: written ``pending`` (or ``indexed``), then marked ``indexed``."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def stage(
        self,
        records: Sequence[Record],
        names: Pseudonyms,
        vectors: np.ndarray | None,
        relabel: Sequence[Record],
        relabel_event: EventKind,
        index: InDatabaseIndex | None,
    ) -> tuple[list[Record], dict[str, IndexedUser]]:
        """One try at ``SqlCatalog.stage`` (or ``stage_indexed``, with ``index``), in one transaction.

        Raises:
            UserBeingForgottenError: a user of the batch is being forgotten; nothing was written.
        """
        blobs: dict[tuple[str, str], bytes] = {}
        rows_of: dict[tuple[str, str], int] = {}
        if index is not None:  # indexed in this transaction: no vector waits in the row
            assert vectors is not None
            rows_of = {(r.user_id, r.id): i for i, r in enumerate(records)}
        elif vectors is not None:
            blobs = {(r.user_id, r.id): vector_blob(v) for r, v in zip(records, vectors, strict=True)}
        indexed: dict[str, IndexedUser] = {}
        by_user: dict[str, dict[str, Record]] = {}
        for record in records:
            by_user.setdefault(record.user_id, {})[record.id] = record  # last one wins within a batch
        for record in relabel:
            by_user.setdefault(record.user_id, {})
        changed: list[Record] = []
        with self._db.transaction() as s:
            for user_id, batch in by_user.items():
                before = ensure_user(s, user_id)
                written, events, inserted_only = _write_rows(
                    s, names, user_id, batch, blobs, indexed=index is not None
                )
                changed += written
                relabelled = [r for r in relabel if r.user_id == user_id]
                for record in relabelled:
                    row = row_values(record, names)
                    s.execute(_RELABEL, {"key": user_id, "rid": record.id} | {f: row[f] for f in _RELABELLED})
                if not written and not relabelled:
                    continue
                events += [(r.id, relabel_event, r.text) for r in relabelled]
                EventTable._log_events(s, names, user_id, events)
                replaced_by = {r.supersedes: r.id for r in written if r.supersedes}
                emit_records(s, user_id, [(rid, event) for rid, event, _ in events], replaced_by)
                bounded = any(is_bounded(r) for r in (*batch.values(), *relabelled))
                bump = {"key": user_id, "fresh": uuid.uuid4().hex, "bounded": bounded, "appended": appended()}
                only_appends = inserted_only and not relabelled  # caches may grow rather than rebuild
                if index is not None and written:
                    assert vectors is not None
                    ids = [names.vector_id(user_id, r.id) for r in written]
                    mine = vectors[[rows_of[(user_id, r.id)] for r in written]]
                    index.write(s, names.collection(user_id), ids, mine)
                    indexed[user_id] = IndexedUser(before, uuid.uuid4().hex, ids, mine)
                    bump["token"] = indexed[user_id].after
                    s.execute(_BUMP_APPENDED[True] if only_appends else _BUMP_INDEXED, bump)
                else:
                    s.execute(_BUMP_APPENDED[False] if only_appends else _BUMP_REVISION, bump)
        return changed, indexed

    def mark_indexed(
        self,
        user_id: str,
        records: Sequence[Record],
        write: Callable[[Connection], None] | None = None,
        vectors: np.ndarray | None = None,
    ) -> tuple[str | None, str] | None:
        """Close the write protocol for these records, as they were when their vectors were written.

        A row whose content changed since (a newer pending version) stays pending. None, marking
        nothing, when the user is gone or being forgotten: the caller must remove the vectors.
        Otherwise the user's index token before and after: the caller's view of the index is
        current at the new token only if it was at the old one (no other process indexed between).
        The revision changes again here: a cache built from vectors between staging and indexing
        (P-Anchor reads every vector) would otherwise pass for current while missing these records;
        as an append (no record changed), so a cache of the records themselves grows by nothing.
        ``write``, for a vector index in this database, stores the vectors in the same transaction.
        ``vectors`` (rows aligned with ``records``), the ones just written to the index, are kept in
        the rows (a batch staged without them, by ``add_many``); otherwise a row keeps the one staged.
        """
        with self._db.session(write=True) as s:
            user = s.get(UserRow, user_id)
            if user is None or user.status != UserStatus.ACTIVE.value:
                return None
            if write is not None:
                write(s.connection())
            before, after = user.index_token, uuid.uuid4().hex
            if vectors is not None:
                s.execute(
                    _INDEXED_WITH_VECTOR,
                    [
                        {"key": user_id, "rid": r.id, "hash": content_hash(r), "blob": vector_blob(v)}
                        for r, v in zip(records, vectors, strict=True)
                    ],
                )
            else:
                for chunk in chunks([(r.id, content_hash(r)) for r in records]):
                    s.execute(
                        update(RecordRow)
                        .where(
                            col(RecordRow.user_id) == user_id,
                            tuple_(col(RecordRow.record_id), col(RecordRow.content_hash)).in_(chunk),
                        )
                        .values(status=RecordStatus.INDEXED.value)
                    )
            bump_revision(s, user_id, index_token=after, appended_only=True)  # no record changed
            return before, after


def _write_rows(
    s: Connection,
    names: Pseudonyms,
    user_id: str,
    batch: dict[str, Record],
    blobs: dict[tuple[str, str], bytes],
    *,
    indexed: bool,
) -> tuple[list[Record], list[_Event], bool]:
    """Insert the user's new records and replace the changed ones.

    Returns those written, their events, and whether every one was new (inserted: none of the
    user's stored records changed).

    A record stored with identical content and already indexed is skipped (idempotent ingest). A
    pending row staged again unchanged is written again, with this write's vector and state, but
    logs no event: its content did not change.
    """
    existing: dict[str, tuple[str, str]] = {}
    for ids in chunks(list(batch)):
        rows = s.execute(_RECORD_STATES, {"user_id": user_id, "ids": list(ids)})
        existing.update({rid: (h, st) for rid, h, st in rows})
    written: list[Record] = []
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    for record in batch.values():
        row = row_values(record, names)
        row["pending_vector"] = blobs.get((user_id, record.id))
        if indexed:
            row["status"] = RecordStatus.INDEXED.value
        old = existing.get(record.id)
        if old is None:
            inserts.append(row)
        elif old != (row["content_hash"], RecordStatus.INDEXED.value):
            updates.append(row)
        else:
            continue
        written.append(record)
    if inserts:
        s.execute(RecordRow.__table__.insert(), inserts)  # type: ignore[attr-defined]
    for row in updates:
        s.execute(
            update(RecordRow)
            .where(col(RecordRow.user_id) == user_id, col(RecordRow.record_id) == row["record_id"])
            .values(**{k: v for k, v in row.items() if k not in ("user_id", "record_id")})
        )
    events: list[_Event] = [(row["record_id"], "added", row["text"]) for row in inserts]
    events += [
        (row["record_id"], "updated", row["text"])
        for row in updates
        if existing[row["record_id"]][0] != row["content_hash"]
    ]
    return written, events, not updates
