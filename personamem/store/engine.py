"""The store's connection to its SQL database: engines, transactions, schema upgrades, SQLite upkeep.

:class:`Database` knows nothing of records or users; the catalog (``personamem.store.sql``) and the
tables' own queries (``derived.py``, ``interaction_table.py``) build on it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock
from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import Session, create_engine

from personamem.errors import StoreError, StoreUnavailableError
from personamem.store.disk import disk_full, low_on_space, says_full, sqlite_io_error
from personamem.store.migrations import upgrade
from personamem.telemetry import step

__all__ = ["IN_CHUNK", "Database", "chunks", "connection_lost", "vacuum_sqlite"]

IN_CHUNK = 500
"""Most values one ``IN (...)`` binds: stays under SQLite's bound-parameter limit."""


def chunks(items: Sequence[Any], size: int = IN_CHUNK) -> Iterator[Sequence[Any]]:
    """``items`` in slices of at most ``size``, for ``IN`` clauses."""
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


# PostgreSQL's SQLSTATEs that refuse or end a connection rather than fail a statement: shut down
# (57P01 admin, 57P02 crash), starting up (57P03), idle timeout (57P05), too many connections (53300)
_LOST_STATES = frozenset({"57P01", "57P02", "57P03", "57P05", "53300"})


def connection_lost(error: BaseException) -> bool:
    """Whether ``error`` says the database server cannot be reached now, rather than that a statement failed.

    Refused, restarting or dropped connections heal by themselves (a new connection once the server
    is back), so they become :class:`StoreUnavailableError`; a constraint, bad SQL or a full disk
    would fail again. Read from psycopg's errors, raw or wrapped by SQLAlchemy: psycopg reports a
    failure of the connection itself with no SQLSTATE, the server with class 08 or one above.
    """
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    driver_error = error.orig if isinstance(error, DBAPIError) else error
    psycopg = sys.modules.get("psycopg")  # loaded whenever one of its errors exists
    if psycopg is None or not isinstance(driver_error, psycopg.Error):
        return False
    state = driver_error.sqlstate
    if state is None:
        return isinstance(driver_error, psycopg.OperationalError | psycopg.InterfaceError)
    return bool(state.startswith("08") or state in _LOST_STATES)


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


