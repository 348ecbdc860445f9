"""The store: SQL as the source of truth, a vector index kept consistent with it, per user.

Write protocol, idempotent by (user, id):

1. find which records are new or changed (a read), and encode only those;
2. stage them as ``pending`` rows in one SQL transaction;
3. upsert their vectors;
4. mark them ``indexed``.

A process killed anywhere leaves at worst pending rows, which opening the store repairs (encode
unless the vector was kept, upsert, mark). A vector never exists without its row, because the row is
committed first. ``forget`` marks the user, drops the vectors, then deletes the rows; an interrupted
forget is finished on open.

``add`` (one record, the chat path) encodes first, stages the row with its vector, and leaves steps
3–4 to a background thread (``store/indexer.py``); until then searches score the pending vector from
SQL, so every acknowledged record is searchable at once, from any process.

Searches read the user's indexed vectors from this process's view (``store/views.py``), valid for
the user's index token, which step 4 changes in whichever process indexes: one SQL read tells a
process that its view (and its embedded vector index's) is stale.

``for_tenant`` gives a view of the store in which one tenant's user ids are mapped to their own keys
(``store/tenants.py``); every public method maps at the boundary, so below it there are only keys.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from personamem.encoder import Encoder, default_encoder
from personamem.errors import (
    ConfigError,
    InvalidInputError,
    PartialWriteError,
    StoreError,
    UnreadableIndexError,
)
from personamem.records import EventKind, Record, RecordEvent
from personamem.store.cache import UserCache
from personamem.store.duplicates import DUPLICATE_THRESHOLD, DuplicatePolicy
from personamem.store.expiry import ExpirySweeper, check_ttl
from personamem.store.filters import FilterIndex, Verdict, read_filter
from personamem.store.indexer import BackgroundIndexer
from personamem.store.interaction_log import InteractionLog
from personamem.store.keys import KeyRing
from personamem.store.pgvectors import PgVectorIndex
from personamem.store.pseudonyms import Pseudonyms, legacy_collection, new_key
from personamem.store.recovery import ConsistencyReport, heal, readable, rebuild, scan
from personamem.store.settings import TenantSetting
from personamem.store.sql import PSEUDONYM_KEY, SqlCatalog
from personamem.store.tenants import Scope
from personamem.store.timeline import Timeline
from personamem.store.vector_home import VectorHome, claim_vector_home, vector_index
from personamem.store.vectors import VectorIndex
from personamem.store.views import UserView, VectorViews, best

__all__ = ["ConsistencyReport", "Store"]

SQL_FILE = "personamem.sqlite"
VECTOR_DIR = "chroma"
TTL_KEY = "ttl"  # store_info: a default time-to-live in seconds; "ttl:<tenant>" for one tenant
PIPELINE_KEY = "pipeline"  # store_info: the live pipeline table (JSON); "pipeline:<tenant>" for one tenant
_NO_PIPELINE = "none"  # the previous live pipeline, where there was none (the package default served)
_NO_VECTORS = np.zeros((0, 0), dtype=np.float32)  # what a delete keeps to re-index: nothing, on pgvector


def _unexpired(records: list[Record]) -> list[Record]:
    """``records`` without those whose expiry has passed (hidden at once; the sweep erases them)."""
    now = datetime.now(UTC)
    return [r for r in records if r.expires_at is None or r.expires_at > now]


class Store:
    """Records in SQL and vectors in Chroma or pgvector, consistent and isolated per user; thread-safe."""

    def __init__(self, catalog: SqlCatalog, index: VectorHome, encoder: Encoder | None = None) -> None:
        self.scope = Scope()
        self._owner: Store | None = None  # the store a tenant view was made from
        self.folder: Path | None = None  # a local store's folder (open sets it), for files kept beside it
        self.catalog = catalog
        self.index = index
        try:
            claim_vector_home(catalog, index)
        except ConfigError:
            catalog.close()
            index.close()
            raise
        self._encoder = encoder
        self._encoder_checked = False
        self._encoder_lock = threading.Lock()
        self._write_lock = threading.RLock()
        self._caches: weakref.WeakSet[UserCache[Any]] = weakref.WeakSet()
        self.views = VectorViews()
        self._timelines: dict[str, tuple[str, Timeline]] = {}
        # per store key, at its revision: which records each filter asked of the user admits
        self._filters: UserCache[FilterIndex] = UserCache(self.catalog.revision, self._filter_index)
        self._caches.add(self._filters)
        # settings kept with the data, per tenant; one of each shared by every view
        self._ttl = TenantSetting(catalog, TTL_KEY)
        self._live = TenantSetting(catalog, PIPELINE_KEY)
        self._replaced = TenantSetting(catalog, f"{PIPELINE_KEY}.previous")
        self._indexer = BackgroundIndexer(self._index)
        self.names = self._pseudonyms()
        self.repair()
        self._sweeper = ExpirySweeper(lambda: self.purge_expired(all_tenants=True))

    def _pseudonyms(self) -> Pseudonyms:
        """The store's keyed pseudonyms; a store from before keys is re-keyed here, once.

        Its unkeyed collections are dropped before the new key is committed, so a crash in between
        only repeats the drop; the rows then come back as pending and ``repair`` re-indexes them.
        """
        key = self.catalog.info(PSEUDONYM_KEY)
        if key is None:
            users = list(self.catalog.all_users())
            if users:
                self.index.drop(legacy_collection(user_id) for user_id in users)
            key = self.catalog.adopt_pseudonym_key(new_key())
        return Pseudonyms(key)

    @classmethod
    def open(cls, path: str | Path, *, encoder: Encoder | None = None) -> Store:
        """A store in a local folder: SQLite (WAL) and an embedded Chroma side by side."""
        root = Path(path).expanduser()
        root.mkdir(parents=True, exist_ok=True)
        store = cls(
            SqlCatalog(f"sqlite:///{root / SQL_FILE}"), VectorIndex.persistent(root / VECTOR_DIR), encoder
        )
        store.folder = root.resolve()
        return store

    @classmethod
    def connect(
        cls,
        sql_url: str,
        *,
        chroma_url: str | None = None,
        chroma_path: str | Path | None = None,
        encoder: Encoder | None = None,
    ) -> Store:
        """A store on any SQLAlchemy database and a Chroma server (``chroma_url``) or folder.

        PostgreSQL needs neither: without a Chroma argument the vectors go to the same database
        (pgvector, ``store/pgvectors.py``), written in the transaction of their records.
        """
        catalog = SqlCatalog(sql_url)
        try:
            index = vector_index(catalog, chroma_url=chroma_url, chroma_path=chroma_path)
        except BaseException:
            catalog.close()
            raise
        return cls(catalog, index, encoder)

    def for_tenant(self, tenant: str) -> Store:
        """This store as ``tenant`` sees it: only its users, whose ids may equal other tenants' ids.

        The view shares connections, caches and the background indexer with this store; closing it
        does nothing (the store it came from owns them).

        Raises:
            InvalidInputError: a tenant name that is not 1-64 letters, digits, ``_``, ``.``, ``-``; or
                this store is a tenant's view already (a tenant cannot reach another).
        """
        if self._owner is not None:
            raise InvalidInputError(f"this store is already tenant {self.tenant!r}'s view; it has no tenants")
        view = copy.copy(self)
        view.scope = Scope(tenant)
        view._owner = self
        return view

    @property
    def keys(self) -> KeyRing:
        """The API keys kept in this store's database (each names a tenant)."""
        return KeyRing(self.catalog)

    @property
    def tenant(self) -> str | None:
        """The tenant this view belongs to (None: the store's own users)."""
        return self.scope.tenant

    @property
    def interactions(self) -> InteractionLog:
        """The interaction log of the users this view sees (written only where logging is on)."""
        return InteractionLog(self.catalog, self.scope)

    def _key(self, user_id: str) -> str:
        return self.scope.key(user_id)

    def _inward(self, records: Sequence[Record]) -> list[Record]:
        """Records with their user ids mapped to store keys."""
        if self.scope.tenant is None:
            for record in records:
                self._key(record.user_id)
            return list(records)
        return [r.model_copy(update={"user_id": self._key(r.user_id)}) for r in records]

    def _outward(self, records: list[Record]) -> list[Record]:
        """Records with their store keys mapped back to this view's user ids."""
        if self.scope.tenant is None:
            return records
        return [r.model_copy(update={"user_id": self.scope.user(r.user_id)}) for r in records]

    @property
    def encoder(self) -> Encoder:
        """The encoder, checked once against the one the store's vectors came from.

        The default encoder is loaded on first use, so opening a store stays cheap.
        """
        if self._owner is not None:
            return self._owner.encoder
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
        """Index what ``add`` queued, then release database connections and the vector client.

        A failed indexing is not raised here: its rows stay pending and the next open indexes them.
        A tenant view's ``close`` does nothing.
        """
        if self._owner is not None:
            return
        self._sweeper.close()
        with contextlib.suppress(StoreError):
            self._indexer.close()
        self.catalog.close()
        self.index.close()

    def flush(self) -> None:
        """Wait until every record from :meth:`add` is in the vector index (searches never need it).

        Raises:
            StoreError: indexing failed; the records stay pending and searchable, and are indexed later.
        """
        self._indexer.flush()

    # -- writes ---------------------------------------------------------------------------------

    def add(
        self,
        record: Record,
        *,
        duplicates: DuplicatePolicy = DuplicatePolicy.KEEP,
        threshold: float = DUPLICATE_THRESHOLD,
    ) -> Record:
        """Store one record durably and return at once: the record that now holds its statement.

        The row is committed with its vector before this returns, so the record is searchable at
        once and survives a crash; the vector index gets it from a background thread. A current
        record of the user at cosine ``threshold`` or above (another id) is a near-duplicate: the
        returned record names it in ``duplicate_of``, and ``duplicates`` says what happens (see
        :class:`DuplicatePolicy`; a skipped or merged add returns the existing record).
        """
        [record] = self._inward(self._expiring([record]))
        vector = self.encoder.encode([record.text])
        near = self._near_duplicate(record, vector[0], threshold)
        if near is not None:
            if duplicates is DuplicatePolicy.SKIP:
                return self._outward([near.model_copy(update={"duplicate_of": near.id})])[0]
            if duplicates is DuplicatePolicy.MERGE_METADATA:
                return self._merge(near, record)
            record = record.model_copy(update={"duplicate_of": near.id})
        self._stage([record], vector)
        return self._outward([record])[0]

    def _stage(
        self,
        records: list[Record],
        vectors: np.ndarray,
        relabel: Sequence[Record] = (),
        relabel_event: EventKind = "updated",
    ) -> None:
        """Write records with their vectors, searchable when this returns.

        With the index in the database (pgvector) they are indexed in the same transaction; else
        committed pending and queued for the background indexer.
        """
        if isinstance(self.index, PgVectorIndex):
            with self._write_lock:
                _, indexed = self.catalog.stage_indexed(
                    records, self.names, vectors, self.index, relabel=relabel, relabel_event=relabel_event
                )
                for user_id, done in indexed.items():
                    self.views.advance(user_id, done.before, done.after, done.vector_ids, done.vectors)
            return
        with self._write_lock:
            changed = self.catalog.stage(
                records, self.names, vectors, relabel=relabel, relabel_event=relabel_event
            )
        if changed:
            self._indexer.submit(changed, vectors)

    def _near_duplicate(self, record: Record, vector: np.ndarray, threshold: float) -> Record | None:
        """The user's current record nearest to ``vector`` at ``threshold`` or above, other than itself."""
        if threshold > 1:  # cosine never exceeds 1: the check is off
            return None
        own = self.names.vector_id(record.user_id, record.id)
        for vid, score in self._nearest_ids(record.user_id, vector, 2)[0]:
            if vid == own:
                continue
            if score < threshold:
                return None
            return self.catalog.by_vector_ids(record.user_id, [vid]).get(vid)  # most adds skip this read
        return None

    def _merge(self, near: Record, record: Record) -> Record:
        """Keep ``near`` with ``record``'s metadata added (``record``'s values win on equal keys)."""
        merged = near.model_copy(update={"metadata": {**near.metadata, **record.metadata}})
        if merged.metadata != near.metadata:
            with contextlib.suppress(StoreError):  # a queued ``near`` is marked indexed by its hash
                self._indexer.flush()
            with self._write_lock:
                self.catalog.stage([], self.names, relabel=[merged])
        return self._outward([merged.model_copy(update={"duplicate_of": near.id})])[0]

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

        Raises:
            PartialWriteError: a batch failed at the write (disk, database, vector index); it says
                how many records before it are durable. Adding the same records again finishes.
        """
        # self.encoder also records the encoder's signature, so bulk-loaded vectors are checked later
        if vectors is not None and vectors.shape != (len(records), self.encoder.dim):
            raise ValueError(
                f"vectors must have shape ({len(records)}, {self.encoder.dim}), got {vectors.shape}"
            )
        records = self._inward(self._expiring(records))
        written = 0
        for start in range(0, len(records), batch_size):
            batch = records[start : start + batch_size]
            batch_vectors = vectors[start : start + batch_size] if vectors is not None else None
            try:
                written += self._write_batch(batch, batch_vectors)
            except Exception as error:
                raise PartialWriteError(
                    f"stored {start} of {len(records)} record(s), then the write failed: {error}; adding "
                    "the same records again skips the stored ones and finishes the job",
                    stored=start,
                    total=len(records),
                ) from error
            if progress is not None:
                progress(len(batch))
        return written

    def supersede(self, user_id: str, old_id: str, new: Record) -> Record:
        """Store ``new`` as the fact that replaces record ``old_id`` of the user; return it as stored.

        One transaction: the old record's validity ends where the new one's starts (``new.valid_from``,
        default now) and it stays in the user's history; the new one names it in ``supersedes``.

        Raises:
            InvalidInputError: the user has no record ``old_id``, it is no longer current at that
                time, or ``new`` is for another user or has the same id.
        """
        if new.user_id != user_id:
            raise InvalidInputError(f"the new record is for user {new.user_id!r}, not {user_id!r}")
        if new.id == old_id:
            raise InvalidInputError(f"record {old_id!r} cannot supersede itself; use update to change it")
        old = self.get(user_id, old_id)
        if old is None:
            raise InvalidInputError(f"user {user_id!r} has no record {old_id!r} to supersede")
        start = new.valid_from or datetime.now(UTC)
        if old.valid_until is not None and old.valid_until <= start:
            raise InvalidInputError(
                f"record {old_id!r} stopped being current at {old.valid_until.isoformat()}; "
                "supersede the record that replaced it"
            )
        if old.valid_from is not None and start <= old.valid_from:
            raise InvalidInputError(
                f"record {old_id!r} starts at {old.valid_from.isoformat()}; the new fact must start later"
            )
        new = new.model_copy(update={"valid_from": start, "supersedes": new.supersedes or old_id})
        ended = old.model_copy(update={"valid_until": start})
        [new], [ended] = self._inward(self._expiring([new])), self._inward([ended])
        vector = self.encoder.encode([new.text])
        with contextlib.suppress(StoreError):  # a queued old record is marked indexed by its hash
            self._indexer.flush()
        self._stage([new], vector, relabel=[ended], relabel_event="superseded")
        return self._outward([new])[0]

    @property
    def ttl(self) -> float | None:
        """The default time-to-live of new records in seconds (this tenant's, else the store's)."""
        stored = self._ttl.get(self.tenant)
        return None if stored in (None, "off") else float(stored)

    def set_ttl(self, seconds: float | None) -> None:
        """Give new records of this view (a tenant's, or the whole store) a default time-to-live.

        Records stored already keep their expiry; a record's own ``expires_at`` wins. A tenant
        without its own setting takes the store's; None for a tenant means no default for it.

        Raises:
            InvalidInputError: a time-to-live that is not a positive number of seconds.
        """
        seconds = check_ttl(seconds)
        self._ttl.set(self.tenant, repr(seconds) if seconds is not None else ("off" if self.tenant else None))

    @property
    def live_pipeline(self) -> str | None:
        """The ``[pipeline]`` table that serves this view's users, as JSON (None: the package default).

        ``personamem improve`` puts it here, with the data, so every process and server worker over
        the store serves it (within :data:`~personamem.store.settings.FRESH_S` seconds of the change).
        A tenant without its own follows the store's.
        """
        return self._live.get(self.tenant)

    def set_live_pipeline(self, table: Mapping[str, Any]) -> None:
        """Serve ``table`` (a ``[pipeline]`` table) to this view's users; the one it replaces is kept.

        :meth:`rollback_live_pipeline` puts the replaced one back.
        """
        previous = self._live.own(self.tenant)
        self._replaced.set(self.tenant, _NO_PIPELINE if previous is None else previous)
        self._live.set(self.tenant, json.dumps(dict(table), sort_keys=True))

    def rollback_live_pipeline(self) -> bool:
        """Put back the live pipeline that the last :meth:`set_live_pipeline` replaced; False if none."""
        previous = self._replaced.own(self.tenant)
        if previous is None:
            return False
        self._live.set(self.tenant, None if previous == _NO_PIPELINE else previous)
        self._replaced.set(self.tenant, None)
        return True

    def _expiring(self, records: Sequence[Record]) -> Sequence[Record]:
        """Records given the default time-to-live where they set no expiry of their own."""
        ttl = self.ttl
        if ttl is None or all(r.expires_at is not None for r in records):
            return records
        expires = datetime.now(UTC) + timedelta(seconds=ttl)
        return [r.model_copy(update={"expires_at": expires}) if r.expires_at is None else r for r in records]

    def purge_expired(self, *, all_tenants: bool = False) -> int:
        """Erase every record of this view whose expiry has passed (as ``delete`` erases); return how many.

        Expired records are hidden from reads before this runs. ``all_tenants`` (the store's own
        view only: the background sweep, ``personamem purge``) takes every tenant's too.
        """
        if all_tenants and self._owner is not None:
            raise InvalidInputError(f"tenant {self.tenant!r}'s view cannot purge other tenants")
        purged = 0
        for key, record_ids in self.catalog.expired(time.time()).items():
            if all_tenants or self.scope.user(key) is not None:
                purged += len(self._erase(key, record_ids, "expired"))
        return purged

    def _write_batch(self, batch: Sequence[Record], vectors: np.ndarray | None) -> int:
        position = {(r.user_id, r.id): i for i, r in enumerate(batch)}
        with self._write_lock:
            changed = self.catalog.stage(batch, self.names)
            if not changed:
                return 0
            if vectors is None:
                changed_vectors = self.encoder.encode([r.text for r in changed])
            else:
                changed_vectors = vectors[[position[(r.user_id, r.id)] for r in changed]]
            self._index(changed, changed_vectors)
        return len(changed)

    def _index(self, records: Sequence[Record], vectors: np.ndarray) -> None:
        """Steps 3–4 for staged records: upsert their vectors per user, then mark the rows indexed.

        Under the write lock, so a ``forget`` in this process is never undone by a late upsert; a
        user forgotten meanwhile by another process has the vectors just written removed again.
        """
        # a record changed twice while queued: only its latest version is indexed
        latest = {(record.user_id, record.id): i for i, record in enumerate(records)}
        by_user: dict[str, list[int]] = {}
        for (user_id, _), i in sorted(latest.items(), key=lambda item: item[1]):
            by_user.setdefault(user_id, []).append(i)
        with self._write_lock:
            for user_id, rows in by_user.items():
                if self.catalog.revision(user_id) is None:
                    continue  # forgotten since it was staged: nothing to index
                batch = [records[i] for i in rows]
                collection = self.names.collection(user_id)
                vector_ids = [self.names.vector_id(user_id, r.id) for r in batch]
                if isinstance(self.index, PgVectorIndex):  # the vectors commit with the rows' new status
                    write = functools.partial(
                        self.index.write, name=collection, ids=vector_ids, vectors=vectors[rows]
                    )
                    tokens = self.catalog.mark_indexed(user_id, batch, write)
                else:
                    try:
                        self.index.upsert(collection, vector_ids, vectors[rows])
                    except Exception as exc:
                        raise StoreError(
                            f"vector index failed while writing {len(batch)} record(s) of user {user_id!r} "
                            f"({exc}); they are kept as pending in SQL and will be indexed when the store "
                            "is next opened"
                        ) from exc
                    tokens = self.catalog.mark_indexed(user_id, batch)
                if tokens is None:
                    self.index.drop([collection])
                else:
                    self.views.advance(user_id, *tokens, vector_ids, vectors[rows])

    def forget(self, user_id: str) -> bool:
        """Delete every row, vector and cached value of the user; False if there was no such user.

        With the embedded index, the user's vectors, vector ids and collection name are then gone
        from every file of the store's folder (see ``VectorIndex.drop``).
        """
        user_id = self._key(user_id)
        with contextlib.suppress(StoreError):  # queued records of the user are erased below anyway
            self._indexer.flush()
        with self._write_lock:
            if not self.catalog.begin_forget(user_id):
                return False
            self._finish_forget(user_id)
            return True

    def delete(self, user_id: str, record_ids: Sequence[str]) -> list[str]:
        """Delete these records of the user, leaving no trace of them; return the ids deleted.

        A deleted vector is erased, not only unlinked: Chroma's HNSW ``delete`` marks a vector
        deleted and keeps its bytes, so the user's collection is rebuilt from the vectors that stay
        (the rows wait as pending with their vectors meanwhile: searchable, and repaired after a
        crash). The cost grows with the user's record count, not with the number deleted. With
        pgvector the rows and their vectors are deleted in one transaction, and nothing is rebuilt
        (the bytes leave PostgreSQL's files when it is vacuumed: docs/guarantees.md).
        """
        return self._erase(self._key(user_id), record_ids)

    def _erase(self, user_id: str, record_ids: Sequence[str], event: EventKind = "deleted") -> list[str]:
        """``delete`` of a store key; the records' histories end with ``event``."""
        with contextlib.suppress(StoreError):
            self._indexer.flush()
        with self._write_lock:
            collection = self.names.collection(user_id)
            if isinstance(self.index, PgVectorIndex):  # rows and their vectors go in one transaction
                deleted = self.catalog.delete_records(
                    user_id, record_ids, ([], _NO_VECTORS), self.names, event, self.index
                )
                if deleted:
                    self.views.evict(user_id)
                return deleted
            self.index.refresh(collection)  # another process may have indexed vectors we must keep
            kept = readable(self, collection)
            deleted = self.catalog.delete_records(user_id, record_ids, kept, self.names, event)
            if deleted:
                self.views.evict(user_id)
                self.index.drop([collection])
                for pending in self.catalog.pending(user_id).values():
                    self.index_pending(pending)
            return deleted

    def _finish_forget(self, user_id: str) -> None:
        for cache in list(self._caches):
            cache.evict(user_id)
        self.views.evict(user_id)
        self.index.drop([self.names.collection(user_id)])
        self.catalog.finish_forget(user_id, self.names)

    def repair(self) -> int:
        """Finish interrupted forgets and index pending rows; return how many rows were repaired."""
        with self._write_lock:
            for user_id in self.catalog.users_being_forgotten():
                self._finish_forget(user_id)
            repaired = 0
            for user_id, pending in self.catalog.pending().items():
                collection = self.names.collection(user_id)
                if self.index.ids(collection) - self.catalog.vector_ids(user_id):
                    # a delete died between its SQL commit and its rebuild: the collection still
                    # holds the deleted vectors, so rebuild it rather than index into it
                    repaired += rebuild(self, user_id)
                else:
                    repaired += self.index_pending(pending)
            return repaired

    def index_pending(self, pending: list[tuple[Record, np.ndarray | None]]) -> int:
        """Index pending rows, encoding only those whose vector was not kept; return how many."""
        records = [record for record, _ in pending]
        missing = [i for i, (_, vector) in enumerate(pending) if vector is None]
        encoded = iter(self.encoder.encode([records[i].text for i in missing]) if missing else [])
        self._index(records, np.stack([next(encoded) if v is None else v for _, v in pending]))
        return len(records)

    # -- reads ------------------------------------------------------------------------------------

    def get(self, user_id: str, record_id: str) -> Record | None:
        """The user's record with this id, or None."""
        found = self.get_many(user_id, [record_id])
        return found[0] if found else None

    def history(self, user_id: str, record_id: str) -> list[RecordEvent]:
        """The events of the user's record, oldest first; an erased record's without any text.

        A record whose expiry has passed is hidden at once, as ``get`` hides it, so its events show
        no text even before the sweep erases it.
        """
        key = self._key(user_id)
        events = self.catalog.history(self.names, key, record_id)
        if events and events[-1].text is not None and self.get(user_id, record_id) is None:
            events = [event.model_copy(update={"text": None}) for event in events]
        return events

    def get_many(self, user_id: str, record_ids: Sequence[str]) -> list[Record]:
        """The user's records with these ids, in the order asked (missing ids are skipped)."""
        found = self.catalog.get_many(self._key(user_id), record_ids)
        return self._outward(_unexpired([found[rid] for rid in record_ids if rid in found]))

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records, in insertion order: superseded ones too, expired ones not."""
        return self._outward(_unexpired(self.catalog.records(self._key(user_id))))

    def hidden(self, user_id: str) -> set[str]:
        """Ids of the user's records this read must not see, by its time (``store/timeline.py``) or filter."""
        key = self._key(user_id)
        token = self.catalog.bounds_token(key)
        hidden = set() if token is None else self._timeline(key, token).hidden()[0]
        verdict = self._verdict(key)
        return hidden if verdict is None else hidden | verdict.rejected

    def _verdict(self, key: str) -> Verdict | None:
        """What the filter in force says of the user's records (None: no filter)."""
        read = read_filter()
        return None if read is None else self._filters.get(key).verdict(read)

    def _filter_index(self, key: str) -> FilterIndex:
        records = self.catalog.records_by_vector(key)
        return FilterIndex(list(records.values()), list(records))

    def _hidden_vectors(self, key: str, token: str | None) -> set[str]:
        """Vector ids of the user's records hidden from the read time in force."""
        return set() if token is None else self._timeline(key, token).hidden()[1]

    def _timeline(self, key: str, token: str) -> Timeline:
        """The user's timeline as of ``token``, kept per user while the token holds."""
        cached = self._timelines.get(key)
        if cached is not None and cached[0] == token:
            return cached[1]
        timeline = self.catalog.timeline(key)
        if len(self._timelines) >= 1024:
            self._timelines.clear()
        self._timelines[key] = (token, timeline)
        return timeline

    def users(self) -> list[str]:
        """Users with records, sorted (a tenant view: that tenant's users only)."""
        return [user for key in self.catalog.users() if (user := self.scope.user(key)) is not None]

    def count_by_user(self) -> dict[str, int]:
        """Records per user of this view (users without records are absent)."""
        return {u: n for key, n in self.catalog.count_by_user().items() if (u := self.scope.user(key))}

    def last_calls(self) -> dict[str, str]:
        """The time of each of this view's users' latest logged call (ISO 8601, UTC)."""
        return {u: t for key, t in self.catalog.last_calls().items() if (u := self.scope.user(key))}

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of all users (of this view)."""
        if user_id is not None:
            return self.catalog.count(self._key(user_id))
        counts = self.catalog.count_by_user()
        return sum(n for key, n in counts.items() if self.scope.user(key) is not None)

    def revision(self, user_id: str) -> str | None:
        """A token that changes whenever the user's records change (None: unknown user)."""
        return self.catalog.revision(self._key(user_id))

    def nearest(self, user_id: str, vector: np.ndarray, k: int) -> list[tuple[Record, float]]:
        """The user's ``k`` records closest to ``vector`` by cosine, best first.

        One SQL read gives the user's index token and pending vectors; the indexed vectors come from
        this process's view, current at that token (rebuilt when another process indexed).
        """
        return self._outward_pairs(self._nearest(self._key(user_id), vector, k))

    def _outward_pairs(self, pairs: list[tuple[Record, float]]) -> list[tuple[Record, float]]:
        records = self._outward([r for r, _ in pairs])
        return list(zip(records, [s for _, s in pairs], strict=True))

    def _nearest(self, user_id: str, vector: np.ndarray, k: int) -> list[tuple[Record, float]]:
        """:meth:`nearest` of a store key, records keyed as stored."""
        hits, view, revision = self._nearest_ids(user_id, vector, k)
        if view is None:
            return []
        known = view.records(revision)
        missing = [vid for vid, _ in hits if vid not in known]
        if missing:
            known.update(self.catalog.by_vector_ids(user_id, missing))
        return [(known[vid], score) for vid, score in hits if vid in known]

    def _nearest_ids(
        self, user_id: str, vector: np.ndarray, k: int
    ) -> tuple[list[tuple[str, float]], UserView | None, str | None]:
        """The ``k`` best (vector id, cosine) of a store key, with the view and revision they came from."""
        state = self.catalog.search_state(user_id)
        if state is None or k <= 0:
            return [], None, None
        hidden = self._hidden_vectors(user_id, state.bounds_token)
        verdict = self._verdict(user_id)
        scores = [] if state.pending is None else (state.pending @ vector).tolist()
        fresh = {
            vid: s
            for vid, s in zip(state.pending_ids, scores, strict=True)
            if vid not in hidden and (verdict is None or vid in verdict.kept_vector_set)
        }
        skip = set(state.pending_ids) | hidden
        view = self._view(user_id, state.index_token)
        if verdict is not None:  # filtered: only the vectors the filter keeps are scored, exactly
            kept = [vid for vid in verdict.kept_vectors if vid not in skip]
            hits = self._nearest_among(user_id, view, vector, k, kept)
        elif view.matrix is not None:
            hits = view.nearest(vector, k, skip=skip)
        else:  # too large to copy: the index's HNSW, asked for enough to cover what is skipped
            hits = self.index.query(self.names.collection(user_id), vector, k + len(skip))
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
        collection = self.names.collection(key)
        if len(kept) <= self.views.max_user_vectors:
            ids, matrix = self.index.vectors(collection, kept)
            return best(ids, matrix @ np.asarray(vector, dtype=np.float32), k) if ids else []
        allowed = set(kept)
        hits = self.index.query(collection, vector, k + self.index.count(collection) - len(allowed))
        return [(vid, score) for vid, score in hits if vid in allowed][:k]

    def vectors(self, user_id: str) -> tuple[list[Record], np.ndarray]:
        """The user's records and their vectors (rows aligned), for corpus-level methods.

        P-Anchor's similarity graph needs every vector of a user at once. Pending records are in
        when their vector is kept in SQL (from :meth:`add`), as they are in search; records the
        read time in force hides are out. A read's filter is not applied: it narrows the candidates
        of one call, not the history such a method summarizes (and caches per revision).
        """
        user_id = self._key(user_id)
        state = self.catalog.search_state(user_id)
        if state is None:
            return [], np.zeros((0, 0), dtype=np.float32)  # as the index answers for no collection
        view = self._view(user_id, state.index_token)
        if view.matrix is not None:
            vector_ids, matrix = list(view.ids), view.matrix
        else:
            vector_ids, matrix = self.index.vectors(self.names.collection(user_id))
        if state.pending is not None:
            kept = set(state.pending_ids)
            indexed = [i for i, vid in enumerate(vector_ids) if vid not in kept]
            matrix = np.vstack([matrix[indexed], state.pending]) if indexed else state.pending
            vector_ids = [vector_ids[i] for i in indexed] + state.pending_ids
        found = self.catalog.by_vector_ids(user_id, vector_ids)
        hidden = self._hidden_vectors(user_id, state.bounds_token)
        keep = [i for i, vid in enumerate(vector_ids) if vid in found and vid not in hidden]
        return self._outward([found[vector_ids[i]] for i in keep]), matrix[keep] if keep else matrix[:0]

    def record_vectors(self, user_id: str, record_ids: Sequence[str]) -> np.ndarray:
        """The stored vectors of ``record_ids``, rows aligned; a zero row where the user has no such vector.

        For the records of a search's results (the profile's redundancy, the ranker's signals): read
        from this process's view and the pending vectors, as a search reads them. A zero row has
        cosine 0 to everything, so a record written since counts as unrelated rather than failing.
        """
        found = np.zeros((len(record_ids), self.encoder.dim), dtype=np.float32)
        key = self._key(user_id)
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
        view = self._view(key, state.index_token)
        if view.matrix is not None:
            matrix = view.matrix  # the indexer may grow the view meanwhile: rows past it wait
            for vid in rest:
                if (i := view.position.get(vid)) is not None and i < len(matrix):
                    found[wanted[vid]] = matrix[i]
        elif rest:
            ids, matrix = self.index.vectors(self.names.collection(key), rest)
            for vid, row in zip(ids, matrix, strict=True):
                found[wanted[vid]] = row
        return found

    def _view(self, user_id: str, token: str | None) -> UserView:
        """This process's view of the user's indexed vectors, current at ``token``.

        Built after refreshing the vector index (an embedded one does not see other processes'
        writes otherwise); a token read before the build is safe, since the build can only be newer.
        """
        view = self.views.get(user_id, token)
        if view is not None:
            return view
        collection = self.names.collection(user_id)
        self.index.refresh(collection)
        if self.index.count(collection) > self.views.max_user_vectors:
            return self.views.put(user_id, token, [], None)
        try:
            ids, matrix = self.index.vectors(collection)
        except UnreadableIndexError:  # healed here, once: a failing rebuild reaches the caller
            rebuild(self, user_id)
            ids, matrix = self.index.vectors(collection)
        return self.views.put(user_id, token, ids, matrix)

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
        requests = [(self._key(user_id), key) for user_id, key in requests]
        values = [self.catalog.get_derived(user_id, namespace, key) for user_id, key in requests]
        missing = [i for i, value in enumerate(values) if value is None]
        if missing:
            for i, value in zip(missing, compute(missing), strict=True):
                user_id, key = requests[i]
                self.catalog.put_derived(user_id, namespace, key, value)
                values[i] = value
        return values

    def latest(self, user_id: str, namespace: str, key: str) -> Any | None:
        """The value last written to a slot with :meth:`set_latest`, or None."""
        return self.catalog.get_derived(self._key(user_id), namespace, key)

    def set_latest(self, user_id: str, namespace: str, key: str, value: Any) -> bool:
        """Overwrite the user's slot (namespace, key) with a JSON value; False for unknown users.

        For derived state that is rebuilt rather than keyed by every input, such as a preference
        memory that records the revision it was built from; ``forget`` and ``delete`` erase it.
        """
        return self.catalog.replace_derived(self._key(user_id), namespace, key, value)

    def user_cache(self, build: Callable[[str], Any], *, max_users: int = 256) -> UserCache[Any]:
        """A per-user cache that this store invalidates on writes and empties on ``forget``."""
        cache: UserCache[Any] = UserCache(self.catalog.revision, build, key=self._key, max_users=max_users)
        self._caches.add(cache)
        return cache

    def check(self, progress: Callable[[int, int], None] | None = None) -> ConsistencyReport:
        """Compare SQL rows with the vectors the index can read back, for every user (a full scan).

        Records queued by :meth:`add` are indexed first, so only interrupted writes show as pending.
        It covers the whole store, every tenant, and reports by store key; ``progress(done, total)``
        is called after each user.
        """
        return scan(self, progress)

    def heal(self, report: ConsistencyReport | None = None) -> list[str]:
        """Fix what :meth:`check` found (it runs first when ``report`` is None); return users rebuilt.

        Damaged users' collections are rebuilt from SQL (a search heals its user by itself too),
        collections of no user erased, pending rows indexed. Store keys, as in the report.
        """
        return heal(self, self.check() if report is None else report)

    @property
    def write_lock(self) -> contextlib.AbstractContextManager[bool]:
        """The lock every write of this process takes (``store/recovery.py`` rebuilds under it)."""
        return self._write_lock
