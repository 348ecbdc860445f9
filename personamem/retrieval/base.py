"""What every retriever returns and the one method it has."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from personamem.records import Record
from personamem.store.read import NOW, Read

__all__ = ["Hit", "Preparable", "Retriever", "ranked"]


@dataclass(frozen=True)
class Hit:
    """A retrieved record with its score under the method that found it and its 1-based rank."""

    record: Record
    score: float
    rank: int


@runtime_checkable
class Retriever(Protocol):
    """Finds a user's records for a query; never returns another user's records."""

    def search(self, user_id: str, query: str, k: int, read: Read = NOW) -> list[Hit]:
        """The user's top ``k`` records for ``query``, best first, of those ``read`` sees.

        ``read`` is the call's time and filter (:class:`~personamem.store.read.Read`); a retriever
        over the store passes it to the store's reads (``Store.nearest``, ``Store.hidden``).
        """
        ...


@runtime_checkable
class Preparable(Protocol):
    """A retriever (or personalizer) whose per-query work, such as LLM calls, is cheaper in bulk."""

    def prepare(self, requests: Sequence[tuple[str, str]]) -> None:
        """Do and cache the expensive work for these (user id, query) pairs ahead of ``search``."""
        ...


def ranked(scored: list[tuple[Record, float]]) -> list[Hit]:
    """Hits from (record, score) pairs already sorted best first."""
    return [Hit(record=record, score=score, rank=i) for i, (record, score) in enumerate(scored, start=1)]
