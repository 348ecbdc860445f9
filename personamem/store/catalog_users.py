"""The ``users`` table's bookkeeping: each user's row, its status and the tokens writes renew.

A user's row is what a write locks and a forget marks: ``status`` says whether a forget is under way,
``revision`` changes on every write (per-user caches are valid for one; :func:`appended_to` tells the
writes that only appended records, after which a cache may grow instead), ``index_token`` names the
current view of the vector index and ``bounds_token`` is set while the user has a bounded record
(``timeline.py``). Writes take the row in their own transaction (:func:`ensure_user`); the token
reads run on every cache lookup and search, so they skip SQLAlchemy where the database allows.
"""

from __future__ import annotations

import uuid

from sqlalchemy import ColumnElement, Connection, String, bindparam, func, literal, update
from sqlalchemy import select as select_columns  # sqlmodel's select takes at most four columns
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import Session, col, select

from personamem.errors import UserBeingForgottenError
from personamem.store.engine import Database
from personamem.store.tables import USER_STATUS, UserRow, UserStatus

__all__ = ["APPENDED_REVISION", "UserRows", "appended", "appended_to", "bump_revision", "ensure_user"]

_REWRITE = 32  # characters of a revision that only a write other than an append changes (a uuid's hex)


def _grown(suffix: ColumnElement[str]) -> ColumnElement[str]:
    return func.substr(col(UserRow.revision), 1, _REWRITE, type_=String()) + suffix


APPENDED_REVISION = _grown(bindparam("appended", type_=String()))
"""The revision a write that only appended records gives its user: the part that names the user's last
other write (deleted, updated, superseded, relabelled, re-keyed records), then ``.`` and a fresh token,
bound as ``appended`` (:func:`appended`). Every other write sets a fresh uuid, so a path not known to
be an append changes the whole revision: it costs a cache a rebuild, never a stale value."""


def appended() -> str:
    """A fresh value for :data:`APPENDED_REVISION`'s ``appended``."""
    return "." + uuid.uuid4().hex


def appended_to(before: str, after: str) -> bool:
    """Whether revision ``after`` was reached from ``before`` by appends alone (records only added).

    Then the user's records at ``before`` are, unchanged, the first of those at ``after``, in the same
    order: a value built at ``before`` can be grown by the records stored since, not built again.
    """
    return bool(before) and before[:_REWRITE] == after[:_REWRITE] and len(after) > _REWRITE


# fixed statements of every write, built once: built and coerced per call they made one add's
# staging 1.1 ms instead of 0.6 ms (measured here), more than running them costs
_INSERT_USER = {  # executed with the row's columns as parameters
    "sqlite": sqlite.insert(UserRow).on_conflict_do_nothing(),
}  # PostgreSQL upserts instead (_UPSERT_USER_PG): it returns and locks the row in the same round trip
_USER_STATE = select_columns(col(UserRow.status), col(UserRow.index_token)).where(
    col(UserRow.user_id) == bindparam("user_id")
)
_PG_USER = postgresql.insert(UserRow)
_UPSERT_USER_PG = (  # a no-op update, so an existing row is locked and returned
    _PG_USER.on_conflict_do_update(
        index_elements=["user_id"], set_={"user_id": _PG_USER.excluded.user_id}
    ).returning(col(UserRow.status), col(UserRow.index_token))
)


def ensure_user(s: Connection, user_id: str) -> str | None:
    """Insert the user's row unless another writer (in any process) already did; its index token.

    The row is the transaction's from here (PostgreSQL: locked by the upsert; SQLite: the
    immediate transaction holds the database), so the token stays current until the commit.

    Raises:
        UserBeingForgottenError: the user is being forgotten; the write must wait for the forget.
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


def bump_revision(
    s: Session | Connection, user_id: str, *, index_token: str | None = None, appended_only: bool = False
) -> None:
    """A fresh revision; and a given index token when the user's indexed vectors changed.

    ``appended_only``: the write only added records, or changed none (:data:`APPENDED_REVISION`).
    """
    revision = _grown(literal(appended(), String())) if appended_only else uuid.uuid4().hex
    values = {"revision": revision} | ({"index_token": index_token} if index_token else {})
    s.execute(update(UserRow).where(col(UserRow.user_id) == user_id).values(**values))


class UserRows:
    """Reads of the ``users`` table: a user's tokens, and the users repair and checks visit."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def revision(self, user_id: str) -> str | None:
        """The user's current write token, None for an unknown user.

        Read on every per-user cache lookup (BM25, P-Anchor), so it must cost far less than encoding
        the query. A fixed statement outside SQLAlchemy (``Database.fixed_rows``; on SQLite ~6 µs,
        against ~100 µs for a pooled SQLAlchemy connection): outside a transaction each SELECT sees
        the latest commit, so writes from other processes are never missed.
        """
        # fetchall steps the statement to its end, so no read snapshot outlives the call
        rows = self._db.fixed_rows("SELECT revision FROM users WHERE user_id = ?", (user_id,))
        if rows is not None:
            return str(rows[0][0]) if rows else None
        with self._db.engine.connect() as connection:
            return connection.execute(
                select(UserRow.revision).where(col(UserRow.user_id) == user_id)
            ).scalar_one_or_none()

    def bounds_token(self, user_id: str) -> str | None:
        """The user's bounds token (None: no bounded record, or no user); read like :meth:`revision`."""
        rows = self._db.fixed_rows("SELECT bounds_token FROM users WHERE user_id = ?", (user_id,))
        if rows is not None:
            return rows[0][0] if rows else None
        with self._db.engine.connect() as connection:
            return connection.execute(
                select(UserRow.bounds_token).where(col(UserRow.user_id) == user_id)
            ).scalar_one_or_none()

    def being_forgotten(self) -> list[str]:
        """Users whose forget was interrupted."""
        with self._db.session() as s:
            return list(s.exec(select(UserRow.user_id).where(UserRow.status == UserStatus.FORGETTING.value)))

    def all_users(self) -> list[str]:
        """Every user row, active or not (for consistency checks)."""
        with self._db.session() as s:
            return list(s.exec(select(UserRow.user_id)))
