"""This process's views of users' indexed vectors: exact copies, valid for the user's index token.

Two reasons to hold a copy rather than ask the vector index each time. Speed: a Chroma query over
one user's few hundred vectors costs about 1.3 ms, a fifth of encoding the query, where a matrix
product over the same vectors costs tens of microseconds and ranks exactly (``bench/read_path.py``).
Freshness: a view is valid only for the index token it was built at, which every process changes
in SQL when it indexes a user's vectors, so one read of the token tells a process that another one
wrote. Users with more vectors than ``max_user_vectors``, or a copy larger than the views' whole
budget, keep no copy; their view only records that this process's vector index is current for them
(it was refreshed), and Chroma's HNSW answers.

The views are bounded by the bytes they hold (:func:`view_bytes`): the copy, its ids, and the
records kept for reuse, counted at the most a view keeps (:data:`RECORDS_KEPT`) because searches add
them after the view was counted; the bound is the views' share of ``PERSONAMEM_CACHE_MB``
(``store/budget.py``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from personamem.records import Record

__all__ = ["UserView", "VectorViews", "best", "view_bytes"]

MAX_BYTES = 128 << 20  # all views together, without a budget; least recently used go first
MAX_USER_VECTORS = 20_000  # about 30 MB at 384 dimensions, and a 2 ms matrix product
ID_BYTES = 160  # a vector id in the view's list and position map (measured: 138 with tracemalloc)
RECORD_BYTES = 2048  # a record kept for reuse (measured: 1.9 KiB at about 25 words, with tracemalloc)
RECORDS_KEPT = 64  # records a view keeps for reuse before it starts afresh


def view_bytes(vectors: int, dim: int) -> int:
    """Estimated memory of a view of ``vectors`` rows of ``dim`` float32, with its records at their most."""
    return vectors * (4 * dim + ID_BYTES) + min(vectors, RECORDS_KEPT) * RECORD_BYTES


@dataclass
class UserView:
    """A user's indexed vectors as of ``token``; ``matrix`` is None when the user is too large to copy."""

    token: str | None
    ids: list[str]
    matrix: np.ndarray | None
    position: dict[str, int] = field(init=False)
    _records: tuple[str | None, dict[str, Record]] = field(init=False, default_factory=lambda: (None, {}))

    def __post_init__(self) -> None:
        self.position = {vid: i for i, vid in enumerate(self.ids)}

    def records(self, revision: str | None) -> dict[str, Record]:
        """Records by vector id read from SQL at the user's ``revision``, for a search to reuse.

        Any write to the user changes the revision and starts an empty map, so a record is never
        served as it was before a change; fetching the hits of a search from SQL cost a twentieth
        of encoding its query (``bench/add_vs_mem0.py``). One tuple, swapped whole: a thread holding
        the map of an older revision fills that map alone. A map of :data:`RECORDS_KEPT` records
        starts afresh too, so a view holds no more than its budget counts.
        """
        held, found = self._records
        if held != revision or revision is None or len(found) >= RECORDS_KEPT:
            found = {}
            self._records = (revision, found)
        return found

    @property
    def nbytes(self) -> int:
        """Memory the view may hold (:func:`view_bytes`; a view without a copy holds next to nothing)."""
        return 0 if self.matrix is None else view_bytes(len(self.ids), self.matrix.shape[-1])

    def nearest(self, vector: np.ndarray, k: int, skip: set[str]) -> list[tuple[str, float]]:
        """The ``k`` best (vector id, cosine) by exact search, leaving out the ids in ``skip``."""
        matrix = self.matrix  # the indexer thread may grow the view meanwhile: rows past it wait
        assert matrix is not None
        if len(matrix) == 0 or k <= 0:
            return []
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        for vid in skip:
            if (i := self.position.get(vid)) is not None and i < len(scores):
                scores[i] = -np.inf
        return best(self.ids, scores, k)

    def among(self, vector: np.ndarray, k: int, ids: Sequence[str]) -> list[tuple[str, float]]:
        """The ``k`` best of ``ids`` only (those the view holds), by exact search over their rows.

        A filtered search asks this: its cost follows the records the filter keeps, not those it drops.
        """
        matrix = self.matrix
        assert matrix is not None
        rows = [i for vid in ids if (i := self.position.get(vid)) is not None and i < len(matrix)]
        if not rows:
            return []
        return best([self.ids[i] for i in rows], matrix[rows] @ np.asarray(vector, dtype=np.float32), k)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Replace the vectors of known ids and append the others, as the index's upsert did."""
        assert self.matrix is not None
        fresh = []
        for vid, vector in zip(ids, vectors, strict=True):
            if (i := self.position.get(vid)) is not None:
                self.matrix[i] = vector
            else:
                self.position[vid] = len(self.ids)
                self.ids.append(vid)
                fresh.append(vector)
        if fresh:
            old = self.matrix.reshape(-1, vectors.shape[1])
            self.matrix = np.vstack([old, np.asarray(fresh, np.float32)])


