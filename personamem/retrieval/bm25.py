"""BM25 over one user's records (bm25s), the index built on first use and cached per revision."""

from __future__ import annotations

import importlib.abc
import logging
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from personamem.records import Record
from personamem.retrieval.base import Hit, ranked
from personamem.store import Store
from personamem.store.read import NOW, Read
from personamem.telemetry import staged

if TYPE_CHECKING:
    import bm25s

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
    bm25: bm25s.BM25 | None  # None when no record has a searchable term
    tokens: list[list[str]]

    def scores(self, terms: list[str]) -> np.ndarray:
        """BM25 score of every record for a query's :func:`tokenize` ``terms`` (rows as :attr:`records`)."""
        if self.bm25 is None or not terms:
            return np.zeros(len(self.records), dtype=np.float32)
        return np.asarray(self.bm25.get_scores(terms), dtype=np.float32)


class BM25Retriever:
    """Lexical retrieval; complements dense retrieval on names, numbers and rare words."""

    def __init__(self, store: Store, *, max_users: int | None = None) -> None:
        self.store = store
        self._indexes = store.user_cache(self._build, max_users=max_users)

    def index(self, user_id: str) -> UserIndex:
        """The user's records and BM25 index, built once per revision (the learned ranker reads it too)."""
        return self._indexes.get(user_id)

    def _build(self, user_id: str) -> UserIndex:
        records = self.store.records(user_id)
        tokens = tokenize([r.text for r in records])
        if not any(tokens):  # e.g. only "ok" or "1": BM25's length normalisation would divide by zero
            return UserIndex(records, None, tokens)
        bm25 = _bm25s().BM25()
        bm25.index(tokens, show_progress=False)
        return UserIndex(records, bm25, tokens)

    @staged("bm25")
    def search(self, user_id: str, query: str, k: int, read: Read = NOW) -> list[Hit]:
        """The user's top ``k`` records by BM25; records sharing no term with the query are left out."""
        index = self._indexes.get(user_id)
        if index.bm25 is None or k <= 0:
            return []
        hidden = self.store.hidden(user_id, read)  # superseded, not yet valid, expired: asked for beyond k
        docs, scores = index.bm25.retrieve(
            tokenize([query]), k=min(k + len(hidden), len(index.records)), show_progress=False, n_threads=1
        )
        found = [(index.records[int(d)], float(s)) for d, s in zip(docs[0], scores[0], strict=True)]
        return ranked([(record, s) for record, s in found if s > 0 and record.id not in hidden][:k])
