"""The SQL side of the store: the source of truth for records, users and their write state.

Tables are SQLModel classes; any table with a ``user_id`` column is per-user data and is wiped by
:meth:`SqlCatalog.forget`, so caches added later (PBR outputs, preference memories) are forgotten
without having to register anywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock
from sqlalchemy import (
    JSON,
    Column,
    Connection,
    Engine,
    Index,
    LargeBinary,
    UniqueConstraint,
    bindparam,
    case,
    delete,
    event,
    func,
    inspect,
    or_,
    text,
    tuple_,
    update,
)
from sqlalchemy import select as select_columns  # sqlmodel's select takes at most four columns
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlmodel import Field, Session, SQLModel, col, create_engine, select

from personamem.errors import InvalidInputError, StoreError, UserBeingForgottenError
from personamem.records import Record, RecordKind
from personamem.store.pseudonyms import Pseudonyms
from personamem.store.timeline import Bounds, Timeline

__all__ = [
    "DerivedRow",
    "InteractionRow",
    "RecordRow",
    "RecordStatus",
    "SearchState",
    "SqlCatalog",
    "UserRow",
    "UserStatus",
    "is_bounded",
]

_IN_CHUNK = 500  # stays under SQLite's bound-parameter limit
# how long a write waits for another process's forget of its user (a forget of a large store vacuums
# for seconds); past it, the forget is taken as interrupted
FORGET_WAIT_S = 30.0
PSEUDONYM_KEY = "pseudonym_key"


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
    cache built before the forget could then pass for current. ``index_token`` changes only when the
    set of the user's *indexed* vectors changes (marked indexed, or put back to pending): it keys
    each process's view of the vector index, which a staged record (served from SQL) leaves valid.
    """

    __tablename__ = "users"

    user_id: str = Field(primary_key=True)
    revision: str = Field(default_factory=lambda: uuid.uuid4().hex)
    status: str = UserStatus.ACTIVE.value
    index_token: str | None = None
    # NULL while the user has no bounded record (validity, expiry): reads then skip the timeline;
    # otherwise changes whenever a write may have changed the user's bounds (keys ``Timeline``)
    bounds_token: str | None = None


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


class RecordRow(SQLModel, table=True):
    """A stored record; ``pk`` gives insertion order, ``(user_id, record_id)`` is the identity."""

    __tablename__ = "records"
    __table_args__ = (
        UniqueConstraint("user_id", "record_id"),
        # search hits come back as vector ids: without this SQLite scans all of the user's rows
        UniqueConstraint("user_id", "vector_id"),
        Index("ix_records_user_bounded", "user_id", "bounded"),  # a user's timeline, without a scan
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
    # the vector of a pending record written by ``Store.add`` (float32 bytes), cleared once indexed:
    # searches score it from here until the vector index has it, and repair needs no re-encoding
    pending_vector: bytes | None = Field(default=None, sa_column=Column(LargeBinary, nullable=True))
    # validity and expiry as epoch seconds (UTC): compared in SQL by the sweep, in Python by reads
    valid_from: float | None = None
    valid_until: float | None = None
    supersedes: str | None = None
    expires_at: float | None = Field(default=None, index=True)  # the sweep's query
    bounded: bool = False  # any of the three times set: the user's timeline holds this record

    def to_record(self) -> Record:
        """The public, immutable form."""
        stored = (self.user_id, self.record_id, self.text, self.kind, self.category, self.timestamp)
        times = (self.valid_from, self.valid_until, self.supersedes, self.expires_at)
        return _record(*stored, self.meta, self.input, self.output, *times)


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


class InteractionRow(SQLModel, table=True):
    """One logged ``search``/``context`` call and what the application reported after it.

    Per-user data like the records: the ``user_id`` column makes ``forget`` erase it, and
    :meth:`SqlCatalog.delete_records` takes deleted records out of ``results`` and ``used``.
    """

    __tablename__ = "interactions"

    pk: int | None = Field(default=None, primary_key=True)
    interaction_id: str = Field(unique=True)
    user_id: str = Field(index=True)
    call: str  # "search" or "context"
    method: str
    query: str
    results: list[Any] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))  # [id, score]
    time: str  # ISO 8601, UTC
    answer: str | None = None
    rating: float | None = None
    used: list[Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))
    feedback_time: str | None = None
    # what a context call showed the LLM (text, timings, warnings, usage) for the inspector; dropped
    # when a record it may quote is deleted
    trace: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON, nullable=True))