def best(ids: Sequence[str], scores: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The ``k`` best (id, score) of rows ``ids`` scored ``scores``, best first; -inf rows left out."""
    if len(scores) == 0 or k <= 0:
        return []
    top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    top = top[np.argsort(-scores[top], kind="stable")]
    return [(ids[i], float(scores[i])) for i in top if scores[i] != -np.inf]


class VectorViews:
    """An LRU of :class:`UserView` by store key, bounded by the bytes of its copies; thread-safe."""

    def __init__(self, *, max_bytes: int = MAX_BYTES, max_user_vectors: int = MAX_USER_VECTORS) -> None:
        self.max_bytes = max_bytes
        self.max_user_vectors = max_user_vectors
        self._views: OrderedDict[str, UserView] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, token: str | None) -> UserView | None:
        """The user's view if it is current at ``token``."""
        with self._lock:
            view = self._views.get(key)
            if view is None or view.token != token:
                return None
            self._views.move_to_end(key)
            return view

    def last(self, key: str) -> UserView | None:
        """The user's view as last built, current or not (what a read falls back to on a full disk)."""
        with self._lock:
            return self._views.get(key)

    def put(self, key: str, token: str | None, ids: list[str], matrix: np.ndarray | None) -> UserView:
        """Keep a view built at ``token`` (pass ``matrix=None`` for a user searched in the index)."""
        if matrix is not None and self._too_large(len(ids), matrix.shape[-1] if matrix.ndim == 2 else 0):
            ids, matrix = [], None
        view = UserView(token, ids, None if matrix is None else np.array(matrix, dtype=np.float32))
        with self._lock:
            self._views[key] = view
            self._views.move_to_end(key)
            self._trim()
        return view

    def advance(
        self, key: str, before: str | None, after: str, ids: Sequence[str], vectors: np.ndarray
    ) -> None:
        """This process indexed ``ids``; the view moves to ``after`` if it was current at ``before``.

        Otherwise another process indexed in between, and the view is dropped to be rebuilt.
        """
        with self._lock:
            view = self._views.get(key)
            if view is None:
                return
            grown = len(view.ids) + len(ids)
            too_large = view.matrix is not None and self._too_large(grown, vectors.shape[-1])
            if view.token != before or too_large:
                del self._views[key]
                return
            if view.matrix is not None:
                view.upsert(ids, vectors)
            view.token = after
            self._trim()

    def evict(self, key: str) -> None:
        """Drop the user's view (forget, delete)."""
        with self._lock:
            self._views.pop(key, None)

    @property
    def nbytes(self) -> int:
        """Estimated memory of every view kept."""
        with self._lock:
            return sum(view.nbytes for view in self._views.values())

    def _too_large(self, vectors: int, dim: int) -> bool:
        """Whether a copy of ``vectors`` rows would pass the per-user count or the whole budget alone."""
        return vectors > self.max_user_vectors or view_bytes(vectors, dim) > self.max_bytes

    def _trim(self) -> None:
        """Drop the least recently used views until the rest fit."""
        total = sum(view.nbytes for view in self._views.values())
        while total > self.max_bytes and self._views:
            _, oldest = self._views.popitem(last=False)
            total -= oldest.nbytes
