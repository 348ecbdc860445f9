"""Values derived from a user's data by an expensive step, kept in SQL with the user's records.

PBR's pseudo utterances and the preference memory live in the ``derived`` table
(:class:`~personamem.store.tables.DerivedRow`): its ``user_id`` column makes ``forget`` erase them,
and deleting any of the user's records drops them all, since an LLM's output may quote that record.
Only active users get entries, so a forget in progress cannot be refilled behind its back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from personamem.errors import DiskFullError
from personamem.store.engine import Database
from personamem.store.tables import DerivedRow, UserRow, UserStatus

__all__ = ["DerivedValues", "derive"]


class DerivedValues(Database):
    """The ``derived`` table's reads and writes, keyed by (user, namespace, key)."""

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
                if not _active(s, user_id):
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
            if not _active(s, user_id):
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

    @staticmethod
    def _drop_derived(s: Session, user_id: str) -> None:
        """Every derived value of the user, in the caller's transaction (a record was deleted)."""
        s.execute(delete(DerivedRow).where(col(DerivedRow.user_id) == user_id))


def derive(
    values: DerivedValues,
    namespace: str,
    requests: Sequence[tuple[str, str]],
    compute: Callable[[list[int]], Sequence[Any]],
) -> list[Any]:
    """The values of (store key, key) pairs in ``namespace``, computing and keeping the uncached ones.

    ``compute(missing)`` gets the positions of the uncached pairs and returns their values in that
    order, so one batched LLM call fills them. On a full disk they are returned but not kept: the
    read that asked still answers.
    """
    found = [values.get_derived(user_id, namespace, key) for user_id, key in requests]
    missing = [i for i, value in enumerate(found) if value is None]
    if missing:
        for i, value in zip(missing, compute(missing), strict=True):
            user_id, key = requests[i]
            with contextlib.suppress(DiskFullError):
                values.put_derived(user_id, namespace, key, value)
            found[i] = value
    return found


def _active(s: Session, user_id: str) -> bool:
    user = s.get(UserRow, user_id)
    return user is not None and user.status == UserStatus.ACTIVE.value
