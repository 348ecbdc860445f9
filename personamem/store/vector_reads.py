"""Reads of users' vectors: nearest neighbours, a user's whole corpus, and the rows of given records.

One SQL read (``SqlCatalog.search_state``) gives a user's index token, pending vectors and bounds
token. The indexed vectors come from this process's view (``store/views.py``), current at that token
and rebuilt when another process indexed, or from the index's HNSW for a user too large to copy; the
pending ones are scored from SQL, so a record is searchable as soon as its row commits. Everything
here is by store key, with records keyed as stored.

A view is built from the vectors SQL keeps with the indexed rows, read in one statement with the
token they are current at; the vector index is read only for a user too large to copy, or whose
rows were indexed before rows kept their vectors. So a search never waits on Chroma's log, its
cross-process refresh or its client's start: a cold first search of a user, and a one-shot CLI
search that never imports chromadb.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np

from personamem.errors import DiskFullError, UnreadableIndexError
from personamem.records import Record
from personamem.store.pseudonyms import Pseudonyms
from personamem.store.read import Read
from personamem.store.sql import SqlCatalog
from personamem.store.vector_home import VectorHome
from personamem.store.views import UserView, VectorViews, best
from personamem.store.visibility import Visibility

__all__ = ["VectorReads"]

log = logging.getLogger("personamem.store")


class VectorReads:
    """Vector reads by store key, each hiding what the call's read must not see; shared by tenant views."""

    def __init__(
        self,
        catalog: SqlCatalog,
        index: VectorHome,
        names: Pseudonyms,
        views: VectorViews,
        visibility: Visibility,
        rebuild: Callable[[str], object],
    ) -> None:
        self.catalog = catalog
        self.index = index
        self.names = names
        self.views = views
        self.visibility = visibility
        self._rebuild = rebuild  # heals a user whose vectors the index cannot read back

    def nearest(self, key: str, vector: np.ndarray, k: int, read: Read) -> list[tuple[Record, float]]:
        """The user's ``k`` records closest to ``vector`` by cosine, best first, of those ``read`` sees."""
        hits, view, revision = self.nearest_ids(key, vector, k, read)
        if view is None:
            return []
        known = view.records(revision)
        missing = [vid for vid, _ in hits if vid not in known]
        if missing:
            known.update(self.catalog.by_vector_ids(key, missing))
        return [(known[vid], score) for vid, score in hits if vid in known]

    def nearest_ids(
        self, key: str, vector: np.ndarray, k: int, read: Read, *, width: int | None = None
    ) -> tuple[list[tuple[str, float]], UserView | None, str | None]:
        """The ``k`` best (vector id, cosine) of the user, with the view and revision they came from.

        ``width``: how wide the index's HNSW looks for a user too large to copy (None: a search's).
        """
        state = self.catalog.search_state(key)
        if state is None or k <= 0:
            return [], None, None
        hidden = self.visibility.hidden_vectors(key, state.bounds_token, read)
        verdict = self.visibility.verdict(key, read)
        scores = [] if state.pending is None else (state.pending @ vector).tolist()
        fresh = {
            vid: s
            for vid, s in zip(state.pending_ids, scores, strict=True)
            if vid not in hidden and (verdict is None or vid in verdict.kept_vector_set)
        }
        skip = set(state.pending_ids) | hidden
        view = self.view(key, state.index_token)
        if verdict is not None:  # filtered: only the vectors the filter keeps are scored, exactly
            kept = [vid for vid in verdict.kept_vectors if vid not in skip]
            hits = self._nearest_among(key, view, vector, k, kept)
        elif view.matrix is not None:
            hits = view.nearest(vector, k, skip=skip)
        else:  # too large to copy: the index's HNSW (which looks wide), asked to cover what is skipped
            hits = self.index.query(self.names.collection(key), vector, k + len(skip), width=width)
            hits = [(vid, score) for vid, score in hits if vid not in skip]
        if fresh:
            hits = sorted(hits + list(fresh.items()), key=lambda hit: -hit[1])
        return hits[:k], view, state.revision

    def _nearest_among(
        self, key: str, view: UserView, vector: np.ndarray, k: int, kept: list[str]
    ) -> list[tuple[str, float]]:
        """The ``k`` best indexed vectors of ``kept`` (a filter's), so a filter never leaves k unfilled.

        From the view's copy; for a user too large to copy, the kept vectors are read from the index
        and scored exactly while they are few enough to copy, else HNSW is asked for enough to cover
        every vector left out.
        """
        if view.matrix is not None:
            return view.among(vector, k, kept)
        if len(kept) <= self.views.max_user_vectors:
            ids, matrix = self._indexed(key, kept)
            return best(ids, matrix @ np.asarray(vector, dtype=np.float32), k) if ids else []
        collection = self.names.collection(key)
        allowed = set(kept)
        hits = self.index.query(collection, vector, k + self.index.count(collection) - len(allowed))
        return [(vid, score) for vid, score in hits if vid in allowed][:k]

    def vectors(self, key: str, read: Read) -> tuple[list[Record], np.ndarray]:
        """The user's records and their vectors (rows aligned): pending in, hidden by ``read``'s time out.

        The read's filter is not applied: it narrows the candidates of one call, not the history a
        corpus-level method summarizes (and caches per revision).
        """
        state = self.catalog.search_state(key)
        if state is None:
            return [], np.zeros((0, 0), dtype=np.float32)  # as the index answers for no collection
        view = self.view(key, state.index_token)
        if view.matrix is not None:
            vector_ids, matrix = list(view.ids), view.matrix
        else:
            vector_ids, matrix = self._all_indexed(key)
        if state.pending is not None:
            kept = set(state.pending_ids)
            indexed = [i for i, vid in enumerate(vector_ids) if vid not in kept]
            matrix = np.vstack([matrix[indexed], state.pending]) if indexed else state.pending
            vector_ids = [vector_ids[i] for i in indexed] + state.pending_ids
        found = self.catalog.by_vector_ids(key, vector_ids)
        hidden = self.visibility.hidden_vectors(key, state.bounds_token, read)
        keep = [i for i, vid in enumerate(vector_ids) if vid in found and vid not in hidden]
        return [found[vector_ids[i]] for i in keep], matrix[keep] if keep else matrix[:0]

    def _all_indexed(self, key: str) -> tuple[list[str], np.ndarray]:
        """Every indexed vector of a user too large to copy: those SQL keeps, else the index's.

        Read once, not kept. SQL's are a fifth of Chroma's memory and time to read (50,000 vectors:
        140 MB and 0.35 s against 1.1 GB and 2.7 s for one ``get``).
        """
        kept = self.catalog.kept_vectors(key)
        if kept is not None:
            return kept[1], kept[2]
        return self.index.vectors(self.names.collection(key))

    def record_vectors(self, key: str, record_ids: Sequence[str], dim: int) -> np.ndarray:
        """The stored vectors of ``record_ids``, rows aligned; a zero row where the user has no such vector.

        Read as a search reads them: from this process's view and the pending vectors. A zero row
        has cosine 0 to everything, so a record written since counts as unrelated rather than failing.
        """
        found = np.zeros((len(record_ids), dim), dtype=np.float32)
        state = self.catalog.search_state(key)
        if state is None or not record_ids:
            return found
        wanted = {self.names.vector_id(key, record_id): i for i, record_id in enumerate(record_ids)}
        pending = set()
        if state.pending is not None:
            for vid, row in zip(state.pending_ids, state.pending, strict=True):
                if vid in wanted:
                    found[wanted[vid]] = row
                    pending.add(vid)
        rest = [vid for vid in wanted if vid not in pending]
        view = self.view(key, state.index_token)
        if view.matrix is not None:
            matrix = view.matrix  # the indexer may grow the view meanwhile: rows past it wait
            for vid in rest:
                if (i := view.position.get(vid)) is not None and i < len(matrix):
                    found[wanted[vid]] = matrix[i]
        elif rest:
            ids, matrix = self._indexed(key, rest)
            for vid, row in zip(ids, matrix, strict=True):
                found[wanted[vid]] = row
        return found

    def _indexed(self, key: str, vector_ids: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """These indexed vectors of a user with no copy: as their rows keep them, the rest from the index.

        SQL's, where Chroma's by id cost five times as much: a 50,000-record user's signals read
        them all in 0.6 s instead of 3.1 s, and a dense search filtered to a tenth of them took 48 ms
        instead of 282 (on a busy machine).
        """
        kept = self.catalog.vectors_of(key, vector_ids)
        missing = [vid for vid in vector_ids if vid not in kept]  # rows indexed before they kept vectors
        ids, matrix = self.index.vectors(self.names.collection(key), missing) if missing else ([], None)
        if not kept:
            return ids, matrix if matrix is not None else np.zeros((0, 0), dtype=np.float32)
        rows = [*kept.values(), *([] if matrix is None else matrix)]
        return [*kept, *ids], np.stack(rows)

    def view(self, key: str, token: str | None) -> UserView:
        """This process's view of the user's indexed vectors, current at ``token``.

        Built after refreshing the vector index (an embedded one does not see other processes'
        writes otherwise); a token read before the build is safe, since the build can only be newer.
        """
        view = self.views.get(key, token)
        if view is not None:
            return view
        try:
            if self.catalog.count(key) > self.views.max_user_vectors:  # counted first: not read to be dropped
                return self._from_index(key, token, small=False)
            return self._from_sql(key) or self._from_index(key, token, small=True)
        except DiskFullError as error:
            return self._without_index(key, error)

    def _from_sql(self, key: str) -> UserView | None:
        """The view of the vectors SQL keeps with the user's indexed rows, kept at the token read with them.

        None where a row indexed before rows kept their vectors has none (or the index keeps them:
        PostgreSQL alone).
        """
        kept = self.catalog.kept_vectors(key)
        if kept is None:
            return None
        token, ids, matrix = kept
        return self.views.put(key, token, ids, matrix)

    def _from_index(self, key: str, token: str | None, *, small: bool) -> UserView:
        """The view read from the vector index, kept at ``token``.

        ``small``: the user's rows, counted in SQL, are few enough to copy, so the index is not
        counted again (a round trip on PostgreSQL); else its count decides.
        """
        collection = self.names.collection(key)
        self.index.refresh(collection)
        if not small and self.index.count(collection) > self.views.max_user_vectors:
            return self.views.put(key, token, [], None)
        try:
            ids, matrix = self.index.vectors(collection)
        except UnreadableIndexError:  # healed here, once: a failing rebuild reaches the caller
            self._rebuild(key)
            ids, matrix = self.index.vectors(collection)
        return self.views.put(key, token, ids, matrix)

    def _without_index(self, key: str, error: DiskFullError) -> UserView:
        """The user's vectors where the index cannot be read for want of space.

        Applying Chroma's log is a write, and a client a failed write left cannot be replaced
        without space. From the vectors SQL keeps with the indexed rows, current at the token read
        with them; else from this process's earlier copy, as it was (it may lack what was indexed
        since, never holds what was erased: hits are looked up in SQL). The error when neither.
        """
        kept = self.catalog.kept_vectors(key)
        if kept is not None:
            token, ids, matrix = kept
            log.warning("reading a user's vectors from SQL: %s", error)
            view = self.views.put(key, token, ids, matrix)
            return view if view.matrix is not None else UserView(token, ids, matrix)  # too large to keep
        last = self.views.last(key)
        if last is None or last.matrix is None:
            raise error
        log.warning("answering from this process's earlier copy of a user's vectors: %s", error)
        return last