_TIMES = ("valid_from", "valid_until", "supersedes", "expires_at")


def _content_hash(record: Record) -> str:
    payload = record.model_dump(mode="json", exclude={"user_id", "id"})
    for name in _TIMES:  # unset, they leave the hash as it was before they existed
        if payload.get(name) is None:
            payload.pop(name, None)
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def _row(record: Record, names: Pseudonyms) -> dict[str, Any]:
    return {
        "user_id": record.user_id,
        "record_id": record.id,
        "vector_id": names.vector_id(record.user_id, record.id),
        "text": record.text,
        "kind": record.kind.value,
        "category": record.category,
        "timestamp": record.timestamp.isoformat() if record.timestamp else None,
        "meta": dict(record.metadata),
        "input": record.input,
        "output": record.output,
        "content_hash": _content_hash(record),
        "status": RecordStatus.PENDING.value,
        "valid_from": _seconds(record.valid_from),
        "valid_until": _seconds(record.valid_until),
        "supersedes": record.supersedes,
        "expires_at": _seconds(record.expires_at),
        "bounded": is_bounded(record),
    }


def is_bounded(record: Record) -> bool:
    """Whether the record has a validity bound or an expiry (it then joins the user's timeline)."""
    return bool(record.valid_from or record.valid_until or record.expires_at)


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _moment(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


_RECORD_COLUMNS = (
    "user_id, record_id, text, kind, category, timestamp, meta, input, output, "
    "valid_from, valid_until, supersedes, expires_at"
)
_BY_VECTOR_IDS = (
    f"SELECT vector_id, {_RECORD_COLUMNS} FROM records WHERE user_id = ? AND vector_id IN ({{marks}})"
)
_SEARCH_STATE = (
    "SELECT u.status, u.index_token, u.bounds_token, r.vector_id, r.pending_vector FROM users u "
    "LEFT JOIN records r ON r.user_id = u.user_id AND r.status = ? WHERE u.user_id = ?"
)


def _record(
    user_id: str,
    record_id: str,
    text_: str,
    kind: str,
    category: str | None,
    timestamp: str | None,
    meta: dict[str, Any],
    input_: str | None,
    output: str | None,
    valid_from: float | None = None,
    valid_until: float | None = None,
    supersedes: str | None = None,
    expires_at: float | None = None,
) -> Record:
    """A record from its stored columns (``_RECORD_COLUMNS``, with ``meta`` decoded)."""
    return Record(
        user_id=user_id,
        id=record_id,
        text=text_,
        kind=RecordKind(kind),
        category=category,
        timestamp=datetime.fromisoformat(timestamp) if timestamp else None,
        metadata=meta,
        input=input_,
        output=output,
        valid_from=_moment(valid_from),
        valid_until=_moment(valid_until),
        supersedes=supersedes,
        expires_at=_moment(expires_at),
    )


def _blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


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
    # the driver's own implicit BEGIN is off: the engine's "begin" listener emits BEGIN [IMMEDIATE]
    dbapi_connection.isolation_level = None


def _begin_deferred(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN")


def _begin_immediate(connection: Any) -> None:
    """Take SQLite's write lock when a write transaction begins, not at its first write.

    A deferred transaction that reads, then writes, fails at once with "database is locked" when
    another process committed in between (WAL cannot upgrade a stale snapshot, and the busy timeout
    does not apply); an immediate one waits its turn. Two processes writing one new user's first
    record hit exactly that.
    """
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _is_already_exists(error: Exception) -> bool:
    return "already exists" in str(error).lower()


def vacuum_sqlite(database: Path, *, wal: bool = False, attempts: int = 50) -> None:
    """Rewrite a SQLite file without free pages or stale bytes; with ``wal``, then empty the WAL.

    Readers of an older snapshot hold the WAL's old pages; the checkpoint waits them out for up to
    ``attempts`` tries (a reader that stays longer leaves that to the next checkpoint).
    """
    with contextlib.closing(sqlite3.connect(database, timeout=30, isolation_level=None)) as db:
        db.execute("VACUUM")
        for _ in range(attempts if wal else 0):
            busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()[0]
            if not busy:
                return
            time.sleep(0.02)


# the write path's fixed statements, built once: built and coerced per call they made one add's
# staging 1.1 ms instead of 0.6 ms (measured here), more than running them costs
_USER_STATUS = select(UserRow.status).where(col(UserRow.user_id) == bindparam("user_id"))
_INSERT_USER = {  # executed with the row's columns as parameters
    "sqlite": sqlite.insert(UserRow).on_conflict_do_nothing(),
    "postgresql": postgresql.insert(UserRow).on_conflict_do_nothing(),
}
_RECORD_STATES = select(RecordRow.record_id, RecordRow.content_hash, RecordRow.status).where(
    col(RecordRow.user_id) == bindparam("user_id"),
    col(RecordRow.record_id).in_(bindparam("ids", expanding=True)),
)
_INSERT_INTERACTION = InteractionRow.__table__.insert()  # type: ignore[attr-defined]
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
_TIMELINE = (
    "SELECT record_id, vector_id, valid_from, valid_until, expires_at FROM records "
    "WHERE user_id = ? AND bounded = 1"
)


class SqlCatalog:
    """Records and users in any SQLAlchemy database; every query names the user it reads.

    Safe for several processes over one database: the schema is created idempotently (under a lock
    file for SQLite), writes on SQLite begin immediately, and user rows are inserted-or-ignored.
    """

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self.url = url
        sqlite_url = parsed.get_backend_name() == "sqlite"
        database = parsed.database if sqlite_url else None
        self._sqlite_file = Path(database).resolve() if database and database != ":memory:" else None
        if sqlite_url:
            args = {"connect_args": {"check_same_thread": False}}
            self.engine: Engine = create_engine(url, **args)
            # a second engine for writes: SQLAlchemy begins a transaction one way per engine
            self._writer: Engine = create_engine(url, **args)
            for engine, begin in ((self.engine, _begin_deferred), (self._writer, _begin_immediate)):
                event.listen(engine, "connect", _sqlite_pragmas)
                event.listen(engine, "begin", begin)
        else:
            self.engine = self._writer = create_engine(url)
        self._create_schema()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []

    def _create_schema(self) -> None:
        """Create missing tables and columns; losing the race to another process is not an error."""
        if self._sqlite_file is not None:
            with FileLock(f"{self._sqlite_file}.lock"):
                self._create_missing()
            return
        try:
            self._create_missing()
        except (OperationalError, ProgrammingError, IntegrityError) as error:
            if not _is_already_exists(error) and not isinstance(error, IntegrityError):
                raise
            self._create_missing()  # the other process finished; check again

    def _create_missing(self) -> None:
        SQLModel.metadata.create_all(self._writer)
        # columns added since a table was first created (create_all leaves existing tables alone)
        tables = SQLModel.metadata.tables
        added = [("records", "pending_vector"), ("users", "index_token"), ("users", "bounds_token")]
        added += [("interactions", "trace")]
        added += [("records", name) for name in (*_TIMES, "bounded")]
        for table, column in added:
            present = {c["name"] for c in inspect(self._writer).get_columns(table)}
            if column not in present:
                kind = tables[table].c[column].type.compile(dialect=self._writer.dialect)
                default = " NOT NULL DEFAULT false" if column == "bounded" else ""
                with self._writer.begin() as connection:
                    connection.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}{default}"))
        for index in tables["records"].indexes:  # indexes on the columns just added
            index.create(self._writer, checkfirst=True)

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction on a Core connection, for the hot write path (``stage``).

        Like ``session(write=True)`` without the ORM session's per-statement machinery: with the
        prebuilt statements below, staging one ``add`` went from 1.7 ms to 0.6 ms (measured here),
        most of what ``add`` cost beyond encoding.
        """
        try:
            with self._writer.begin() as connection:
                yield connection
        except OperationalError as error:
            raise StoreError(f"the SQL database {self._where()} failed: {error.orig}") from error

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[Session]:
        """A session that commits on success and rolls back on error.

        ``write=True`` on SQLite takes the database's write lock up front (see ``_begin_immediate``).
        A database that stays locked past the busy timeout, or fails at the driver, raises
        :class:`StoreError`; integrity errors pass through for the callers that expect them.
        """
        with Session(self._writer if write else self.engine, expire_on_commit=False) as session:
            try:
                yield session
                session.commit()
            except OperationalError as error:
                session.rollback()
                raise StoreError(f"the SQL database {self._where()} failed: {error.orig}") from error
            except BaseException:
                session.rollback()
                raise

    def _where(self) -> str:
        return str(self._sqlite_file) if self._sqlite_file else make_url(self.url).render_as_string()

    def close(self) -> None:
        """Release pooled connections and the revision readers."""
        for reader in self._readers:
            reader.close()
        self._readers.clear()
        self._local = threading.local()
        self.engine.dispose()
        self._writer.dispose()

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
            with self.session(write=True) as s:
                user = s.get(UserRow, user_id)
                if user is None or user.status != UserStatus.ACTIVE.value:
                    return False
                s.add(DerivedRow(user_id=user_id, namespace=namespace, key=key, value=value))
        except IntegrityError:
            pass
        return True

    def replace_derived(self, user_id: str, namespace: str, key: str, value: Any) -> bool:
        """Overwrite a derived value of an active user (a slot such as the latest preference memory).

        False (nothing kept) for unknown or forgotten users.
        """
        with self.session(write=True) as s:
            user = s.get(UserRow, user_id)
            if user is None or user.status != UserStatus.ACTIVE.value:
                return False
            s.execute(
                delete(DerivedRow).where(
                    col(DerivedRow.user_id) == user_id,
                    col(DerivedRow.namespace) == namespace,
                    col(DerivedRow.key) == key,
                )
            )
            s.add(DerivedRow(user_id=user_id, namespace=namespace, key=key, value=value))
        return True

    # -- interactions ----------------------------------------------------------------------------

    def log_interaction(self, row: dict[str, Any]) -> bool:
        """Insert one interaction of an active user; False (nothing kept) for unknown or forgotten users.

        A user without a row has nothing ``forget`` could find the interaction by, so it is not kept.
        """
        with self.transaction() as s:  # on every logged call: Core, like ``stage``
            if s.execute(_USER_STATUS, {"user_id": row["user_id"]}).scalar() != UserStatus.ACTIVE.value:
                return False
            s.execute(_INSERT_INTERACTION, [row])
        return True

    def import_interactions(self, rows: Sequence[dict[str, Any]]) -> int:
        """Insert interactions in one transaction, skipping ids already stored; return how many were new.

        Raises:
            InvalidInputError: a row's user has no records here (checked before anything is written).
        """
        with self.session(write=True) as s:
            users = {row["user_id"] for row in rows}
            active = set(
                s.exec(
                    select(UserRow.user_id).where(
                        col(UserRow.user_id).in_(users), UserRow.status == UserStatus.ACTIVE.value
                    )
                )
            )
            for number, row in enumerate(rows, start=1):
                if row["user_id"] not in active:
                    raise InvalidInputError(
                        f"interaction {number} ({row['interaction_id']}): user {row['user_id']!r} has no "
                        "records in this store; ingest the users' records first"
                    )
            ids = [row["interaction_id"] for row in rows]
            known: set[str] = set()
            for chunk in _chunks(ids):
                known.update(
                    s.exec(
                        select(InteractionRow.interaction_id).where(
                            col(InteractionRow.interaction_id).in_(chunk)
                        )
                    )
                )
            new = [InteractionRow(**row) for row in rows if row["interaction_id"] not in known]
            s.add_all(new)
        return len(new)

    def feedback(self, interaction_id: str, user_ids: Callable[[str], bool], changes: dict[str, Any]) -> bool:
        """Set the given feedback fields of an interaction whose user key passes ``user_ids``.

        False when there is no such interaction in this view (another tenant's counts as none).
        """
        with self.session(write=True) as s:
            row = s.exec(
                select(InteractionRow).where(InteractionRow.interaction_id == interaction_id)
            ).first()
            if row is None or not user_ids(row.user_id):
                return False
            for name, value in changes.items():
                setattr(row, name, value)
            s.add(row)
        return True

    def last_calls(self) -> dict[str, str]:
        """The time of each user key's latest logged call (ISO 8601, UTC)."""
        with self.session() as s:
            stmt = select(InteractionRow.user_id, func.max(InteractionRow.time)).group_by(
                InteractionRow.user_id
            )
            return {user_id: str(latest) for user_id, latest in s.exec(stmt)}

    def interactions(self, user_ids: Sequence[str] | None = None) -> list[InteractionRow]:
        """Logged interactions (of these user keys, or all), oldest first."""
        with self.session() as s:
            stmt = select(InteractionRow).order_by(col(InteractionRow.pk))
            if user_ids is None:
                return list(s.exec(stmt))
            found: list[InteractionRow] = []
            for chunk in _chunks(list(user_ids)):
                found += s.exec(stmt.where(col(InteractionRow.user_id).in_(chunk)))
            return sorted(found, key=lambda row: row.pk or 0)

    @staticmethod
    def _scrub_interactions(s: Session, user_id: str, deleted: set[str]) -> None:
        """Take deleted records out of the user's logged results and feedback; drop the user's traces.

        A trace's text may quote a deleted record through the records shown or the preference memory
        (derived from every record), so none of the user's is kept.
        """
        rows = s.exec(select(InteractionRow).where(InteractionRow.user_id == user_id))
        for row in rows:
            results = [hit for hit in row.results if hit[0] not in deleted]
            used = None if row.used is None else [rid for rid in row.used if rid not in deleted]
            if results != row.results or used != row.used or row.trace is not None:
                row.results, row.used, row.trace = results, used, None
                s.add(row)

    # -- writes ---------------------------------------------------------------------------------

    def stage(
        self,
        records: Sequence[Record],
        names: Pseudonyms,
        vectors: np.ndarray | None = None,
        *,
        relabel: Sequence[Record] = (),
    ) -> list[Record]:
        """Write ``records`` as pending in one transaction; return those that need (re)indexing.

        ``relabel`` are stored records whose other fields (times, metadata, category) change in the
        same transaction, their text and vector kept: ``supersede`` ends the old fact here.

        A record whose id the user already has with identical content is skipped (idempotent
        ingest); one with different content replaces the stored one and is indexed again. Vector
        ids come from ``names``, the store's keyed pseudonyms; ``vectors`` (rows aligned with
        ``records``), when given, are kept with the pending rows.

        A user being forgotten by another process is waited for (up to ``FORGET_WAIT_S``): the
        write then starts the user afresh. A forget that never finishes was interrupted, and opening
        the store finishes it.
        """
        deadline = time.monotonic() + FORGET_WAIT_S
        while True:
            try:
                return self._stage(records, names, vectors, relabel)
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
        relabel: Sequence[Record] = (),
    ) -> list[Record]:
        blobs = {}
        if vectors is not None:
            blobs = {(r.user_id, r.id): _blob(v) for r, v in zip(records, vectors, strict=True)}
        by_user: dict[str, dict[str, Record]] = {}
        for record in records:
            by_user.setdefault(record.user_id, {})[record.id] = record  # last one wins within a batch
        for record in relabel:
            by_user.setdefault(record.user_id, {})
        changed: list[Record] = []
        with self.transaction() as s:
            for user_id, batch in by_user.items():
                self._ensure_user(s, user_id)
                existing: dict[str, tuple[str, str]] = {}
                for ids in _chunks(list(batch)):
                    rows = s.execute(_RECORD_STATES, {"user_id": user_id, "ids": list(ids)})
                    existing.update({rid: (h, st) for rid, h, st in rows})
                inserts, updates = [], []
                for record in batch.values():
                    row = _row(record, names)
                    row["pending_vector"] = blobs.get((user_id, record.id))
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
                    row = _row(record, names)
                    fields = ("category", "timestamp", "meta", *_TIMES, "bounded", "content_hash")
                    s.execute(_RELABEL, {"key": user_id, "rid": record.id, **{f: row[f] for f in fields}})
                if inserts or updates or relabelled:
                    bounded = any(is_bounded(r) for r in (*batch.values(), *relabelled))
                    bump = {"key": user_id, "fresh": uuid.uuid4().hex, "bounded": bounded}
                    s.execute(_BUMP_REVISION, bump)
        return changed

    def mark_indexed(self, user_id: str, records: Sequence[Record]) -> tuple[str | None, str] | None:
        """Close the write protocol for these records, as they were when their vectors were written.

        A row whose content changed since (a newer pending version) stays pending. None, marking
        nothing, when the user is gone or being forgotten: the caller must remove the vectors.
        Otherwise the user's index token before and after: the caller's view of the index is
        current at the new token only if it was at the old one (no other process indexed between).
        The revision changes again here: a cache built from vectors between staging and indexing
        (P-Anchor reads every vector) would otherwise pass for current while missing these records.
        """
        with self.session(write=True) as s:
            user = s.get(UserRow, user_id)
            if user is None or user.status != UserStatus.ACTIVE.value:
                return None
            before, after = user.index_token, uuid.uuid4().hex
            for chunk in _chunks([(r.id, _content_hash(r)) for r in records]):
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
        self, user_id: str, record_ids: Sequence[str], kept: tuple[list[str], np.ndarray]
    ) -> list[str]:
        """Delete the user's records with these ids in one transaction; return the ids deleted.

        The user's other records go back to ``pending`` with their vectors (``kept``: vector ids and
        vectors as read from the index), because the caller rebuilds the user's collection to erase
        the deleted vectors; a crash during the rebuild leaves pending rows that repair indexes. The
        user's derived values are dropped too: an LLM's output may quote a deleted record.
        """
        with self.session(write=True) as s:
            found: list[str] = []
            for ids in _chunks(list(record_ids)):
                found += s.exec(
                    select(RecordRow.record_id).where(
                        RecordRow.user_id == user_id, col(RecordRow.record_id).in_(ids)
                    )
                )
            if not found:
                return []
            for ids in _chunks(found):
                s.execute(
                    delete(RecordRow).where(
                        col(RecordRow.user_id) == user_id, col(RecordRow.record_id).in_(ids)
                    )
                )
            s.execute(delete(DerivedRow).where(col(DerivedRow.user_id) == user_id))
            self._scrub_interactions(s, user_id, set(found))
            self._requeue(s, user_id, kept)
        if self._sqlite_file is not None:
            vacuum_sqlite(self._sqlite_file, wal=True)
        return found

    def requeue(self, user_id: str, kept: tuple[list[str], np.ndarray]) -> None:
        """Put the user's indexed rows back to ``pending`` with their vectors, before a rebuild.

        Repair's half of :meth:`delete_records`, for a delete that died before its rebuild.
        """
        with self.session(write=True) as s:
            self._requeue(s, user_id, kept)

    @classmethod
    def _requeue(cls, s: Session, user_id: str, kept: tuple[list[str], np.ndarray]) -> None:
        blobs = dict(zip(kept[0], (_blob(v) for v in kept[1]), strict=True))
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

    def finish_forget(self, user_id: str) -> None:
        """Delete every row of the user in every table that has a ``user_id`` column.

        On SQLite the database is then vacuumed: secure-delete zeroes deleted cells, but a b-tree
        page rebuilt while rows move keeps stale bytes in its unused space (an index entry with a
        forgotten user id was found there), and the WAL holds the old pages until checkpointed.
        """
        with self.session(write=True) as s:
            for table in reversed(SQLModel.metadata.sorted_tables):
                if "user_id" in table.c:
                    s.execute(table.delete().where(table.c.user_id == user_id))
        if self._sqlite_file is not None:
            vacuum_sqlite(self._sqlite_file, wal=True)

    @staticmethod
    def _ensure_user(s: Connection, user_id: str) -> None:
        """Insert the user's row unless another writer (in any process) already did."""
        row = {"user_id": user_id, "revision": uuid.uuid4().hex, "status": UserStatus.ACTIVE.value}
        if (insert := _INSERT_USER.get(s.dialect.name)) is not None:
            s.execute(insert, row)
        elif s.execute(_USER_STATUS, {"user_id": user_id}).scalar_one_or_none() is None:
            s.execute(UserRow.__table__.insert(), row)  # type: ignore[attr-defined]
        if s.execute(_USER_STATUS, {"user_id": user_id}).scalar_one() == UserStatus.FORGETTING.value:
            raise UserBeingForgottenError(f"user {user_id!r} is being forgotten", user_id=user_id)

    @staticmethod
    def _bump(s: Session | Connection, user_id: str, *, index_token: str | None = None) -> None:
        """A fresh revision; and a given index token when the user's indexed vectors changed."""
        values = {"revision": uuid.uuid4().hex} | ({"index_token": index_token} if index_token else {})
        s.execute(update(UserRow).where(col(UserRow.user_id) == user_id).values(**values))

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
            # fetchall steps the statement to its end, so no read snapshot outlives the call
            rows = reader.execute("SELECT revision FROM users WHERE user_id = ?", (user_id,)).fetchall()
            return str(rows[0][0]) if rows else None
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

        Every search ends here, so a SQLite file is read with one fixed statement per chunk (about a
        tenth of an ORM query's cost, measured by ``bench/read_path.py``).
        """
        reader = self._revision_reader()
        if reader is None:
            return self._lookup(user_id, RecordRow.vector_id, vector_ids)
        found: dict[str, Record] = {}
        for chunk in _chunks(list(vector_ids)):
            marks = ",".join("?" * len(chunk))
            rows = reader.execute(_BY_VECTOR_IDS.format(marks=marks), (user_id, *chunk)).fetchall()
            for vid, *columns in rows:
                columns[6] = json.loads(columns[6])  # meta: JSON text in a raw row
                found[vid] = _record(*columns)
        return found

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
        reader = self._revision_reader()
        rows: Sequence[Any]
        if reader is not None:
            rows = reader.execute(_SEARCH_STATE, (RecordStatus.PENDING.value, user_id)).fetchall()
        else:
            joined = (col(RecordRow.user_id) == col(UserRow.user_id)) & (
                col(RecordRow.status) == RecordStatus.PENDING.value
            )
            with self.session() as s:
                rows = s.execute(
                    select_columns(
                        col(UserRow.status),
                        col(UserRow.index_token),
                        col(UserRow.bounds_token),
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
        return SearchState(rows[0][1], [vid for vid, _ in kept], pending, rows[0][2])

    def bounds_token(self, user_id: str) -> str | None:
        """The user's bounds token (None: no bounded record, or no user); read like :meth:`revision`."""
        reader = self._revision_reader()
        if reader is not None:
            rows = reader.execute("SELECT bounds_token FROM users WHERE user_id = ?", (user_id,)).fetchall()
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
