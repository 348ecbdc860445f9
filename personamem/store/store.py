"""The store: SQL as the source of truth, a vector index kept consistent with it, per user.

Write protocol, idempotent by (user, id):

1. find which records are new or changed (a read), and encode only those;
2. stage them as ``pending`` rows in one SQL transaction;
3. upsert their vectors;
4. mark them ``indexed``.

A process killed anywhere leaves at worst pending rows, which opening the store repairs (re-encode,
upsert, mark). A vector never exists without its row, because the row is committed first. ``forget``
marks the user, drops the vectors, then deletes the rows; an interrupted forget is finished on open.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from personamem.encoder import Encoder, default_encoder
from personamem.errors import StoreError
from personamem.records import Record
from personamem.store.cache import UserCache
from personamem.store.sql import RecordStatus, SqlCatalog, vector_key
from personamem.store.vectors import VectorIndex, collection_name

__all__ = ["ConsistencyReport", "Store"]

SQL_FILE = "personamem.sqlite"
VECTOR_DIR = "chroma"


@dataclass
class ConsistencyReport:
    """Differences between SQL and the vector index, by user and vector id; all empty means they agree."""

    pending: dict[str, set[str]] = field(default_factory=dict)
    missing_vectors: dict[str, set[str]] = field(default_factory=dict)
    orphan_vectors: dict[str, set[str]] = field(default_factory=dict)
    orphan_collections: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        """True when every row is indexed and rows and vectors match one to one."""
        return not (self.pending or self.missing_vectors or self.orphan_vectors or self.orphan_collections)


class Store:
    """Records in SQL and vectors in Chroma, consistent and isolated per user; safe across threads."""

    def __init__(self, catalog: SqlCatalog, index: VectorIndex, encoder: Encoder | None = None) -> None:
        self.catalog = catalog
        self.index = index
        self._encoder = encoder
        self._encoder_checked = False
        self._encoder_lock = threading.Lock()
        self._write_lock = threading.RLock()
        self._caches: weakref.WeakSet[UserCache[Any]] = weakref.WeakSet()
        self.repair()

    @classmethod
    def open(cls, path: str | Path, *, encoder: Encoder | None = None) -> Store:
        """A store in a local folder: SQLite (WAL) and an embedded Chroma side by side."""
        root = Path(path).expanduser()
        root.mkdir(parents=True, exist_ok=True)
        return cls(
            SqlCatalog(f"sqlite:///{root / SQL_FILE}"), VectorIndex.persistent(root / VECTOR_DIR), encoder
        )

    @classmethod
    def connect(
        cls,
        sql_url: str,
        *,
        chroma_url: str | None = None,
        chroma_path: str | Path | None = None,
        encoder: Encoder | None = None,
    ) -> Store:
        """A store on any SQLAlchemy database and a Chroma server (``chroma_url``) or folder."""
        if chroma_url is not None and chroma_path is None:
            index = VectorIndex.http(chroma_url)
        elif chroma_path is not None and chroma_url is None:
            index = VectorIndex.persistent(chroma_path)
        else:
            raise ValueError("give exactly one of chroma_url (a Chroma server) or chroma_path (a folder)")
        return cls(SqlCatalog(sql_url), index, encoder)

    @property
    def encoder(self) -> Encoder:
        """The encoder, checked once against the one the store's vectors came from.

        The default encoder is loaded on first use, so opening a store stays cheap.
        """
        if not self._encoder_checked:
            with self._encoder_lock:
                if not self._encoder_checked:
                    encoder = self._encoder or default_encoder()
                    signature = f"{encoder.name}:{encoder.dim}"
                    stored = self.catalog.claim_info("encoder", signature)
                    if stored != signature:
                        raise StoreError(
                            f"this store's vectors come from encoder {stored}, not {signature}; "
                            "open it with the same encoder or re-ingest into a new store"
                        )
                    self._encoder, self._encoder_checked = encoder, True
        assert self._encoder is not None
        return self._encoder

    def close(self) -> None:
        """Release database connections and the vector client."""
        self.catalog.close()
        self.index.close()

    # -- writes ---------------------------------------------------------------------------------

    def add_many(
        self,
        records: Sequence[Record],
        *,
        vectors: np.ndarray | None = None,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        """Store records durably; return how many were new or changed.

        Args:
            records: validated records, any mix of users.
            vectors: precomputed unit vectors, one row per record (skips the encoder; for bulk loads
                and benchmarks). Must come from the store's encoder space.
            batch_size: records per transaction; each batch is durable once its call to
                ``progress`` happens.
            progress: called with the number of records finished after each batch.
        """
        # self.encoder also records the encoder's signature, so bulk-loaded vectors are checked later
        if vectors is not None and vectors.shape != (len(records), self.encoder.dim):
            raise ValueError(
                f"vectors must have shape ({len(records)}, {self.encoder.dim}), got {vectors.shape}"
            )
        written = 0
        for start in range(0, len(records), batch_size):
            batch = records[start : start + batch_size]
            batch_vectors = vectors[start : start + batch_size] if vectors is not None else None
            written += self._write_batch(batch, batch_vectors)
            if progress is not None:
                progress(len(batch))
        return written

    def _write_batch(self, batch: Sequence[Record], vectors: np.ndarray | None) -> int:
        position = {(r.user_id, r.id): i for i, r in enumerate(batch)}
        with self._write_lock:
            changed = self.catalog.stage(batch)
            if not changed:
                return 0
            if vectors is None:
                changed_vectors = self.encoder.encode([r.text for r in changed])
            else:
                changed_vectors = vectors[[position[(r.user_id, r.id)] for r in changed]]
            self._index(changed, changed_vectors)
        return len(changed)

    def _index(self, records: Sequence[Record], vectors: np.ndarray) -> None:
        by_user: dict[str, list[int]] = {}
        for i, record in enumerate(records):
            by_user.setdefault(record.user_id, []).append(i)
        for user_id, rows in by_user.items():
            ids = [records[i].id for i in rows]
            try:
                self.index.upsert(user_id, [vector_key(user_id, rid) for rid in ids], vectors[rows])
            except Exception as exc:
                raise StoreError(
                    f"vector index failed while writing {len(ids)} record(s) of user {user_id!r}; they are "
                    "kept as pending in SQL and will be indexed when the store is next opened"
                ) from exc
            self.catalog.mark_indexed(user_id, ids)

    def forget(self, user_id: str) -> bool:
        """Delete every row, vector and cached value of the user; False if there was no such user."""
        with self._write_lock:
            if not self.catalog.begin_forget(user_id):
                return False
            self._finish_forget(user_id)
            return True

    def _finish_forget(self, user_id: str) -> None:
        for cache in list(self._caches):
            cache.evict(user_id)
        self.index.drop_user(user_id)
        self.catalog.finish_forget(user_id)

    def repair(self) -> int:
        """Finish interrupted forgets and index pending rows; return how many rows were repaired."""
        with self._write_lock:
            for user_id in self.catalog.users_being_forgotten():
                self._finish_forget(user_id)
            repaired = 0
            for records in self.catalog.pending().values():
                self._index(records, self.encoder.encode([r.text for r in records]))
                repaired += len(records)
            return repaired

    # -- reads ------------------------------------------------------------------------------------

    def get(self, user_id: str, record_id: str) -> Record | None:
        """The user's record with this id, or None."""
        return self.catalog.get_many(user_id, [record_id]).get(record_id)

    def get_many(self, user_id: str, record_ids: Sequence[str]) -> list[Record]:
        """The user's records with these ids, in the order asked (missing ids are skipped)."""
        found = self.catalog.get_many(user_id, record_ids)
        return [found[rid] for rid in record_ids if rid in found]

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records, in insertion order."""
        return self.catalog.records(user_id)

    def users(self) -> list[str]:
        """Users with records, sorted."""
        return self.catalog.users()

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of all users."""
        return self.catalog.count(user_id)

    def revision(self, user_id: str) -> str | None:
        """A token that changes whenever the user's records change (None: unknown user)."""
        return self.catalog.revision(user_id)

    def nearest(self, user_id: str, vector: np.ndarray, k: int) -> list[tuple[Record, float]]:
        """The user's ``k`` records closest to ``vector`` by cosine, best first."""
        hits = self.index.query(user_id, vector, k)
        found = self.catalog.by_vector_ids(user_id, [vid for vid, _ in hits])
        return [(found[vid], score) for vid, score in hits if vid in found]

    def vectors(self, user_id: str) -> tuple[list[Record], np.ndarray]:
        """The user's indexed records and their vectors (rows aligned), for corpus-level methods.

        P-Anchor's similarity graph needs every vector of a user at once; pending records (not yet
        indexed) are left out, as they are from search.
        """
        vector_ids, matrix = self.index.vectors(user_id)
        found = self.catalog.by_vector_ids(user_id, vector_ids)
        keep = [i for i, vid in enumerate(vector_ids) if vid in found]
        return [found[vector_ids[i]] for i in keep], matrix[keep] if keep else matrix[:0]

    def derived(self, user_id: str, namespace: str, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, cached durably per user under (namespace, key); JSON values only.

        For expensive, deterministic-given-the-key steps such as LLM calls: repeated evaluations and
        requests do not pay twice, and ``forget`` erases the cache with the user. Values for unknown
        users or users being forgotten are computed but not kept.
        """
        return self.derived_many(namespace, [(user_id, key)], lambda missing: [compute()])[0]

    def derived_many(
        self,
        namespace: str,
        requests: Sequence[tuple[str, str]],
        compute: Callable[[list[int]], Sequence[Any]],
    ) -> list[Any]:
        """:meth:`derived` for many (user id, key) pairs, computing the uncached ones together.

        ``compute(missing)`` gets the positions of the uncached pairs and returns their values in that
        order, so one batched LLM call fills them.
        """
        values = [self.catalog.get_derived(user_id, namespace, key) for user_id, key in requests]
        missing = [i for i, value in enumerate(values) if value is None]
        if missing:
            for i, value in zip(missing, compute(missing), strict=True):
                user_id, key = requests[i]
                self.catalog.put_derived(user_id, namespace, key, value)
                values[i] = value
        return values

    def user_cache(self, build: Callable[[str], Any], *, max_users: int = 256) -> UserCache[Any]:
        """A per-user cache that this store invalidates on writes and empties on ``forget``."""
        cache: UserCache[Any] = UserCache(self.revision, build, max_users=max_users)
        self._caches.add(cache)
        return cache

    def check(self) -> ConsistencyReport:
        """Compare SQL rows with vectors for every user (a full scan: for tests and operators)."""
        report = ConsistencyReport()
        sql_users = self.catalog.all_users()
        report.orphan_collections = self.index.collection_names() - {collection_name(u) for u in sql_users}
        for user_id in sql_users:
            rows = self.catalog.vector_ids(user_id)
            pending = self.catalog.vector_ids(user_id, RecordStatus.PENDING)
            vectors = self.index.ids(user_id)
            if pending:
                report.pending[user_id] = pending
            if rows - pending - vectors:
                report.missing_vectors[user_id] = rows - pending - vectors
            if vectors - rows:
                report.orphan_vectors[user_id] = vectors - rows
        return report
