"""BM25 over one user's records, the index built on first use, cached per revision and grown by appends.

bm25s tokenizes and selects the top ``k``; the index is :class:`~personamem.retrieval.postings.Postings`,
which scores as bm25s does but can take more records without indexing the old ones again.
"""

from __future__ import annotations

import importlib.abc
import logging
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType

import numpy as np

from personamem.records import Record
from personamem.retrieval.base import Hit, ranked
from personamem.retrieval.postings import Postings
from personamem.store import Store
from personamem.store.read import NOW, Read
from personamem.telemetry import staged

__all__ = ["BM25Retriever", "UserIndex", "tokenize"]


_UNUSED = ("numba", "tqdm.auto")
"""What bm25s imports, when it can, for what this module never runs: a numba backend (the numpy one
runs) and progress bars (every call passes ``show_progress=False``); 0.14 s of a one-shot CLI search."""


class _WithoutUnused(importlib.abc.MetaPathFinder):
    """Refuses the :data:`_UNUSED` modules to the thread importing bm25s, and to no other.

    bm25s falls back when they cannot be imported. A finder is asked only for a module not loaded
    yet, so one that another thread loaded is used as it is, and every other thread imports them
    as usual (hiding them in ``sys.modules`` instead failed another thread's import meanwhile).
    """

    importing = threading.local()

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name in _UNUSED and getattr(self.importing, "bm25s", False):
            raise ImportError(f"{name} is left out of bm25s here")


_FINDER = _WithoutUnused()


def _bm25s() -> ModuleType:
    """bm25s, imported on first use: it loads scipy (0.06 s), which a dense search never needs.

    Every query tokenizes through here, so the finder and the logger are set up by the first call
    alone.
    """
    if "bm25s" not in sys.modules:
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
        _FINDER.importing.bm25s = True
        try:
            import bm25s
        finally:
            _FINDER.importing.bm25s = False
        # bm25s pins its logger to DEBUG on import, so once anything installs a root handler (absl does,
        # via rouge-score) every index build prints a line; the application's logging config decides.
        logging.getLogger("bm25s").setLevel(logging.NOTSET)
    import bm25s  # loaded: the import waits for a thread still running bm25s's own

    return bm25s


def tokenize(texts: list[str]) -> list[list[str]]:
    """BM25's terms of each text (English stopwords out), as the index and its queries use them."""
    return _bm25s().tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


@dataclass(frozen=True)
class UserIndex:
    """One user's records (superseded ones too) and their BM25 index, as of one revision."""

    records: list[Record]
    postings: Postings
    tokens: list[list[str]]
    position: int
    """Where the last record read lies in the store (``Store.records_since``): the next ones follow it."""
    expires: datetime | None
    """The earliest expiry among the records: past it, a rebuild leaves that record out, so it rebuilds."""

    @classmethod
    def of(cls, position: int, records: list[Record]) -> UserIndex:
        """The index of ``records``, read up to store ``position``."""
        tokens = tokenize([r.text for r in records]) if records else []
        return cls(records, Postings.of(tokens), tokens, position, _first_expiry(records, None))

    def extended(self, position: int, records: list[Record]) -> UserIndex:
        """This index with ``records`` (read up to store ``position``) appended; ``self`` is unchanged."""
        tokens = tokenize([r.text for r in records]) if records else []
        return UserIndex(
            [*self.records, *records],
            self.postings.extended(tokens),
            [*self.tokens, *tokens],
            position,
            _first_expiry(records, self.expires),
        )

    def __len__(self) -> int:
        """The records indexed (the cache scales a grown index's size by it)."""
        return len(self.records)

    def scores(self, terms: list[str]) -> np.ndarray:
        """BM25 score of every record for a query's :func:`tokenize` ``terms`` (rows as :attr:`records`)."""
        return self.postings.scores(terms)


def _first_expiry(records: list[Record], since: datetime | None) -> datetime | None:
    """The earliest of ``since`` and ``records``' expiries (None: none expires)."""
    expiries = [r.expires_at for r in records if r.expires_at is not None]
    return min([*expiries, since] if since is not None else expiries, default=None)


class BM25Retriever:
    """Lexical retrieval; complements dense retrieval on names, numbers and rare words."""

    def __init__(self, store: Store, *, max_users: int | None = None) -> None:
        self.store = store
        self._indexes = store.user_cache(self._build, max_users=max_users, extend=self._extend)

    def index(self, user_id: str) -> UserIndex:
        """The user's records and BM25 index, built once per revision (the learned ranker reads it too)."""
        return self._indexes.get(user_id)

    def _build(self, user_id: str) -> UserIndex:
        return UserIndex.of(*self.store.records_since(user_id))

    def _extend(self, user_id: str, index: UserIndex) -> UserIndex | None:
        """``index`` with the records appended since; None where one of its records expired meanwhile."""
        if index.expires is not None and index.expires <= datetime.now(UTC):
            return None
        position, records = self.store.records_since(user_id, index.position)
        return index.extended(position, records) if records or position != index.position else index

    @staged("bm25")
    def search(self, user_id: str, query: str, k: int, read: Read = NOW) -> list[Hit]:
        """The user's top ``k`` records by BM25; records sharing no term with the query are left out."""
        index = self._indexes.get(user_id)
        if not index.postings.terms or k <= 0:  # e.g. only "ok" or "1": nothing is searchable
            return []
        hidden = self.store.hidden(user_id, read)  # superseded, not yet valid, expired: asked for beyond k
        rows, scores = index.postings.top(tokenize([query])[0], min(k + len(hidden), len(index.records)))
        found = [(index.records[int(row)], float(s)) for row, s in zip(rows, scores, strict=True)]
        return ranked([(record, s) for record, s in found if s > 0 and record.id not in hidden][:k])
