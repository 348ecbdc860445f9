"""The SQL of the interaction log: logged calls and their feedback, per user key.

:class:`~personamem.store.interaction_log.InteractionLog` is the per-tenant view over these
methods. Rows are per-user data (:class:`~personamem.store.tables.InteractionRow`): ``forget``
erases them with the user, and deleting records takes them out of the rows that mention them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from personamem.errors import InvalidInputError
from personamem.store.engine import Database, chunks
from personamem.store.tables import USER_STATUS, InteractionRow, UserRow, UserStatus

__all__ = ["InteractionTable"]

_INSERT_INTERACTION = InteractionRow.__table__.insert()  # type: ignore[attr-defined]
_BY_ID = select(InteractionRow)


class InteractionTable(Database):
    """The ``interactions`` table's reads and writes."""

    def log_interactions(self, rows: Sequence[dict[str, Any]]) -> int:
        """Insert the interactions of active users in one transaction; return how many were kept.

        Users are checked inside the transaction, so a user forgotten (or never stored) by the time
        the rows are written gets none: ``forget`` could not find them by the user's row.
        """
        with self.transaction() as s:  # the interaction writer's path: Core, like ``stage``
            users = {row["user_id"] for row in rows}
            active = {
                user
                for user in users
                if s.execute(USER_STATUS, {"user_id": user}).scalar() == UserStatus.ACTIVE.value
            }
            kept = [row for row in rows if row["user_id"] in active]
            if kept:
                s.execute(_INSERT_INTERACTION, kept)
        return len(kept)

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
            for chunk in chunks(ids):
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

    def drop_interactions(self, before: str) -> int:
        """Delete the interactions logged before ``before`` (ISO 8601, UTC); return how many went."""
        with self.transaction() as s:
            table = InteractionRow.__table__  # type: ignore[attr-defined]
            return int(s.execute(table.delete().where(table.c.time < before)).rowcount)

    def interaction_user(self, interaction_id: str) -> str | None:
        """The user key of a logged call (None: no such call)."""
        with self.session() as s:
            found = s.exec(
                select(InteractionRow.user_id).where(InteractionRow.interaction_id == interaction_id)
            ).first()
        return found

    def interleaved(self, interaction_id: str) -> InteractionRow | None:
        """The logged call, where it was served interleaved and is not credited yet (None otherwise)."""
        with self.session() as s:
            row = s.exec(_BY_ID.where(InteractionRow.interaction_id == interaction_id)).first()
        if row is None or row.interleaving is None or row.interleaving.get("outcome") is not None:
            return None
        return row

    def set_outcome(self, interaction_id: str, outcome: str | None) -> None:
        """Record an interleaved call's outcome for the candidate (None: the answer used nothing served)."""
        with self.session(write=True) as s:
            row = s.exec(_BY_ID.where(InteractionRow.interaction_id == interaction_id)).first()
            if row is not None and row.interleaving is not None:
                row.interleaving = {**row.interleaving, "outcome": outcome}
                s.add(row)

    def outcomes(self, trial: str) -> list[str]:
        """The outcomes counted for a trial so far (``win``, ``loss``, ``tie``)."""
        with self.session() as s:
            column = col(InteractionRow.interleaving)
            rows = s.exec(select(column).where(column.is_not(None)))
            return [
                found["outcome"]
                for found in rows
                if found is not None and found.get("trial") == trial and found.get("outcome")
            ]

    def reported_since(self, after: str | None) -> list[str]:
        """The user key of each call reported on after ``after`` (ISO 8601, UTC; None: ever)."""
        with self.session() as s:
            column = col(InteractionRow.feedback_time)
            stmt = select(InteractionRow.user_id).where(column.is_not(None))
            return list(s.exec(stmt if after is None else stmt.where(column > after)))

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
            for chunk in chunks(list(user_ids)):
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
            interleaving = row.interleaving
            if interleaving is not None:  # the outcome stays: it counts for the trial, names nothing
                teams = {rid: team for rid, team in interleaving["teams"].items() if rid not in deleted}
                interleaving = {**interleaving, "teams": teams}
            changed = (results, used, interleaving) != (row.results, row.used, row.interleaving)
            if changed or row.trace is not None:
                row.results, row.used, row.trace, row.interleaving = results, used, None, interleaving
                s.add(row)
