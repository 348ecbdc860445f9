"""``PersonaMem``: the facade a chatbot backend talks to.

One object per process, shared across threads: it owns the store and one retriever per method.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from personamem.encoder import Encoder
from personamem.errors import InvalidRecordError
from personamem.records import Record, parse_record
from personamem.retrieval import BM25Retriever, DenseRetriever, Hit, HybridRetriever, Retriever
from personamem.store import Store

__all__ = ["PersonaMem", "SearchMethod"]


class SearchMethod(StrEnum):
    """First-stage retrieval methods."""

    DENSE = "dense"
    BM25 = "bm25"
    HYBRID = "hybrid"


class PersonaMem:
    """Per-user memory: add what users said or did, search it per user, forget users.

    Example:
        >>> with PersonaMem.open("~/.personamem") as mem:  # doctest: +SKIP
        ...     mem.add("alice", "I'm vegetarian and allergic to peanuts.", kind="knowledge")
        ...     hits = mem.search("alice", "what should I cook tonight?", k=3)
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        dense = self._dense = DenseRetriever(store)
        bm25 = BM25Retriever(store)
        self._retrievers: dict[SearchMethod, Retriever] = {
            SearchMethod.DENSE: dense,
            SearchMethod.BM25: bm25,
            SearchMethod.HYBRID: HybridRetriever([dense, bm25]),
        }

    @classmethod
    def open(cls, path: str | Path, *, encoder: Encoder | None = None) -> PersonaMem:
        """Memory in a local folder (SQLite and an embedded Chroma); created if missing."""
        return cls(Store.open(path, encoder=encoder))

    @classmethod
    def connect(
        cls,
        sql_url: str,
        *,
        chroma_url: str | None = None,
        chroma_path: str | Path | None = None,
        encoder: Encoder | None = None,
    ) -> PersonaMem:
        """Memory on a SQLAlchemy database (e.g. Postgres) and a Chroma server or folder."""
        return cls(Store.connect(sql_url, chroma_url=chroma_url, chroma_path=chroma_path, encoder=encoder))

    def __enter__(self) -> PersonaMem:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release connections; the data stays on disk."""
        self.store.close()

    # -- writes ---------------------------------------------------------------------------------

    def add(self, user_id: str, text: str = "", **fields: Any) -> Record:
        """Remember one record of ``user_id``; returns it with its id.

        ``fields`` are :class:`~personamem.records.Record` fields (``id``, ``kind``, ``category``,
        ``timestamp``, ``metadata``, ``input``, ``output``). Adding the same record again is a no-op.
        """
        record = parse_record({"user_id": user_id, "text": text, **fields})
        self.store.add_many([record])
        return record

    def add_many(
        self,
        records: Iterable[Record | Mapping[str, Any]],
        *,
        user_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Record]:
        """Remember many records; all are validated before any is written.

        Args:
            records: records, or dicts with Record fields.
            user_id: owner of records that name none (a record naming another user is an error).
            progress: called with the count of records finished after each durable batch.

        Raises:
            InvalidRecordError: naming the position of the first bad record; nothing was written.
        """
        parsed = []
        for position, item in enumerate(records):
            try:
                if isinstance(item, Record):
                    if user_id is not None and item.user_id != user_id:
                        raise InvalidRecordError(f"record is for user {item.user_id!r}, not {user_id!r}")
                    parsed.append(item)
                else:
                    parsed.append(parse_record(dict(item), default_user=user_id))
            except InvalidRecordError as exc:
                raise InvalidRecordError(f"record {position}: {exc}") from None
        self.store.add_many(parsed, progress=progress)
        return parsed

    def forget(self, user_id: str) -> bool:
        """Erase the user: records, vectors and cached derived data. False if unknown."""
        return self.store.forget(user_id)

    # -- reads ------------------------------------------------------------------------------------

    def search(
        self, user_id: str, query: str, k: int = 5, method: SearchMethod | str = SearchMethod.DENSE
    ) -> list[Hit]:
        """The user's top ``k`` records for ``query``; an unknown user gets an empty list."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        try:
            chosen = SearchMethod(method)
        except ValueError:
            known = ", ".join(m.value for m in SearchMethod)
            raise ValueError(f"unknown search method {method!r}; choose one of: {known}") from None
        return self._retrievers[chosen].search(user_id, query, k)

    def search_vector(self, user_id: str, vector: np.ndarray, k: int = 5) -> list[Hit]:
        """The user's top ``k`` records for a ready query vector (e.g. a personalized one from PBR).

        The vector must come from the store's encoder space (``self.store.encoder``).
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        dim = self.store.encoder.dim
        if vector.shape != (dim,):
            raise ValueError(f"vector must have shape ({dim},), got {vector.shape}")
        return self._dense.search_vector(user_id, vector, k)

    def get(self, user_id: str, record_id: str) -> Record | None:
        """The user's record with this id, or None."""
        return self.store.get(user_id, record_id)

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records, in insertion order."""
        return self.store.records(user_id)

    def users(self) -> list[str]:
        """Users with at least one record."""
        return self.store.users()

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of all users."""
        return self.store.count(user_id)
