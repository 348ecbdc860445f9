"""The SQL side of the store: the source of truth for records, users and their write state.

Tables are SQLModel classes; any table with a ``user_id`` column is per-user data and is wiped by
:meth:`SqlCatalog.forget`, so caches added later (PBR outputs, preference memories) are forgotten
without having to register anywhere.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy import JSON, Column, Engine, UniqueConstraint, event, func, update
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, Session, SQLModel, col, create_engine, select

from personamem.errors import StoreError
from personamem.records import Record, RecordKind

__all__ = ["DerivedRow", "RecordRow", "RecordStatus", "SqlCatalog", "UserRow", "UserStatus", "vector_key"]

_IN_CHUNK = 500  # stays under SQLite's bound-parameter limit


class RecordStatus(StrEnum):
    """Where a record is in the write protocol: pending → (vector upserted) → indexed."""

    PENDING = "pending"
    INDEXED = "indexed"


class UserStatus(StrEnum):
    """A user being forgotten keeps this mark until rows and vectors are both gone."""

    ACTIVE = "active"
    FORGETTING = "forgetting"


class UserRow(SQLModel, table=True):
    """One row per user; ``revision`` is a fresh token on every write, keying per-user caches.

    A random token rather than a counter: a counter restarts when a forgotten user comes back, and a
    cache built before the forget could then pass for current.
    """

    __tablename__ = "users"

    user_id: str = Field(primary_key=True)
    revision: str = Field(default_factory=lambda: uuid.uuid4().hex)
    status: str = UserStatus.ACTIVE.value


class RecordRow(SQLModel, table=True):
    """A stored record; ``pk`` gives insertion order, ``(user_id, record_id)`` is the identity."""

    __tablename__ = "records"
    __table_args__ = (
        UniqueConstraint("user_id", "record_id"),
        # search hits come back as vector ids: without this SQLite scans all of the user's rows
        UniqueConstraint("user_id", "vector_id"),
    )

    pk: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(index=True)
    record_id: str
    vector_id: str
    text: str
    kind: str
    category: str | None = None
    timestamp: str | None = None  # ISO 8601 as given: keeps naive and aware times exactly
    meta: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    input: str | None = None
    output: str | None = None
    content_hash: str
    status: str = Field(default=RecordStatus.PENDING.value, index=True)

    def to_record(self) -> Record:
        """The public, immutable form."""
        return Record(
            user_id=self.user_id,
            id=self.record_id,
            text=self.text,
            kind=RecordKind(self.kind),
            category=self.category,
            timestamp=datetime.fromisoformat(self.timestamp) if self.timestamp else None,
            metadata=self.meta,
            input=self.input,
            output=self.output,
        )


class StoreInfo(SQLModel, table=True):
    """Key/value facts about the store, e.g. which encoder its vectors came from."""

    __tablename__ = "store_info"

    key: str = Field(primary_key=True)
    value: str


class DerivedRow(SQLModel, table=True):
    """A value derived from a user's data by an expensive step (an LLM's pseudo utterances...).

    Keyed by (user, namespace, key) where the caller's key covers every input of the step (query,
    model, seed, the records shown), so a hit is always valid; the ``user_id`` column makes
    ``forget`` erase it with the user's records.
    """

    __tablename__ = "derived"
    __table_args__ = (UniqueConstraint("user_id", "namespace", "key"),)

    pk: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(index=True)
    namespace: str
    key: str
    value: Any = Field(sa_column=Column(JSON, nullable=False))


def vector_key(user_id: str, record_id: str) -> str:
    """The pseudonymous id a record's vector has in the vector index.

    The index never sees user or record ids, so nothing readable about a user survives in its files
    (Chroma keeps deleted ids in free database pages) once the user is forgotten.
    """
    key = f"{user_id}\x00{record_id}".encode()
    return hashlib.blake2b(key, digest_size=16).hexdigest()


def _content_hash(record: Record) -> str:
    payload = record.model_dump(mode="json", exclude={"user_id", "id"})
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def _row(record: Record) -> dict[str, Any]:
    return {
        "user_id": record.user_id,
        "record_id": record.id,
        "vector_id": vector_key(record.user_id, record.id),
        "text": record.text,
        "kind": record.kind.value,
        "category": record.category,
        "timestamp": record.timestamp.isoformat() if record.timestamp else None,
        "meta": dict(record.metadata),
        "input": record.input,
        "output": record.output,
        "content_hash": _content_hash(record),
        "status": RecordStatus.PENDING.value,
    }


def _chunks(items: Sequence[Any], size: int = _IN_CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
    cursor.execute("PRAGMA synchronous=NORMAL")  # durable across process crashes in WAL mode
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA secure_delete=ON")  # forgotten users' bytes are zeroed, not left in free pages
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class SqlCatalog:
    """Records and users in any SQLAlchemy database; every query names the user it reads."""

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        kwargs: dict[str, Any] = {}
        if parsed.get_backend_name() == "sqlite":
            kwargs["connect_args"] = {"check_same_thread": False}
        self.url = url
        self.engine: Engine = create_engine(url, **kwargs)
        if parsed.get_backend_name() == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        SQLModel.metadata.create_all(self.engine)
        database = parsed.database if parsed.get_backend_name() == "sqlite" else None
        self._sqlite_file = Path(database).resolve() if database and database != ":memory:" else None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on error."""
        with Session(self.engine, expire_on_commit=False) as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def close(self) -> None:
        """Release pooled connections and the revision readers."""
        for reader in self._readers:
            reader.close()
        self._readers.clear()
        self._local = threading.local()
        self.engine.dispose()

    # -- store facts ---------------------------------------------------------------------------

    def claim_info(self, key: str, value: str) -> str:
        """Record a fact unless one is stored already; return the stored value (atomic across processes)."""
        try:
            with self.session() as s:
                s.add(StoreInfo(key=key, value=value))
        except IntegrityError:  # somebody else recorded it first
            pass
        with self.session() as s:
            row = s.get(StoreInfo, key)
            assert row is not None
            return row.value

    # -- derived values ------------------------------------------------------------------------

    def get_derived(self, user_id: str, namespace: str, key: str) -> Any | None:
        """A cached derived value, or None."""
        with self.session() as s:
            return s.exec(
                select(DerivedRow.value).where(
                    DerivedRow.user_id == user_id, DerivedRow.namespace == namespace, DerivedRow.key == key
                )
            ).first()

    def put_derived(self, user_id: str, namespace: str, key: str, value: Any) -> bool:
        """Cache a derived value of an active user; False (nothing kept) for unknown or forgotten users.

        A concurrent writer of the same key wins harmlessly: equal keys mean equal inputs.
        """
        try:
            with self.session() as s:
                user = s.get(UserRow, user_id)
                if user is None or user.status != UserStatus.ACTIVE.value:
                    return False
                s.add(DerivedRow(user_id=user_id, namespace=namespace, key=key, value=value))
        except IntegrityError:
            pass
        return True

    # -- writes ---------------------------------------------------------------------------------

    def stage(self, records: Sequence[Record]) -> list[Record]:
        """Write ``records`` as pending in one transaction; return those that need (re)indexing.

        A record whose id the user already has with identical content is skipped (idempotent
        ingest); one with different content replaces the stored one and is indexed again.
        """
        by_user: dict[str, dict[str, Record]] = {}
        for record in records:
            by_user.setdefault(record.user_id, {})[record.id] = record  # last one wins within a batch
        changed: list[Record] = []
        with self.session() as s:
            for user_id, batch in by_user.items():
                self._ensure_user(s, user_id)
                existing: dict[str, tuple[str, str]] = {}
                for ids in _chunks(list(batch)):
                    rows = s.exec(
                        select(RecordRow.record_id, RecordRow.content_hash, RecordRow.status).where(
                            RecordRow.user_id == user_id, col(RecordRow.record_id).in_(ids)
                        )
                    )
                    existing.update({rid: (h, st) for rid, h, st in rows})
                inserts, updates = [], []
                for record in batch.values():
                    row = _row(record)
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
                if inserts or updates:
                    self._bump(s, user_id)
        return changed

    def mark_indexed(self, user_id: str, record_ids: Sequence[str]) -> None:
        """Close the write protocol for these records.

        The revision changes again here: a cache built from vectors between staging and indexing
        (P-Anchor reads every vector) would otherwise pass for current while missing these records.
        """
        with self.session() as s:
            for ids in _chunks(list(record_ids)):
                s.execute(
                    update(RecordRow)
                    .where(col(RecordRow.user_id) == user_id, col(RecordRow.record_id).in_(ids))
                    .values(status=RecordStatus.INDEXED.value)
                )
            self._bump(s, user_id)

    def begin_forget(self, user_id: str) -> bool:
        """Mark the user as being forgotten; False if the user is unknown."""
        with self.session() as s:
            user = s.get(UserRow, user_id)
            if user is None:
                return False
            user.status = UserStatus.FORGETTING.value
            user.revision = uuid.uuid4().hex
            s.add(user)
            return True

    def finish_forget(self, user_id: str) -> None:
        """Delete every row of the user in every table that has a ``user_id`` column.

        On SQLite the WAL is then checkpointed and truncated, since it still holds the old pages.
        """
        with self.session() as s:
            for table in reversed(SQLModel.metadata.sorted_tables):
                if "user_id" in table.c:
                    s.execute(table.delete().where(table.c.user_id == user_id))
        if self.engine.dialect.name == "sqlite":
            with self.engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")

    @staticmethod
    def _ensure_user(s: Session, user_id: str) -> None:
        user = s.get(UserRow, user_id)
        if user is None:
            s.add(UserRow(user_id=user_id))
            s.flush()
        elif user.status == UserStatus.FORGETTING.value:
            # a write for a user whose forget was interrupted: the forget must finish first
            raise StoreError(f"user {user_id!r} is being forgotten; reopen the store to finish it")

    @staticmethod
    def _bump(s: Session, user_id: str) -> None:
        s.execute(update(UserRow).where(col(UserRow.user_id) == user_id).values(revision=uuid.uuid4().hex))

    # -- reads ------------------------------------------------------------------------------------

    def revision(self, user_id: str) -> str | None:
        """The user's current write token, None for an unknown user.

        Read on every per-user cache lookup (BM25, P-Anchor), so it must cost far less than encoding
        the query. A SQLite file is read through a per-thread read-only connection with a fixed
        statement (~6 µs, against ~100 µs for a pooled SQLAlchemy connection): outside a transaction
        each SELECT sees the latest commit, so writes from other processes are never missed.
        """
        reader = self._revision_reader()
        if reader is not None:
            row = reader.execute("SELECT revision FROM users WHERE user_id = ?", (user_id,)).fetchone()
            return None if row is None else str(row[0])
        with self.engine.connect() as connection:
            return connection.execute(
                select(UserRow.revision).where(col(UserRow.user_id) == user_id)
            ).scalar_one_or_none()

    def _revision_reader(self) -> sqlite3.Connection | None:
        if self._sqlite_file is None:
            return None
        reader: sqlite3.Connection | None = getattr(self._local, "reader", None)
        if reader is None:
            # check_same_thread off only so close() may close it; each thread uses its own
            reader = sqlite3.connect(
                f"{self._sqlite_file.as_uri()}?mode=ro", uri=True, check_same_thread=False
            )
            self._local.reader = reader
            self._readers.append(reader)
        return reader

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

    def get_many(self, user_id: str, record_ids: Sequence[str]) -> dict[str, Record]:
        """The user's records with these ids (missing ids are absent from the result)."""
        return self._lookup(user_id, RecordRow.record_id, record_ids)

    def by_vector_ids(self, user_id: str, vector_ids: Sequence[str]) -> dict[str, Record]:
        """The user's records keyed by the vector ids asked for."""
        return self._lookup(user_id, RecordRow.vector_id, vector_ids)

    def _lookup(self, user_id: str, key: Any, values: Sequence[str]) -> dict[str, Record]:
        found: dict[str, Record] = {}
        with self.session() as s:
            for chunk in _chunks(list(values)):
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

    def pending(self) -> dict[str, list[Record]]:
        """Records whose write was interrupted, by user."""
        out: dict[str, list[Record]] = {}
        with self.session() as s:
            rows = s.exec(select(RecordRow).where(RecordRow.status == RecordStatus.PENDING.value))
            for row in rows:
                out.setdefault(row.user_id, []).append(row.to_record())
        return out

    def users_being_forgotten(self) -> list[str]:
        """Users whose forget was interrupted."""
        with self.session() as s:
            return list(s.exec(select(UserRow.user_id).where(UserRow.status == UserStatus.FORGETTING.value)))

    def all_users(self) -> Iterable[str]:
        """Every user row, active or not (for consistency checks)."""
        with self.session() as s:
            return list(s.exec(select(UserRow.user_id)))