class Database:
    """Any SQLAlchemy database holding the store's tables, opened safely by several processes.

    The schema is created idempotently (under a lock file for SQLite), and writes on SQLite begin
    immediately. The read path's fixed statements skip SQLAlchemy (:meth:`fixed_rows`): a SQLite
    file gets a per-thread raw read-only connection, PostgreSQL a pool of autocommit connections.
    """

    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self.url = url
        # what a SQL span says of the database (the OTel name; never a path, host or credentials)
        self._span = {"db.system.name": parsed.get_backend_name()}  # sqlite, postgresql, ...
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
            # a pooled connection is checked before use, so one left dead by a database restart is
            # replaced rather than failing the call that drew it
            self.engine = self._writer = create_engine(url, pool_pre_ping=True)
        # PostgreSQL's fixed reads skip the transaction a pooled connection wraps each read in
        # (BEGIN, SELECT, ROLLBACK); see fixed_rows
        self._autocommit: Engine | None = None
        if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg":
            self._autocommit = create_engine(url, isolation_level="AUTOCOMMIT")
        try:
            self._create_schema()
        except OperationalError as error:  # a new SQLite file cannot even take its header
            if not says_full(error):
                raise
            raise disk_full(self._sqlite_file or self._where(), "creating the SQL schema", error) from error
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []

    def _create_schema(self) -> None:
        """Bring the schema to the migrations' head (``store/migrations``); SQLite under its lock file."""
        if self._sqlite_file is not None:
            with FileLock(f"{self._sqlite_file}.lock"):
                upgrade(self._writer)
            return
        upgrade(self._writer)  # PostgreSQL: under an advisory lock

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction on a Core connection, for the hot write path (``stage``).

        Like ``session(write=True)`` without the ORM session's per-statement machinery: with
        prebuilt statements, staging one ``add`` went from 1.7 ms to 0.6 ms (measured here), most of
        what ``add`` cost beyond encoding.
        """
        try:
            with self._writer.begin() as connection:
                yield connection
        except Exception as error:
            failure = self._failure(error)
            if failure is None:
                raise
            raise failure from error

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[Session]:
        """A session that commits on success and rolls back on error.

        ``write=True`` on SQLite takes the database's write lock up front (see ``_begin_immediate``).
        A database that stays locked past the busy timeout, or fails at the driver, raises
        :class:`StoreError` (:class:`StoreUnavailableError` for a lost or refused connection);
        integrity errors pass through for the callers that expect them.
        """
        try:
            with (
                step("sql", {**self._span, "personamem.sql.write": write}),
                Session(self._writer if write else self.engine, expire_on_commit=False) as session,
            ):
                try:
                    yield session
                    session.commit()
                except BaseException:
                    session.rollback()  # on a lost connection this fails too, as lost
                    raise
        except Exception as error:
            failure = self._failure(error)
            if failure is None:
                raise
            raise failure from error

    def _where(self) -> str:
        return str(self._sqlite_file) if self._sqlite_file else make_url(self.url).render_as_string()

    def _failure(self, error: Exception) -> StoreError | None:
        """The :class:`StoreError` a failed transaction raises instead of ``error``; None: ``error`` itself.

        A lost or refused connection is :class:`StoreUnavailableError` (retry later), raw psycopg
        errors included (pgvector's statements run on the driver's connection); a full disk is
        :class:`~personamem.errors.DiskFullError`; integrity and other errors pass through for the
        callers that expect them.
        """
        if connection_lost(error):
            return self._unavailable(error)
        if says_full(error) or self._io_error_for_want_of_space(error):
            return disk_full(self._sqlite_file or self._where(), "a write to the SQL database", error)
        if isinstance(error, OperationalError):
            return StoreError(f"the SQL database {self._where()} failed: {error.orig}")
        return None

    def _io_error_for_want_of_space(self, error: Exception) -> bool:
        """SQLite's "disk I/O error" on a nearly full filesystem: a full disk, named as such."""
        return self._sqlite_file is not None and sqlite_io_error(error) and low_on_space(self._sqlite_file)

    def _unavailable(self, error: Exception) -> StoreUnavailableError:
        reason = error.orig if isinstance(error, DBAPIError) else error
        return StoreUnavailableError(f"the SQL database {self._where()} is unavailable: {reason}")

    def _revision_reader(self) -> sqlite3.Connection | None:
        """This thread's raw read-only connection to the SQLite file; None for other databases.

        Outside a transaction each SELECT on it sees the latest commit, so writes from other
        processes are never missed, at a fraction of a pooled SQLAlchemy connection's cost.
        """
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

    def fixed_rows(self, statement: str, params: Sequence[Any]) -> list[Any] | None:
        """Rows of one fixed statement (``?`` placeholders) on the fast read path; None where there is none.

        SQLite: this thread's raw reader (:meth:`_revision_reader`). PostgreSQL (psycopg): a pooled
        autocommit connection, used raw: a pooled SQLAlchemy read wraps each SELECT in BEGIN and
        ROLLBACK, and the round trips made a PostgreSQL search's two state reads cost 4 ms where
        SQLite's took 0.25 ms (measured by ``bench/postgres_alone.py``). One statement outside a
        transaction still sees one snapshot of the latest commits.
        """
        reader = self._revision_reader()
        if reader is None and self._autocommit is None:
            return None
        with step("sql", {**self._span, "personamem.sql.write": False}):
            if reader is not None:
                return reader.execute(statement, params).fetchall()
            return self._autocommit_rows(statement, params)

    def _autocommit_rows(self, statement: str, params: Sequence[Any], *, retry: bool = True) -> list[Any]:
        """:meth:`fixed_rows` on a pooled autocommit connection.

        A pooled connection found dead (the server restarted since it was made) is dropped with the
        pool's others, and the read runs once more on a fresh one: cheaper than pinging before every
        read, which would add a round trip to each search.

        Raises:
            StoreUnavailableError: no connection could be made, or the fresh one was lost too.
        """
        engine = self._autocommit
        assert engine is not None
        try:
            with engine.connect() as connection:
                raw = connection.connection.driver_connection
                assert raw is not None
                try:
                    return list(raw.execute(statement.replace("?", "%s"), params).fetchall())
                except Exception as error:
                    if connection_lost(error):
                        connection.invalidate()  # not back into the pool
                    raise
        except Exception as error:
            if not connection_lost(error):
                raise
            if not retry or isinstance(error, DBAPIError):  # a DBAPIError here: connecting failed
                raise self._unavailable(error) from error
        engine.dispose()
        return self._autocommit_rows(statement, params, retry=False)

    def _vacuum(self) -> None:
        """On SQLite, rewrite the file and empty the WAL, so deleted bytes leave the disk."""
        if self._sqlite_file is not None:
            vacuum_sqlite(self._sqlite_file, wal=True)

    def close(self) -> None:
        """Release pooled connections and the revision readers."""
        for reader in self._readers:
            reader.close()
        self._readers.clear()
        self._local = threading.local()
        self.engine.dispose()
        self._writer.dispose()
        if self._autocommit is not None:
            self._autocommit.dispose()
