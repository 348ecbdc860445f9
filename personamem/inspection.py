"""What the server, MCP and the inspector read of a memory besides the records: ``mem.inspection``.

Reads that no other surface offers (they are not :class:`~personamem.contract.MemoryApi`'s), so a
surface reaches the store only through the facade.
"""

from __future__ import annotations

from typing import Any

from personamem.interactions import Interaction
from personamem.preference import PreferenceMemory
from personamem.records import check_user_id
from personamem.serving import Serving
from personamem.store import KeyRing, Store

__all__ = ["Inspection"]


class Inspection:
    """Reads of a memory's store beside the records: tenant, keys, counts, logged calls, stored memories."""

    def __init__(self, store: Store, serving: Serving) -> None:
        self._store = store
        self._serving = serving

    @property
    def tenant_name(self) -> str | None:
        """The tenant this memory serves (a view from ``PersonaMem.tenant``); None for the whole store."""
        return self._store.tenant

    @property
    def keys(self) -> KeyRing:
        """The API keys kept in the store's database (each names its tenant)."""
        return self._store.keys

    def record_counts(self) -> dict[str, int]:
        """Records per user, for the users with any."""
        return self._store.count_by_user()

    def last_calls(self) -> dict[str, str]:
        """The time of each user's latest logged call (ISO 8601, UTC), for the users with any."""
        return self._store.last_calls()

    def calls(self, user_id: str, *, limit: int = 100) -> list[dict[str, Any]]:
        """The user's latest ``limit`` logged calls, newest first, with feedback and the LLM's view."""
        return self._store.interactions.calls(check_user_id(user_id), limit=limit)

    def interactions(self, user_id: str | None = None) -> list[Interaction]:
        """Logged interactions of one user (None: every user), oldest first, with their feedback."""
        users = None if user_id is None else [check_user_id(user_id)]
        return self._store.interactions.export(users)

    def interaction_user(self, interaction_id: str) -> str | None:
        """The user of a logged call of this memory (None: no such call), e.g. to check who reports on it."""
        return self._store.interactions.owner(interaction_id)

    def stored_memory(self, user_id: str) -> PreferenceMemory:
        """The user's preference memory as last built, without building one (no LLM call).

        ``stale`` as :meth:`~personamem.preference.PreferenceMemories.stored` says: the records
        changed since, or the user has records and no memory yet.

        Raises:
            MethodError: no preference memory is configured (as ``PersonaMem.memory``).
        """
        return self._serving.preference_memories().stored(check_user_id(user_id))
