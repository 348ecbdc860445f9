"""The catalog's reads of records: by id, vector id or write state, counts, and a search's SQL state.

Every query names the user it reads. The reads on a search's path (:meth:`RecordReads.search_state`,
:meth:`RecordReads.by_vector_ids`, :meth:`RecordReads.records_by_vector`,
:meth:`RecordReads.timeline`) run fixed statements outside SQLAlchemy where the database has a fast
read path (``Database.fixed_rows``), and fall back to the ORM elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func
from sqlalchemy import select as select_columns  # sqlmodel's select takes at most four columns
from sqlmodel import col, select

from personamem.records import Record
from personamem.store.engine import Database, chunks
from personamem.store.tables import (
    RECORD_COLUMNS,
    RecordRow,
    RecordStatus,
    UserRow,
    UserStatus,
    record_from_columns,
)
from personamem.store.timeline import Bounds, Timeline

__all__ = ["RecordReads", "SearchState"]


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
_SINCE = f"SELECT pk, {RECORD_COLUMNS} FROM records WHERE user_id = ? AND pk > ? ORDER BY pk"
_COUNT = "SELECT count(*) FROM records WHERE user_id = ?"
_KEPT_BY_VECTOR_IDS = (
    "SELECT vector_id, pending_vector FROM records WHERE user_id = ? AND vector_id IN ({marks})"
)
_USER_VECTORS = (
    "SELECT u.status, u.index_token, u.bounds_token, u.revision, r.vector_id, r.pending_vector FROM users u "
    "LEFT JOIN records r ON r.user_id = u.user_id AND r.status = ? WHERE u.user_id = ?"
)
_TIMELINE = (
    "SELECT record_id, vector_id, valid_from, valid_until, expires_at FROM records "
    "WHERE user_id = ? AND bounded = 1"
)


class RecordReads:
    """Read-only queries of the ``records`` table (joined with ``users`` where a status matters)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def users(self) -> list[str]:
        """Users with at least one record, sorted."""
        with self._db.session() as s:
            stmt = (
                select(RecordRow.user_id)
                .join(UserRow, col(UserRow.user_id) == col(RecordRow.user_id))
                .where(UserRow.status == UserStatus.ACTIVE.value)
                .distinct()
                .order_by(RecordRow.user_id)
            )
            return list(s.exec(stmt))

    def count(self, user_id: str | None = None) -> int:
        """Records of one user (on the fast read path: a cold search asks), or of everybody."""
        raw = None if user_id is None else self._db.fixed_rows(_COUNT, (user_id,))
        if raw is not None:
            return int(raw[0][0])
        with self._db.session() as s:
            stmt = select(func.count()).select_from(RecordRow)
            if user_id is not None:
                stmt = stmt.where(RecordRow.user_id == user_id)
            return int(s.exec(stmt).one())

    def count_by_user(self) -> dict[str, int]:
        """Records per user key (a tenant view sums the keys it owns)."""
        with self._db.session() as s:
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
            rows = self._db.fixed_rows(_BY_VECTOR_IDS.format(marks=marks), (user_id, *chunk))
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
        raw = self._db.fixed_rows(_BY_VECTOR, (user_id,))
        if raw is not None:
            return _by_vector(raw)
        with self._db.session() as s:
            rows = s.exec(select(RecordRow).where(RecordRow.user_id == user_id).order_by(col(RecordRow.pk)))
            return {row.vector_id: row.to_record() for row in rows}

    def _lookup(self, user_id: str, key: Any, values: Sequence[str]) -> dict[str, Record]:
        found: dict[str, Record] = {}
        with self._db.session() as s:
            for chunk in chunks(list(values)):
                rows = s.exec(select(RecordRow).where(RecordRow.user_id == user_id, col(key).in_(chunk)))
                found.update({getattr(row, key.key): row.to_record() for row in rows})
        return found

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records in insertion order (:meth:`records_since` the start)."""
        return self.records_since(user_id, 0)[1]

    def records_since(self, user_id: str, position: int) -> tuple[int, list[Record]]:
        """The user's records stored after row ``position`` (0: all), in order, and the last one's row.

        Rows are numbered as they are inserted (``pk``); a user's inserts are serialised by its row's
        lock, so within one user the numbers follow commit order and a record appended later always
        comes after every record read here (what the caches that grow read: ``store/cache.py``).
        Returns ``position`` itself when nothing follows it.
        """
        raw = self._db.fixed_rows(_SINCE, (user_id, position))
        if raw is None:
            with self._db.session() as s:
                rows = s.exec(
                    select(RecordRow)
                    .where(RecordRow.user_id == user_id, col(RecordRow.pk) > position)
                    .order_by(col(RecordRow.pk))
                ).all()
                last = rows[-1].pk if rows else None
                return (position if last is None else last), [row.to_record() for row in rows]
        return (raw[-1][0] if raw else position), [_record(columns) for _, *columns in raw]

    def vector_ids(self, user_id: str, status: RecordStatus | None = None) -> set[str]:
        """Vector ids of the user's records, optionally only those in one write state."""
        with self._db.session() as s:
            stmt = select(RecordRow.vector_id).where(RecordRow.user_id == user_id)
            if status is not None:
                stmt = stmt.where(RecordRow.status == status.value)
            return set(s.exec(stmt))

    def pending(
        self, user_id: str | None = None, *, after: str | None = None, limit: int | None = None
    ) -> dict[str, list[tuple[Record, np.ndarray | None]]]:
        """Records not yet indexed (written just now, or interrupted), by user, with kept vectors.

        ``limit``: at most that many, in record id order from past ``after`` (a big user in batches).
        """
        out: dict[str, list[tuple[Record, np.ndarray | None]]] = {}
        with self._db.session() as s:
            stmt = select(RecordRow).where(RecordRow.status == RecordStatus.PENDING.value)
            if user_id is not None:
                stmt = stmt.where(RecordRow.user_id == user_id)
            if after is not None:
                stmt = stmt.where(col(RecordRow.record_id) > after)
            if limit is not None:
                stmt = stmt.order_by(col(RecordRow.record_id)).limit(limit)
            rows = s.exec(stmt)
            for row in rows:
                vector = None if row.pending_vector is None else np.frombuffer(row.pending_vector, "<f4")
                out.setdefault(row.user_id, []).append((row.to_record(), vector))
        return out

    def search_state(self, user_id: str) -> SearchState | None:
        """The user's index token and pending vectors, in one statement; None for an unknown user.

        On the read path, so a SQLite file is read like ``SqlCatalog.revision``, without SQLAlchemy.
        One statement is one snapshot: a row is either pending here or covered by the token's view.
        """
        rows = self._user_vectors(user_id, RecordStatus.PENDING)
        if rows is None:
            return None
        kept = [(vid, blob) for *_, vid, blob in rows if blob is not None]
        pending = np.stack([np.frombuffer(blob, "<f4") for _, blob in kept]) if kept else None
        return SearchState(rows[0][1], [vid for vid, _ in kept], pending, rows[0][2], rows[0][3])

    def kept_vectors(self, user_id: str) -> tuple[str | None, list[str], np.ndarray] | None:
        """The user's index token and the vectors its indexed rows keep (ids, rows aligned), in one statement.

        What the vector index holds for the user at that token, read without it (a full disk, where
        the index cannot be opened again). None for an unknown user, or when a row indexed before
        rows kept their vectors has none.
        """
        rows = self._user_vectors(user_id, RecordStatus.INDEXED)
        if rows is None:
            return None
        kept = [(vid, blob) for *_, vid, blob in rows if vid is not None]
        if any(blob is None for _, blob in kept):
            return None
        empty = np.zeros((0, 0), dtype=np.float32)
        matrix = np.stack([np.frombuffer(blob, "<f4") for _, blob in kept]) if kept else empty
        return rows[0][1], [vid for vid, _ in kept], matrix

    def vectors_of(self, user_id: str, vector_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The vectors the user's rows keep, by the vector ids asked for (a row keeping none is absent).

        In chunks, on the fast read path where there is one: a big user's vectors without the index.
        """
        found: dict[str, np.ndarray] = {}
        for chunk in chunks(list(vector_ids)):
            marks = ",".join("?" * len(chunk))
            rows: Sequence[Any] | None = self._db.fixed_rows(
                _KEPT_BY_VECTOR_IDS.format(marks=marks), (user_id, *chunk)
            )
            if rows is None:
                with self._db.session() as s:
                    rows = s.execute(
                        select_columns(col(RecordRow.vector_id), col(RecordRow.pending_vector)).where(
                            col(RecordRow.user_id) == user_id, col(RecordRow.vector_id).in_(chunk)
                        )
                    ).all()
            found.update((vid, np.frombuffer(blob, "<f4")) for vid, blob in rows if blob is not None)
        return found

    def _user_vectors(self, user_id: str, status: RecordStatus) -> Sequence[Any] | None:
        """An active user's (status, index token, bounds token, revision, vector id, kept vector) rows.

        One row per record in ``status`` (one with no record when there is none); None for a user
        unknown or being forgotten.
        """
        rows: Sequence[Any] | None = self._db.fixed_rows(_USER_VECTORS, (status.value, user_id))
        if rows is None:
            same_user = col(RecordRow.user_id) == col(UserRow.user_id)
            joined = same_user & (col(RecordRow.status) == status.value)
            with self._db.session() as s:
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
        return rows if rows and rows[0][0] == UserStatus.ACTIVE.value else None

    def timeline(self, user_id: str) -> Timeline:
        """The user's bounded records (validity, expiry), for reads to filter by."""
        reader = self._db._revision_reader()
        rows: Sequence[Any]
        if reader is not None:
            rows = reader.execute(_TIMELINE, (user_id,)).fetchall()
        else:
            with self._db.session() as s:
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
        with self._db.session() as s:
            rows = s.exec(
                select(RecordRow.user_id, RecordRow.record_id).where(
                    col(RecordRow.expires_at).is_not(None), col(RecordRow.expires_at) <= now
                )
            )
            for user_id, record_id in rows:
                found.setdefault(user_id, []).append(record_id)
        return found


def _by_vector(rows: Iterable[Sequence[Any]]) -> dict[str, Record]:
    """Raw rows of ``vector_id`` and :data:`RECORD_COLUMNS` as records by vector id."""
    return {vid: _record(columns) for vid, *columns in rows}


def _record(columns: list[Any]) -> Record:
    """A record from a raw row's :data:`RECORD_COLUMNS`."""
    if isinstance(columns[6], str):  # meta: JSON text in SQLite's raw rows, decoded by psycopg
        columns[6] = json.loads(columns[6])
    return record_from_columns(*columns)
