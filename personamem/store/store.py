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

Below the boundary the work is done by collaborators that every view shares: ``indexing.py`` (steps
2–4), ``vector_reads.py`` and ``visibility.py`` (what a read scores and hides), ``duplicates.py``,
``erasure.py``, ``expiry.py`` and ``live_pipeline.py`` (settings kept with the data), and
``recovery.py`` (repair on open, ``check`` and ``heal``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from personamem.encoder import Encoder, default_encoder
from personamem.errors import ConfigError, InvalidInputError
from personamem.records import Record, RecordEvent
from personamem.store.budget import MemoryBudget
from personamem.store.cache import UserCaches
from personamem.store.duplicates import DUPLICATE_THRESHOLD, DuplicatePolicy, Duplicates
from personamem.store.erasure import Erasure
from personamem.store.expiry import Expiry, ExpirySweeper, unexpired
from personamem.store.indexing import Indexing
from personamem.store.interaction_log import InteractionLog, retention_cutoff
from personamem.store.interaction_writer import InteractionWriter
from personamem.store.keys import KeyRing
from personamem.store.live_pipeline import LivePipeline
from personamem.store.read import NOW, Read
from personamem.store.recovery import ConsistencyReport, heal, index_pending_rows, rebuild, repair, scan
from personamem.store.sql import SqlCatalog
from personamem.store.tenants import Tenancy
from personamem.store.timeline import supersession
from personamem.store.user_values import UserValues
from personamem.store.vector_home import (
    VectorHome,
    claim_encoder,
    claim_names,
    claim_vector_home,
    vector_index,
)
from personamem.store.vector_reads import VectorReads
from personamem.store.vectors import VectorIndex
from personamem.store.views import VectorViews
from personamem.store.visibility import Visibility

__all__ = ["ConsistencyReport", "Store"]

SQL_FILE = "personamem.sqlite"
VECTOR_DIR = "chroma"


class Store(UserValues):
    """Records in SQL and vectors in Chroma or pgvector, consistent and isolated per user; thread-safe."""

    def __init__(self, catalog: SqlCatalog, index: VectorHome, encoder: Encoder | None = None) -> None:
        self.tenancy = Tenancy()
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
        # what this process keeps per user, within PERSONAMEM_CACHE_MB (store/budget.py)
        self.budget = MemoryBudget.configured(embedded=isinstance(index, VectorIndex) and index.embedded)
        self.views = VectorViews(max_bytes=self.budget.views)
        self.caches = UserCaches(catalog.revision, max_bytes=self.budget.derived)
        self.visibility = Visibility(catalog, self.caches)
        # settings kept with the data, per tenant; one of each shared by every view
        self.expiry = Expiry(catalog)
        self.live = LivePipeline(catalog)
        self.names = claim_names(catalog, index)
        self.indexing: Indexing = Indexing(  # the indexer retries a failed write from SQL's pending rows
            catalog,
            index,
            self.names,
            self.views,
            lambda: self.encoder,
            lambda: index_pending_rows(self.indexing),
        )
        rebuild_user = functools.partial(rebuild, self.indexing)
        self.reads = VectorReads(catalog, index, self.names, self.views, self.visibility, rebuild_user)
        self.duplicates = Duplicates(self.reads, self.indexing)
        self.logged = InteractionWriter(catalog.log_interactions)
        self.erasure = Erasure(self.indexing, self.caches, self.logged)
        self.repair()
        self._sweeper = ExpirySweeper(lambda: self.purge_expired(all_tenants=True))

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
        view.tenancy = Tenancy(tenant)
        view._owner = self
        return view

    @property
    def keys(self) -> KeyRing:
        """The API keys kept in this store's database (each names a tenant)."""
        return KeyRing(self.catalog)

    @property
    def tenant(self) -> str | None:
        """The tenant this view belongs to (None: the store's own users)."""
        return self.tenancy.tenant

    @property
    def interactions(self) -> InteractionLog:
        """The interaction log of the users this view sees (written only where logging is on)."""
        return InteractionLog(self.catalog, self.tenancy, self.logged)

    def _key(self, user_id: str) -> str:
        return self.tenancy.key(user_id)

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
                    self._encoder = claim_encoder(self.catalog, self._encoder or default_encoder())
                    self._encoder_checked = True
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
        self.logged.close()
        self.indexing.close()
        self.catalog.close()
        self.index.close()

    def flush(self) -> None:
        """Wait until every record from :meth:`add` is in the vector index (searches never need it).

        Raises:
            StoreError: indexing failed; the records stay pending and searchable, and are indexed later.
        """
        self.indexing.flush()

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
        [record] = self.tenancy.inward(self.expiry.stamp(self.tenant, [record]))
        vector = self.encoder.encode([record.text])
        record, new = self.duplicates.resolve(record, vector[0], duplicates, threshold)
        if new:
            self.indexing.stage([record], vector)
        return self.tenancy.outward([record])[0]

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
        records = self.tenancy.inward(self.expiry.stamp(self.tenant, records))
        return self.indexing.write(records, vectors, batch_size, progress)

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
        new, ended = supersession(old, new)
        [new] = self.tenancy.inward(self.expiry.stamp(self.tenant, [new]))
        [ended] = self.tenancy.inward([ended])
        vector = self.encoder.encode([new.text])
        self.indexing.settle()  # a queued old record is marked indexed by its hash
        self.indexing.stage([new], vector, relabel=[ended], relabel_event="superseded")
        return self.tenancy.outward([new])[0]

    @property
    def ttl(self) -> float | None:
        """The default time-to-live of new records in seconds (this tenant's, else the store's)."""
        return self.expiry.ttl(self.tenant)

    def set_ttl(self, seconds: float | None) -> None:
        """Give new records of this view (a tenant's, or the whole store) a default time-to-live."""
        self.expiry.set_ttl(self.tenant, seconds)

    def purge_expired(self, *, all_tenants: bool = False) -> int:
        """Erase every record of this view whose expiry has passed (as ``delete`` erases); return how many.

        Expired records are hidden from reads before this runs. ``all_tenants`` (the store's own
        view only: the background sweep, ``personamem purge``) takes every tenant's too, and erases
        the logged calls older than the retention window (``PERSONAMEM_INTERACTION_DAYS``, 30 days).
        """
        if all_tenants and self._owner is not None:
            raise InvalidInputError(f"tenant {self.tenant!r}'s view cannot purge other tenants")
        if all_tenants:  # logged calls past the retention window go with every tenant's sweep
            self.logged.flush()
            self.catalog.drop_interactions(retention_cutoff())
        return self.expiry.purge(None if all_tenants else self.tenancy, self.erasure.erase)

    @property
    def live_pipeline(self) -> str | None:
        """The ``[pipeline]`` table that serves this view's users, as JSON (None: the package default)."""
        return self.live.table(self.tenant)

    def set_live_pipeline(self, table: Mapping[str, Any]) -> None:
        """Serve ``table`` (a ``[pipeline]`` table) to this view's users; the one it replaces is kept."""
        self.live.serve(self.tenant, table)

    def rollback_live_pipeline(self) -> bool:
        """Put back the live pipeline that the last :meth:`set_live_pipeline` replaced; False if none."""
        return self.live.rollback(self.tenant)

    def forget(self, user_id: str) -> bool:
        """Delete every row, vector and cached value of the user; False if there was no such user."""
        return self.erasure.forget(self._key(user_id))

    def delete(self, user_id: str, record_ids: Sequence[str]) -> list[str]:
        """Delete these records of the user, leaving no trace of them; return the ids deleted."""
        return self.erasure.erase(self._key(user_id), record_ids)

    def repair(self) -> int:
        """Finish interrupted forgets and index pending rows; return how many rows were repaired."""
        return repair(self.indexing, self.erasure.finish_forget)

    def index_pending(self, pending: list[tuple[Record, np.ndarray | None]]) -> int:
        """Index pending rows, encoding only those whose vector was not kept; return how many."""
        return self.indexing.index_pending(pending)

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
        return self.tenancy.outward(unexpired([found[rid] for rid in record_ids if rid in found]))

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records, in insertion order: superseded ones too, expired ones not."""
        return self.tenancy.outward(unexpired(self.catalog.records(self._key(user_id))))

    def records_since(self, user_id: str, position: int = 0) -> tuple[int, list[Record]]:
        """:meth:`records` stored after ``position`` (0: all), with the position of the last one read.

        For values that grow with a user's history (``store/cache.py``): the position a value was
        built at is where its next read starts.
        """
        position, records = self.catalog.records_since(self._key(user_id), position)
        return position, self.tenancy.outward(unexpired(records))

    def hidden(self, user_id: str, read: Read = NOW) -> set[str]:
        """Ids of the user's records ``read`` must not see, by its time (``store/timeline.py``) or filter."""
        return self.visibility.hidden(self._key(user_id), read)

    def users(self) -> list[str]:
        """Users with records, sorted (a tenant view: that tenant's users only)."""
        return [user for key in self.catalog.users() if (user := self.tenancy.user(key)) is not None]

    def count_by_user(self) -> dict[str, int]:
        """Records per user of this view (users without records are absent)."""
        return {u: n for key, n in self.catalog.count_by_user().items() if (u := self.tenancy.user(key))}

    def last_calls(self) -> dict[str, str]:
        """The time of each of this view's users' latest logged call (ISO 8601, UTC)."""
        self.logged.flush()
        return {u: t for key, t in self.catalog.last_calls().items() if (u := self.tenancy.user(key))}

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of all users (of this view)."""
        if user_id is not None:
            return self.catalog.count(self._key(user_id))
        counts = self.catalog.count_by_user()
        return sum(n for key, n in counts.items() if self.tenancy.user(key) is not None)

    def revision(self, user_id: str) -> str | None:
        """A token that changes whenever the user's records change (None: unknown user)."""
        return self.catalog.revision(self._key(user_id))

    def nearest(self, user_id: str, vector: np.ndarray, k: int, read: Read) -> list[tuple[Record, float]]:
        """The user's ``k`` records closest to ``vector`` by cosine, best first, that ``read`` sees."""
        pairs = self.reads.nearest(self._key(user_id), vector, k, read)
        return list(zip(self.tenancy.outward([r for r, _ in pairs]), [s for _, s in pairs], strict=True))

    def vectors(self, user_id: str, read: Read = NOW) -> tuple[list[Record], np.ndarray]:
        """The user's records and vectors (rows aligned) at ``read``'s time, for corpus-level methods."""
        records, matrix = self.reads.vectors(self._key(user_id), read)
        return self.tenancy.outward(records), matrix

    def record_vectors(self, user_id: str, record_ids: Sequence[str]) -> np.ndarray:
        """The stored vectors of ``record_ids``, rows aligned; a zero row where the user has none."""
        return self.reads.record_vectors(self._key(user_id), record_ids, self.encoder.dim)

    def check(self, progress: Callable[[int, int], None] | None = None) -> ConsistencyReport:
        """Compare SQL rows with the vectors the index can read back, for every user (a full scan).

        Queued records are indexed first; every tenant, by store key; ``progress(done, total)`` per user.
        """
        return scan(self.indexing, progress)

    def heal(self, report: ConsistencyReport | None = None) -> list[str]:
        """Fix what :meth:`check` found (run first without ``report``); return the users rebuilt."""
        return heal(self.indexing, self.check() if report is None else report, self.erasure.finish_forget)

    @property
    def write_lock(self) -> contextlib.AbstractContextManager[bool]:
        """The lock every write of this process takes (``store/recovery.py`` rebuilds under it)."""
        return self.indexing.lock
