"""BM25 over one user's records (bm25s), the index built on first use and cached per revision."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from personamem.records import Record
from personamem.retrieval.base import Hit, ranked
from personamem.store import Store
from personamem.telemetry import staged

if TYPE_CHECKING:
    import bm25s

__all__ = ["BM25Retriever", "UserIndex", "tokenize"]


def _bm25s() -> ModuleType:
    """bm25s, imported on first use: it loads scipy (0.06 s), which a dense search never needs.

    Imported with numba hidden unless something loaded numba already: bm25s imports it, when it can,
    only to offer a numba backend, and the numpy backend this module runs never touches it (0.12 s
    of a one-shot CLI search).
    """
    if "bm25s" not in sys.modules and "numba" not in sys.modules:
        sys.modules["numba"] = None  # type: ignore[assignment]  # an import of it raises ImportError
        try:
            import bm25s
        finally:
            del sys.modules["numba"]
    import bm25s

    # bm25s pins its logger to DEBUG on import, so once anything installs a root handler (absl does, via
    # rouge-score) every index build prints a line; the application's logging config decides instead.
    logging.getLogger("bm25s").setLevel(logging.NOTSET)
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
    def search(self, user_id: str, query: str, k: int) -> list[Hit]:
        """The user's top ``k`` records by BM25; records sharing no term with the query are left out."""
        index = self._indexes.get(user_id)
        if index.bm25 is None or k <= 0:
            return []
        hidden = self.store.hidden(user_id)  # superseded, not yet valid, expired: asked for beyond k
        docs, scores = index.bm25.retrieve(
            tokenize([query]), k=min(k + len(hidden), len(index.records)), show_progress=False, n_threads=1
        )
        found = [(index.records[int(d)], float(s)) for d, s in zip(docs[0], scores[0], strict=True)]
        return ranked([(record, s) for record, s in found if s > 0 and record.id not in hidden][:k])
