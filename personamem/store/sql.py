"""The store's catalog: records and users in SQL, the source of truth for the write protocol.

:class:`SqlCatalog` is the database (``engine.py``) with the derived values (``derived.py``), the
interaction log's table (``interaction_table.py``) and the records' events (``history.py``) mixed
in. It keeps the store's facts and waits out concurrent forgets itself, and hands the rest to one
collaborator each: staging and marking indexed (``catalog_staging.py``, the protocol ``store.py``
numbers), deletes and forgets (``catalog_erasure.py``), the record reads (``catalog_reads.py``) and
the users' rows and tokens (``catalog_users.py``). The tables are in ``tables.py``; their names, and
the collaborators' types callers name, stay importable from here.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from sqlalchemy import Connection, delete, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from personamem.errors import UserBeingForgottenError
from personamem.records import EventKind, Record
from personamem.store.catalog_erasure import SqlErasure
from personamem.store.catalog_reads import RecordReads, SearchState
from personamem.store.catalog_staging import InDatabaseIndex, IndexedUser, Staging
from personamem.store.catalog_users import UserRows, bump_revision
from personamem.store.derived import DerivedValues
from personamem.store.history import EventTable
from personamem.store.interaction_table import InteractionTable
from personamem.store.pseudonyms import Pseudonyms
from personamem.store.tables import (
    DerivedRow,
    InteractionRow,
    RecordRow,
    RecordStatus,
    StoreInfo,
    UserRow,
    UserStatus,
    is_bounded,
)
from personamem.store.timeline import Timeline

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


class SqlCatalog(DerivedValues, InteractionTable, EventTable):
    """Records and users in any SQLAlchemy database; every query names the user it reads.

    Safe for several processes over one database: besides :class:`~personamem.store.engine.Database`'s
    guarantees, user rows are inserted-or-ignored. The methods the collaborators answer are kept
    here as delegators, so callers (and tests that wrap them on the class) see one catalog.
    """

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._staging = Staging(self)
        self._erasure = SqlErasure(self)
        self._reads = RecordReads(self)
        self._user_rows = UserRows(self)

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

    def set_info(self, key: str, value: str | None, also: Callable[[Session], None] | None = None) -> None:
        """Store a fact, replacing any stored value; None removes it.

        ``also`` writes what the change entails in its transaction (a webhook event: ``outbox.py``).
        """
        with self.session(write=True) as s:
            s.execute(delete(StoreInfo).where(col(StoreInfo.key) == key))
            if value is not None:
                s.add(StoreInfo(key=key, value=value))
            if also is not None:
                s.flush()
                also(s)

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
                    bump_revision(s, user_id)
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
                return self._staging.stage(records, names, vectors, relabel, relabel_event, index)
            except UserBeingForgottenError as waiting:
                if time.monotonic() > deadline:
                    raise UserBeingForgottenError(
                        f"user {waiting.user_id!r} is still being forgotten after {FORGET_WAIT_S:g} s: "
                        "that forget was interrupted; reopen the store to finish it",
                        user_id=waiting.user_id,
                    ) from None
                time.sleep(0.02)

    def mark_indexed(
        self,
        user_id: str,
        records: Sequence[Record],
        write: Callable[[Connection], None] | None = None,
        vectors: np.ndarray | None = None,
    ) -> tuple[str | None, str] | None:
        """Close the write protocol for these records; the user's index token before and after.

        None when the user is gone or being forgotten (:meth:`Staging.mark_indexed`).
        """
        return self._staging.mark_indexed(user_id, records, write, vectors)

    # -- erasure ----------------------------------------------------------------------------------

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

        With their events' text, the user's derived values and logged traces; the rest of the
        user's rows go back to ``pending`` unless ``index`` is given (:meth:`SqlErasure.delete_records`).
        """
        return self._erasure.delete_records(user_id, record_ids, kept, names, event, index)

    def requeue(self, user_id: str, kept: tuple[list[str], np.ndarray]) -> None:
        """Put the user's indexed rows back to ``pending`` with their vectors, before a rebuild."""
        self._erasure.requeue(user_id, kept)

    def begin_forget(self, user_id: str) -> bool:
        """Mark the user as being forgotten; False if the user is unknown."""
        return self._erasure.begin_forget(user_id)

    def finish_forget(self, user_id: str, names: Pseudonyms) -> None:
        """Delete every row of the user in every table that has a ``user_id`` column, then vacuum."""
        self._erasure.finish_forget(user_id, names)

    # -- users ------------------------------------------------------------------------------------

    def revision(self, user_id: str) -> str | None:
        """The user's current write token, None for an unknown user (read on every cache lookup)."""
        return self._user_rows.revision(user_id)

    def bounds_token(self, user_id: str) -> str | None:
        """The user's bounds token (None: no bounded record, or no user)."""
        return self._user_rows.bounds_token(user_id)

    def users_being_forgotten(self) -> list[str]:
        """Users whose forget was interrupted."""
        return self._user_rows.being_forgotten()

    def all_users(self) -> Iterable[str]:
        """Every user row, active or not (for consistency checks)."""
        return self._user_rows.all_users()

    # -- reads ------------------------------------------------------------------------------------

    def users(self) -> list[str]:
        """Users with at least one record, sorted."""
        return self._reads.users()

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of everybody."""
        return self._reads.count(user_id)

    def count_by_user(self) -> dict[str, int]:
        """Records per user key (a tenant view sums the keys it owns)."""
        return self._reads.count_by_user()

    def get_many(self, user_id: str, record_ids: Sequence[str]) -> dict[str, Record]:
        """The user's records with these ids (missing ids are absent from the result)."""
        return self._reads.get_many(user_id, record_ids)

    def by_vector_ids(self, user_id: str, vector_ids: Sequence[str]) -> dict[str, Record]:
        """The user's records keyed by the vector ids asked for (every search ends here)."""
        return self._reads.by_vector_ids(user_id, vector_ids)

    def records_by_vector(self, user_id: str) -> dict[str, Record]:
        """All of the user's records keyed by vector id, in insertion order."""
        return self._reads.records_by_vector(user_id)

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records in insertion order."""
        return self._reads.records(user_id)

    def records_since(self, user_id: str, position: int) -> tuple[int, list[Record]]:
        """See :meth:`RecordReads.records_since`."""
        return self._reads.records_since(user_id, position)

    def vector_ids(self, user_id: str, status: RecordStatus | None = None) -> set[str]:
        """Vector ids of the user's records, optionally only those in one write state."""
        return self._reads.vector_ids(user_id, status)

    def pending(
        self, user_id: str | None = None, *, after: str | None = None, limit: int | None = None
    ) -> dict[str, list[tuple[Record, np.ndarray | None]]]:
        """See :meth:`RecordReads.pending`."""
        return self._reads.pending(user_id, after=after, limit=limit)

    def search_state(self, user_id: str) -> SearchState | None:
        """The user's index token and pending vectors, in one statement; None for an unknown user."""
        return self._reads.search_state(user_id)

    def kept_vectors(self, user_id: str) -> tuple[str | None, list[str], np.ndarray] | None:
        """See :meth:`RecordReads.kept_vectors`."""
        return self._reads.kept_vectors(user_id)

    def vectors_of(self, user_id: str, vector_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """See :meth:`RecordReads.vectors_of`."""
        return self._reads.vectors_of(user_id, vector_ids)

    def timeline(self, user_id: str) -> Timeline:
        """The user's bounded records (validity, expiry), for reads to filter by."""
        return self._reads.timeline(user_id)

    def expired(self, now: float) -> dict[str, list[str]]:
        """Ids of records whose expiry has passed, by user key (the sweep's work list)."""
        return self._reads.expired(now)
