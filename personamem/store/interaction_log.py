"""The store's side of the interaction log: rows in SQL, mapped to and from one view's user ids.

The rows live in the ``interactions`` table beside the records (``store/sql.py``), keyed by the same
user keys, so a tenant sees only its own users' interactions and ``forget`` erases them with the user.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from personamem.errors import InvalidInputError
from personamem.interactions import Call, Feedback, FeedbackReport, Interaction, LoggedResult
from personamem.settings import settings
from personamem.store.interaction_writer import InteractionWriter
from personamem.store.sql import InteractionRow, SqlCatalog
from personamem.store.tenants import Tenancy

__all__ = ["INTERACTION_DAYS", "InteractionLog", "retention_cutoff"]

INTERACTION_DAYS = 30.0
"""How long a logged call is kept by default (``PERSONAMEM_INTERACTION_DAYS`` overrides): long enough
for ``improve`` to learn from a month of traffic, short enough that old queries do not pile up."""

# another process (a server's other worker) may still be writing the row a report names: look again
# a few times before saying there is no such interaction (0.75 s in all, on that error path only)
_STRAGGLER_WAITS = (0.0, 0.05, 0.1, 0.2, 0.4)
_T = TypeVar("_T")


def _written(look: Callable[[], _T | None]) -> _T | None:
    """What ``look`` finds, looking again through :data:`_STRAGGLER_WAITS` while it finds nothing."""
    for wait in _STRAGGLER_WAITS:
        time.sleep(wait)
        found = look()
        if found is not None:
            return found
    return None


def retention_cutoff() -> str:
    """The time (ISO 8601, UTC) before which logged calls are past the retention window."""
    days = settings().interaction_days or INTERACTION_DAYS
    return (datetime.now(UTC) - timedelta(days=days)).isoformat()


class InteractionLog:
    """Log calls, attach feedback, export and import, for the users one view of the store sees."""

    def __init__(self, catalog: SqlCatalog, tenancy: Tenancy, writer: InteractionWriter) -> None:
        self._catalog = catalog
        self._tenancy = tenancy
        self._writer = writer

    def log(
        self,
        user_id: str,
        call: Call,
        method: str,
        query: str,
        results: Sequence[tuple[str, float]],
        trace: dict[str, Any] | None = None,
        interleaving: dict[str, Any] | None = None,
    ) -> str | None:
        """Record one call; its interaction id, or None for a user with no records (nothing to key it by).

        ``trace`` is what the call showed the LLM (a context's text, timings, warnings, usage), kept for
        the inspector (:meth:`calls`) and not part of the exchange format; ``interleaving``, on a call
        served interleaved, the trial and the team of each record (``personamem/interleaving.py``).
        The row is written by the store's :class:`InteractionWriter`, off the call's path.
        """
        key = self._tenancy.key(user_id)
        if self._catalog.revision(key) is None:
            return None
        interaction_id = uuid.uuid4().hex
        self._writer.submit(
            {
                "interaction_id": interaction_id,
                "user_id": key,
                "call": call,
                "method": method,
                "query": query,
                "results": [[record_id, round(float(score), 6)] for record_id, score in results],
                "time": datetime.now(UTC).isoformat(),
                "trace": trace,
                "interleaving": interleaving,
            }
        )
        return interaction_id

    def calls(self, user_id: str, *, limit: int = 100) -> list[dict[str, Any]]:
        """The user's latest ``limit`` logged calls, newest first, with feedback and traces (for ``/ui``)."""
        self._writer.flush()
        rows = self._catalog.interactions([self._tenancy.key(user_id)])[-limit:]
        out = []
        for row in reversed(rows):
            item = self._public(row)
            if item is not None:
                out.append({**item.model_dump(mode="json"), "trace": row.trace})
        return out

    def feedback(self, report: FeedbackReport) -> None:
        """Attach what happened after the call; fields left None keep what was reported before.

        The report was validated when it was made (:meth:`FeedbackReport.of`); here it only has to
        name an interaction this view sees.

        Raises:
            InvalidInputError: no such interaction in this view.
        """
        self._writer.flush()
        changes: dict[str, Any] = {"feedback_time": datetime.now(UTC).isoformat()}
        if report.answer is not None:
            changes["answer"] = report.answer
        if report.rating is not None:
            changes["rating"] = report.rating
        if report.used_record_ids is not None:
            changes["used"] = report.used_record_ids
        if not _written(lambda: self._catalog.feedback(report.interaction_id, self._owns, changes) or None):
            raise InvalidInputError(
                f"no interaction {report.interaction_id!r} (logging off, or the user was forgotten?)"
            )

    def owner(self, interaction_id: str) -> str | None:
        """The user of a logged call this view sees (None: no such call here).

        Waits for a row another process may still be writing, as :meth:`feedback` does.
        """
        self._writer.flush()
        key = _written(lambda: self._catalog.interaction_user(interaction_id))
        return None if key is None else self._tenancy.user(key)

    def export(self, user_ids: Sequence[str] | None = None) -> list[Interaction]:
        """The interactions of these users (None: every user this view sees), oldest first."""
        self._writer.flush()
        keys = None if user_ids is None else [self._tenancy.key(u) for u in user_ids]
        return [item for row in self._catalog.interactions(keys) if (item := self._public(row)) is not None]

    def import_(self, interactions: Sequence[Interaction]) -> int:
        """Store exported interactions in one transaction, skipping ids already here; returns the new count.

        Raises:
            InvalidInputError: an interaction's user has no records in this store (nothing is written).
        """
        return self._catalog.import_interactions([self._row(item) for item in interactions])

    def _owns(self, key: str) -> bool:
        return self._tenancy.user(key) is not None

    def _public(self, row: InteractionRow) -> Interaction | None:
        user = self._tenancy.user(row.user_id)
        if user is None:
            return None
        feedback = None
        if row.feedback_time is not None:
            feedback = Feedback(
                answer=row.answer,
                rating=row.rating,
                used_record_ids=row.used,
                time=datetime.fromisoformat(row.feedback_time),
            )
        return Interaction(
            id=row.interaction_id,
            user_id=user,
            call=row.call,  # type: ignore[arg-type]
            method=row.method,
            query=row.query,
            time=datetime.fromisoformat(row.time),
            results=[LoggedResult(record_id=r, score=s) for r, s in row.results],
            feedback=feedback,
        )

    def _row(self, item: Interaction) -> dict[str, Any]:
        feedback = item.feedback or Feedback()
        return {
            "interaction_id": item.id,
            "user_id": self._tenancy.key(item.user_id),
            "call": item.call,
            "method": item.method,
            "query": item.query,
            "results": [[r.record_id, r.score] for r in item.results],
            "time": item.time.isoformat(),
            "answer": feedback.answer,
            "rating": feedback.rating,
            "used": feedback.used_record_ids,
            "feedback_time": None if item.feedback is None else (feedback.time or item.time).isoformat(),
        }
