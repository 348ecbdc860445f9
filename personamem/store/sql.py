"""The store's catalog: records and users in SQL, the source of truth for the write protocol.

:class:`SqlCatalog` is the database (``engine.py``) with the derived values (``derived.py``), the
interaction log's table (``interaction_table.py``) and the records' events (``history.py``) mixed
in; here are the records and users: staging and indexing (the protocol ``store.py`` numbers),
deletes, forgetting, and the read path. The tables are in ``tables.py``; their names stay importable
from here.
"""

from __future__ import annotations

import json
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from sqlalchemy import Connection, bindparam, case, delete, func, or_, tuple_, update
from sqlalchemy import select as select_columns  # sqlmodel's select takes at most four columns
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel, col, select

from personamem.errors import UserBeingForgottenError
from personamem.records import EventKind, Record
from personamem.store.derived import DerivedValues
from personamem.store.engine import chunks
from personamem.store.history import EventTable
from personamem.store.interaction_table import InteractionTable
from personamem.store.pseudonyms import Pseudonyms
from personamem.store.tables import (
    RECORD_COLUMNS,
    TIMES,
    USER_STATUS,
    DerivedRow,
    InteractionRow,
    RecordRow,
    RecordStatus,
    StoreInfo,
    UserRow,
    UserStatus,
    content_hash,
    is_bounded,
    record_from_columns,
    row_values,
    vector_blob,
)
from personamem.store.timeline import Bounds, Timeline

__all__ = [
    "PSEUDONYM_KEY",
    "DerivedRow",
    "InDatabaseIndex",
    "IndexedUser",
    "InteractionRow",
    "RecordRow",
    "RecordStatus",
    "SearchState",
    "SqlCatalog",
    "StoreInfo",
    "UserRow",
    "UserStatus",
    "is_bounded",
]

# how long a write waits for another process's forget of its user (a forget of a large store vacuums
# for seconds); past it, the forget is taken as interrupted
FORGET_WAIT_S = 30.0
PSEUDONYM_KEY = "pseudonym_key"


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


@dataclass(frozen=True)
class SearchState:
    """What a search reads from SQL before the vector index, in one statement.

    ``index_token`` says which view of the vector index is current; the pending vectors are the
    user's rows not indexed yet, scored directly.
    """

    index_token: str | None
    pending_ids: list[str]
    pending: np.ndarray | None
    bounds_token: str | None = None
    revision: str | None = None
    """Changes on every write to the user: records read at one revision can be reused at it."""


_BY_VECTOR_IDS = (
    f"SELECT vector_id, {RECORD_COLUMNS} FROM records WHERE user_id = ? AND vector_id IN ({{marks}})"
)
_BY_VECTOR = f"SELECT vector_id, {RECORD_COLUMNS} FROM records WHERE user_id = ? ORDER BY pk"
_SEARCH_STATE = (
    "SELECT u.status, u.index_token, u.bounds_token, u.revision, r.vector_id, r.pending_vector FROM users u "
    "LEFT JOIN records r ON r.user_id = u.user_id AND r.status = ? WHERE u.user_id = ?"
)

# the write path's fixed statements, built once: built and coerced per call they made one add's
# staging 1.1 ms instead of 0.6 ms (measured here), more than running them costs
_INSERT_USER = {  # executed with the row's columns as parameters
    "sqlite": sqlite.insert(UserRow).on_conflict_do_nothing(),
}  # PostgreSQL upserts instead (_UPSERT_USER_PG): it returns and locks the row in the same round trip
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
_RELABEL = (  # a record's fields change, its text and vector do not (``supersede``, a merge)
    update(RecordRow)
    .where(col(RecordRow.user_id) == bindparam("key"), col(RecordRow.record_id) == bindparam("rid"))
    .values(
        category=bindparam("category"),
        timestamp=bindparam("timestamp"),
        meta=bindparam("meta"),
        valid_from=bindparam("valid_from"),
        valid_until=bindparam("valid_until"),
        supersedes=bindparam("supersedes"),
        expires_at=bindparam("expires_at"),
        bounded=bindparam("bounded"),
        content_hash=bindparam("content_hash"),
    )
)
_USER_STATE = select_columns(col(UserRow.status), col(UserRow.index_token)).where(
    col(UserRow.user_id) == bindparam("user_id")
)
_PG_USER = postgresql.insert(UserRow)
_UPSERT_USER_PG = (  # a no-op update, so an existing row is locked and returned
    _PG_USER.on_conflict_do_update(
        index_elements=["user_id"], set_={"user_id": _PG_USER.excluded.user_id}
    ).returning(col(UserRow.status), col(UserRow.index_token))
)
# the revision bump of a write whose vectors are indexed in its own transaction
_BUMP_INDEXED = _BUMP_REVISION.values(index_token=bindparam("token"))
_TIMELINE = (
    "SELECT record_id, vector_id, valid_from, valid_until, expires_at FROM records "
    "WHERE user_id = ? AND bounded = 1"
)


class SqlCatalog(DerivedValues, InteractionTable, EventTable):
    """Records and users in any SQLAlchemy database; every query names the user it reads.

    Safe for several processes over one database: besides :class:`~personamem.store.engine.Database`'s
    guarantees, user rows are inserted-or-ignored.
    """

    # -- store facts ---------------------------------------------------------------------------

    def claim_info(self, key: str, value: str) -> str:
        """Record a fact unless one is stored already; return the stored value (atomic across processes)."""
        try:
            with self.session(write=True) as s:
                s.add(StoreInfo(key=key, value=value))
        except IntegrityError:  # somebody else recorded it first
            pass
        stored = self.info(key)
        assert stored is not None
        return stored

    def set_info(self, key: str, value: str | None) -> None:
        """Store a fact, replacing any stored value; None removes it."""
        with self.session(write=True) as s:
            s.execute(delete(StoreInfo).where(col(StoreInfo.key) == key))
            if value is not None:
                s.add(StoreInfo(key=key, value=value))

    def info(self, key: str) -> str | None:
        """A stored fact, or None."""
        with self.session() as s:
            row = s.get(StoreInfo, key)
            return None if row is None else row.value

    def adopt_pseudonym_key(self, key: str) -> str:
        """Store ``key`` as the pseudonym key unless one exists; return the key in force.

        A store written before keys existed has rows with unkeyed vector ids: in the same
        transaction they get their keyed ids and go back to ``pending``, so opening re-indexes them
        (the caller drops the old, unkeyed collections first).
        """
        try:
            with self.session(write=True) as s:
                existing = s.get(StoreInfo, PSEUDONYM_KEY)
                if existing is not None:
                    return existing.value
                s.add(StoreInfo(key=PSEUDONYM_KEY, value=key))
                s.flush()
                names = Pseudonyms(key)
                rows = s.exec(select(RecordRow.pk, RecordRow.user_id, RecordRow.record_id)).all()
                if rows:
                    warnings.warn(
                        f"re-indexing {len(rows)} record(s) under this store's keyed pseudonyms (once)",
                        stacklevel=4,
                    )
                for pk, user_id, record_id in rows:
                    s.execute(
                        update(RecordRow)
                        .where(col(RecordRow.pk) == pk)
                        .values(
                            vector_id=names.vector_id(user_id, record_id), status=RecordStatus.PENDING.value
                        )
                    )
                for user_id in {user_id for _, user_id, _ in rows}:
                    self._bump(s, user_id)
                return key
        except IntegrityError:  # another process adopted its key first
            stored = self.info(PSEUDONYM_KEY)
            assert stored is not None
            return stored

    # -- writes ---------------------------------------------------------------------------------

    def stage(
        self,
        records: Sequence[Record],
        names: Pseudonyms,
        vectors: np.ndarray | None = None,
        *,
        relabel: Sequence[Record] = (),
        relabel_event: EventKind = "updated",
    ) -> list[Record]:
        """Write ``records`` as pending in one transaction; return those that need (re)indexing.

        ``relabel`` are stored records whose other fields (times, metadata, category) change in the
        same transaction, their text and vector kept: ``supersede`` ends the old fact here (its
        ``relabel_event`` is ``superseded``). Every record written gets its event in the transaction.

        A record whose id the user already has with identical content is skipped (idempotent
        ingest); one with different content replaces the stored one and is indexed again. Vector
        ids come from ``names``, the store's keyed pseudonyms; ``vectors`` (rows aligned with
        ``records``), when given, are kept with the pending rows.

        A user being forgotten by another process is waited for (up to ``FORGET_WAIT_S``): the
        write then starts the user afresh. A forget that never finishes was interrupted, and opening
        the store finishes it.
        """
        return self._waiting_out_forgets(records, names, vectors, relabel, relabel_event, None)[0]

    def stage_indexed(
        self,
        records: Sequence[Record],
        names: Pseudonyms,
        vectors: np.ndarray,
        index: InDatabaseIndex,
        *,
        relabel: Sequence[Record] = (),
        relabel_event: EventKind = "updated",
    ) -> tuple[list[Record], dict[str, IndexedUser]]:
        """:meth:`stage` for a vector index in this database: rows, events and vectors in one transaction.

        The rows are written ``indexed`` and ``index`` stores their vectors before the commit, so
        nothing is left pending. Returns the records written and, per user, what was indexed with
        the index token before and after (as :meth:`mark_indexed` gives them).
        """
        return self._waiting_out_forgets(records, names, vectors, relabel, relabel_event, index)

    def _waiting_out_forgets(
        self,
        records: Sequence[Record],
        names: Pseudonyms,
        vectors: np.ndarray | None,
        relabel: Sequence[Record],
        relabel_event: EventKind,
        index: InDatabaseIndex | None,
    ) -> tuple[list[Record], dict[str, IndexedUser]]:
        deadline = time.monotonic() + FORGET_WAIT_S
        while True:
            try:
                return self._stage(records, names, vectors, relabel, relabel_event, index)
            except UserBeingForgottenError as waiting:
                if time.monotonic() > deadline:
                    raise UserBeingForgottenError(
                        f"user {waiting.user_id!r} is still being forgotten after {FORGET_WAIT_S:g} s: "
                        "that forget was interrupted; reopen the store to finish it",
                        user_id=waiting.user_id,
                    ) from None
                time.sleep(0.02)

    def _stage(
        self,
        records: Sequence[Record],
        names: Pseudonyms,
        vectors: np.ndarray | None,
        relabel: Sequence[Record],
        relabel_event: EventKind,
        index: InDatabaseIndex | None,
    ) -> tuple[list[Record], dict[str, IndexedUser]]:
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
        with self.transaction() as s:
            for user_id, batch in by_user.items():
                before = self._ensure_user(s, user_id)
                first = len(changed)  # this user's changed records are appended from here
                existing: dict[str, tuple[str, str]] = {}
                for ids in chunks(list(batch)):
                    rows = s.execute(_RECORD_STATES, {"user_id": user_id, "ids": list(ids)})
                    existing.update({rid: (h, st) for rid, h, st in rows})
                inserts, updates = [], []
                for record in batch.values():
                    row = row_values(record, names)
                    row["pending_vector"] = blobs.get((user_id, record.id))
                    if index is not None:
                        row["status"] = RecordStatus.INDEXED.value
                    old = existing.get(record.id)
                    if old is None:
                        inserts.append(row)
                    elif old != (row["content_hash"], RecordStatus.INDEXED.value):
                        updates.append(row)
                    else:
                        continue
                    changed.append(record)
                if inserts:
                    s.execute(RecordRow.__table__.insert(), inserts)  # type: ignore[attr-defined]
                for row in updates:
                    s.execute(
                        update(RecordRow)
                        .where(
                            col(RecordRow.user_id) == user_id, col(RecordRow.record_id) == row["record_id"]
                        )
                        .values(**{k: v for k, v in row.items() if k not in ("user_id", "record_id")})
                    )
                relabelled = [r for r in relabel if r.user_id == user_id]
                for record in relabelled:
                    row = row_values(record, names)
                    fields = ("category", "timestamp", "meta", *TIMES, "bounded", "content_hash")
                    s.execute(_RELABEL, {"key": user_id, "rid": record.id, **{f: row[f] for f in fields}})
                if inserts or updates or relabelled:
                    self._log_events(
                        s,
                        names,
                        user_id,
                        [(row["record_id"], "added", row["text"]) for row in inserts]
                        + [
                            (row["record_id"], "updated", row["text"])
                            for row in updates  # a pending row staged again unchanged is no update
                            if existing[row["record_id"]][0] != row["content_hash"]
                        ]
                        + [(r.id, relabel_event, r.text) for r in relabelled],
                    )
                    bounded = any(is_bounded(r) for r in (*batch.values(), *relabelled))
                    bump = {"key": user_id, "fresh": uuid.uuid4().hex, "bounded": bounded}
                    written = changed[first:]
                    if index is not None and written:
                        assert vectors is not None
                        ids = [names.vector_id(user_id, r.id) for r in written]
                        mine = vectors[[rows_of[(user_id, r.id)] for r in written]]
                        index.write(s, names.collection(user_id), ids, mine)
                        indexed[user_id] = IndexedUser(before, uuid.uuid4().hex, ids, mine)
                        s.execute(_BUMP_INDEXED, {**bump, "token": indexed[user_id].after})
                    else:
                        s.execute(_BUMP_REVISION, bump)
        return changed, indexed

    def mark_indexed(
        self, user_id: str, records: Sequence[Record], write: Callable[[Connection], None] | None = None
    ) -> tuple[str | None, str] | None:
        """Close the write protocol for these records, as they were when their vectors were written.

        A row whose content changed since (a newer pending version) stays pending. None, marking
        nothing, when the user is gone or being forgotten: the caller must remove the vectors.
        Otherwise the user's index token before and after: the caller's view of the index is
        current at the new token only if it was at the old one (no other process indexed between).
        The revision changes again here: a cache built from vectors between staging and indexing
        (P-Anchor reads every vector) would otherwise pass for current while missing these records.
        ``write``, for a vector index in this database, stores the vectors in the same transaction.
        """
        with self.session(write=True) as s:
            user = s.get(UserRow, user_id)
            if user is None or user.status != UserStatus.ACTIVE.value:
                return None
            if write is not None:
                write(s.connection())
            before, after = user.index_token, uuid.uuid4().hex
            for chunk in chunks([(r.id, content_hash(r)) for r in records]):
                s.execute(
                    update(RecordRow)
                    .where(
                        col(RecordRow.user_id) == user_id,
                        tuple_(col(RecordRow.record_id), col(RecordRow.content_hash)).in_(chunk),
                    )
                    .values(status=RecordStatus.INDEXED.value, pending_vector=None)
                )
            self._bump(s, user_id, index_token=after)
            return before, after

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
        content free, in the same transaction. The user's other records go back to ``pending`` with
        their vectors (``kept``: vector ids and vectors as read from the index), because the caller
        rebuilds the user's collection to erase the deleted vectors; a crash during the rebuild
        leaves pending rows that repair indexes. The user's derived values are dropped too: an LLM's
        output may quote a deleted record.

        ``index``, a vector index in this database, loses the deleted records' vectors in the same
        transaction instead: the other rows stay indexed and nothing is rebuilt.
        """
        with self.session(write=True) as s:
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
            self._erase_history(s, names, user_id, found, event)
            self._drop_derived(s, user_id)
            self._scrub_interactions(s, user_id, set(found))
            if index is None:
                self._requeue(s, user_id, kept)
            else:
                ids = [names.vector_id(user_id, rid) for rid in found]
                index.remove(s.connection(), ids, name=names.collection(user_id))
                self._bump(s, user_id, index_token=uuid.uuid4().hex)
        self._vacuum()
        return found

    def requeue(self, user_id: str, kept: tuple[list[str], np.ndarray]) -> None:
        """Put the user's indexed rows back to ``pending`` with their vectors, before a rebuild.

        Repair's half of :meth:`delete_records`, for a delete that died before its rebuild.
        """
        with self.session(write=True) as s:
            self._requeue(s, user_id, kept)

    @classmethod
    def _requeue(cls, s: Session, user_id: str, kept: tuple[list[str], np.ndarray]) -> None:
        blobs = dict(zip(kept[0], (vector_blob(v) for v in kept[1]), strict=True))
        rows = s.exec(
            select(RecordRow.pk, RecordRow.vector_id).where(
                RecordRow.user_id == user_id, RecordRow.status == RecordStatus.INDEXED.value
            )
        ).all()
        # one executemany (an ORM bulk update by primary key); a row not in the index gets no
        # vector and is re-encoded by repair
        pending = RecordStatus.PENDING.value
        changes = [{"pk": pk, "status": pending, "pending_vector": blobs.get(vid)} for pk, vid in rows]
        if changes:
            s.execute(update(RecordRow), changes)
        cls._bump(s, user_id, index_token=uuid.uuid4().hex)

    def begin_forget(self, user_id: str) -> bool:
        """Mark the user as being forgotten; False if the user is unknown."""
        with self.session(write=True) as s:
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
        free ``forgotten`` event, in the same transaction.

        On SQLite the database is then vacuumed: secure-delete zeroes deleted cells, but a b-tree
        page rebuilt while rows move keeps stale bytes in its unused space (an index entry with a
        forgotten user id was found there), and the WAL holds the old pages until checkpointed.
        """
        with self.session(write=True) as s:
            record_ids = list(s.exec(select(RecordRow.record_id).where(RecordRow.user_id == user_id)))
            self._erase_history(s, names, user_id, record_ids, "forgotten")
            for table in reversed(SQLModel.metadata.sorted_tables):
                if "user_id" in table.c:
                    s.execute(table.delete().where(table.c.user_id == user_id))
        self._vacuum()

    @staticmethod
    def _ensure_user(s: Connection, user_id: str) -> str | None:
        """Insert the user's row unless another writer (in any process) already did; its index token.

        The row is the transaction's from here (PostgreSQL: locked by the upsert; SQLite: the
        immediate transaction holds the database), so the token stays current until the commit.
        """
        row = {"user_id": user_id, "revision": uuid.uuid4().hex, "status": UserStatus.ACTIVE.value}
        if s.dialect.name == "postgresql":  # one round trip: insert, or lock and read the row
            status, token = s.execute(_UPSERT_USER_PG, row).one()
        else:
            if (insert := _INSERT_USER.get(s.dialect.name)) is not None:
                s.execute(insert, row)
            elif s.execute(USER_STATUS, {"user_id": user_id}).scalar_one_or_none() is None:
                s.execute(UserRow.__table__.insert(), row)  # type: ignore[attr-defined]
            status, token = s.execute(_USER_STATE, {"user_id": user_id}).one()
        if status == UserStatus.FORGETTING.value:
            raise UserBeingForgottenError(f"user {user_id!r} is being forgotten", user_id=user_id)
        return token

    @staticmethod
    def _bump(s: Session | Connection, user_id: str, *, index_token: str | None = None) -> None:
        """A fresh revision; and a given index token when the user's indexed vectors changed."""
        values = {"revision": uuid.uuid4().hex} | ({"index_token": index_token} if index_token else {})
        s.execute(update(UserRow).where(col(UserRow.user_id) == user_id).values(**values))

    # -- reads ------------------------------------------------------------------------------------

    def revision(self, user_id: str) -> str | None:
        """The user's current write token, None for an unknown user.

        Read on every per-user cache lookup (BM25, P-Anchor), so it must cost far less than encoding
        the query. A fixed statement outside SQLAlchemy (:meth:`fixed_rows`; on SQLite ~6 µs, against
        ~100 µs for a pooled SQLAlchemy connection): outside a transaction each SELECT sees the latest
        commit, so writes from other processes are never missed.
        """
        # fetchall steps the statement to its end, so no read snapshot outlives the call
        rows = self.fixed_rows("SELECT revision FROM users WHERE user_id = ?", (user_id,))
        if rows is not None:
            return str(rows[0][0]) if rows else None
        with self.engine.connect() as connection:
            return connection.execute(
                select(UserRow.revision).where(col(UserRow.user_id) == user_id)
            ).scalar_one_or_none()

    def users(self) -> list[str]:
        """Users with at least one record, sorted."""
        with self.session() as s:
            stmt = (
                select(RecordRow.user_id)
                .join(UserRow, col(UserRow.user_id) == col(RecordRow.user_id))
                .where(UserRow.status == UserStatus.ACTIVE.value)
                .distinct()
                .order_by(RecordRow.user_id)
            )
            return list(s.exec(stmt))

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of everybody."""
        with self.session() as s:
            stmt = select(func.count()).select_from(RecordRow)
            if user_id is not None:
                stmt = stmt.where(RecordRow.user_id == user_id)
            return int(s.exec(stmt).one())

    def count_by_user(self) -> dict[str, int]:
        """Records per user key (a tenant view sums the keys it owns)."""
        with self.session() as s:
            stmt = select(RecordRow.user_id, func.count()).group_by(RecordRow.user_id)
            return {user_id: int(n) for user_id, n in s.exec(stmt)}

    def get_many(self, user_id: str, record_ids: Sequence[str]) -> dict[str, Record]:
        """The user's records with these ids (missing ids are absent from the result)."""
        return self._lookup(user_id, RecordRow.record_id, record_ids)

    def by_vector_ids(self, user_id: str, vector_ids: Sequence[str]) -> dict[str, Record]:
        """The user's records keyed by the vector ids asked for.

        Every search ends here, so it is one fixed statement per chunk where the database has a fast
        read path (on SQLite about a tenth of an ORM query's cost, measured by ``bench/read_path.py``).
        """
        found: dict[str, Record] = {}
        for chunk in chunks(list(vector_ids)):
            marks = ",".join("?" * len(chunk))
            rows = self.fixed_rows(_BY_VECTOR_IDS.format(marks=marks), (user_id, *chunk))
            if rows is None:
                return self._lookup(user_id, RecordRow.vector_id, vector_ids)
            found.update(_by_vector(rows))
        return found

    def records_by_vector(self, user_id: str) -> dict[str, Record]:
        """All of the user's records keyed by vector id, in insertion order.

        For a filter's pass over a user's records (``store/filters.py``), once per revision, so the
        vector ids come from the rows rather than one HMAC each. A SQLite file is read like
        :meth:`by_vector_ids`: 9 ms for 500 records here, against 15 ms through the ORM.
        """
        raw = self.fixed_rows(_BY_VECTOR, (user_id,))
        if raw is not None:
            return _by_vector(raw)
        with self.session() as s:
            rows = s.exec(select(RecordRow).where(RecordRow.user_id == user_id).order_by(col(RecordRow.pk)))
            return {row.vector_id: row.to_record() for row in rows}

    def _lookup(self, user_id: str, key: Any, values: Sequence[str]) -> dict[str, Record]:
        found: dict[str, Record] = {}
        with self.session() as s:
            for chunk in chunks(list(values)):
                rows = s.exec(select(RecordRow).where(RecordRow.user_id == user_id, col(key).in_(chunk)))
                found.update({getattr(row, key.key): row.to_record() for row in rows})
        return found

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records in insertion order."""
        with self.session() as s:
            rows = s.exec(select(RecordRow).where(RecordRow.user_id == user_id).order_by(col(RecordRow.pk)))
            return [row.to_record() for row in rows]

    def vector_ids(self, user_id: str, status: RecordStatus | None = None) -> set[str]:
        """Vector ids of the user's records, optionally only those in one write state."""
        with self.session() as s:
            stmt = select(RecordRow.vector_id).where(RecordRow.user_id == user_id)
            if status is not None:
                stmt = stmt.where(RecordRow.status == status.value)
            return set(s.exec(stmt))

    def pending(self, user_id: str | None = None) -> dict[str, list[tuple[Record, np.ndarray | None]]]:
        """Records not yet indexed (written just now, or interrupted), by user, with kept vectors."""
        out: dict[str, list[tuple[Record, np.ndarray | None]]] = {}
        with self.session() as s:
            stmt = select(RecordRow).where(RecordRow.status == RecordStatus.PENDING.value)
            rows = s.exec(stmt if user_id is None else stmt.where(RecordRow.user_id == user_id))
            for row in rows:
                vector = None if row.pending_vector is None else np.frombuffer(row.pending_vector, "<f4")
                out.setdefault(row.user_id, []).append((row.to_record(), vector))
        return out

    def search_state(self, user_id: str) -> SearchState | None:
        """The user's index token and pending vectors, in one statement; None for an unknown user.

        On the read path, so a SQLite file is read like :meth:`revision`, without SQLAlchemy. One
        statement is one snapshot: a row is either pending here or covered by the token's view.
        """
        rows: Sequence[Any] | None = self.fixed_rows(_SEARCH_STATE, (RecordStatus.PENDING.value, user_id))
        if rows is None:
            joined = (col(RecordRow.user_id) == col(UserRow.user_id)) & (
                col(RecordRow.status) == RecordStatus.PENDING.value
            )
            with self.session() as s:
                rows = s.execute(
                    select_columns(
                        col(UserRow.status),
                        col(UserRow.index_token),
                        col(UserRow.bounds_token),
                        col(UserRow.revision),
                        col(RecordRow.vector_id),
                        col(RecordRow.pending_vector),
                    )
                    .join(RecordRow, joined, isouter=True)
                    .where(col(UserRow.user_id) == user_id)
                ).all()
        if not rows or rows[0][0] != UserStatus.ACTIVE.value:
            return None
        kept = [(vid, blob) for *_, vid, blob in rows if blob is not None]
        pending = np.stack([np.frombuffer(blob, "<f4") for _, blob in kept]) if kept else None
        return SearchState(rows[0][1], [vid for vid, _ in kept], pending, rows[0][2], rows[0][3])

    def bounds_token(self, user_id: str) -> str | None:
        """The user's bounds token (None: no bounded record, or no user); read like :meth:`revision`."""
        rows = self.fixed_rows("SELECT bounds_token FROM users WHERE user_id = ?", (user_id,))
        if rows is not None:
            return rows[0][0] if rows else None
        with self.engine.connect() as connection:
            return connection.execute(
                select(UserRow.bounds_token).where(col(UserRow.user_id) == user_id)
            ).scalar_one_or_none()

    def timeline(self, user_id: str) -> Timeline:
        """The user's bounded records (validity, expiry), for reads to filter by."""
        reader = self._revision_reader()
        rows: Sequence[Any]
        if reader is not None:
            rows = reader.execute(_TIMELINE, (user_id,)).fetchall()
        else:
            with self.session() as s:
                rows = s.execute(
                    select_columns(
                        col(RecordRow.record_id),
                        col(RecordRow.vector_id),
                        col(RecordRow.valid_from),
                        col(RecordRow.valid_until),
                        col(RecordRow.expires_at),
                    ).where(col(RecordRow.user_id) == user_id, col(RecordRow.bounded).is_(True))
                ).all()
        return Timeline([Bounds(*row) for row in rows])

    def expired(self, now: float) -> dict[str, list[str]]:
        """Ids of records whose expiry has passed, by user key (the sweep's work list)."""
        found: dict[str, list[str]] = {}
        with self.session() as s:
            rows = s.exec(
                select(RecordRow.user_id, RecordRow.record_id).where(
                    col(RecordRow.expires_at).is_not(None), col(RecordRow.expires_at) <= now
                )
            )
            for user_id, record_id in rows:
                found.setdefault(user_id, []).append(record_id)
        return found

    def users_being_forgotten(self) -> list[str]:
        """Users whose forget was interrupted."""
        with self.session() as s:
            return list(s.exec(select(UserRow.user_id).where(UserRow.status == UserStatus.FORGETTING.value)))

    def all_users(self) -> Iterable[str]:
        """Every user row, active or not (for consistency checks)."""
        with self.session() as s:
            return list(s.exec(select(UserRow.user_id)))


def _by_vector(rows: Iterable[Sequence[Any]]) -> dict[str, Record]:
    """Raw rows of ``vector_id`` and :data:`RECORD_COLUMNS` as records by vector id."""
    found: dict[str, Record] = {}
    for vid, *columns in rows:
        if isinstance(columns[6], str):  # meta: JSON text in SQLite's raw rows, decoded by psycopg
            columns[6] = json.loads(columns[6])
        found[vid] = record_from_columns(*columns)
    return found
