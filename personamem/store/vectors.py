"""The vector side of the store: one Chroma collection per user, holding only pseudonymous keys.

A collection per user makes isolation physical (a query cannot reach another user's vectors, whatever
the filter says), keeps a query over one user's few hundred vectors fast (about 2 ms, against 60 ms
for a ``where={"user_id": ...}`` query over a shared 100k-vector collection, measured here), and turns
``forget`` into dropping one collection. The index is addressed by the store's keyed pseudonyms
(``store/pseudonyms.py``) and holds no metadata.

Dropping a collection is not erasure in embedded Chroma (1.5, measured here): its SQLite file runs
without secure-delete, so the vectors and ids stay in free pages, and the collection's HNSW folder is
left on disk. :meth:`VectorIndex.drop` therefore also removes segment folders that no collection
owns and vacuums the database. And Chroma's HNSW files persist their unused capacity straight from
``malloc``: that memory can hold freed bytes of *another* user's vectors (107 of a forgotten user's
300 vectors were found in a second user's ``data_level0.bin``). An embedded index therefore asks
glibc to overwrite freed memory (``M_PERTURB``), process-wide; see :func:`_perturb_freed_memory`.

An embedded index is one process's view (measured with Chroma 1.5.9): each process keeps the HNSW
indexes it loaded in memory, and a query does not read what another process wrote since (its ``get``
of embeddings even fails with "Error finding id"), while any write first applies every write in
Chroma's log. So :meth:`VectorIndex.refresh` catches a collection up with a write that changes
nothing, and the store calls it when the user's index token says another process indexed. Writes
from several processes take a lock file beside the folder: Chroma does not serialize them itself.
A collection dropped by another process invalidates its handle; every call gets a new one and
carries on (a write recreates the collection).

That view can also fall *behind what is on disk*, and then a write loses data (found after a
SIGKILLed ``serve --workers 2``; ``tests/store/test_crash_recovery.py`` reproduces it without a crash).
Each process applies Chroma's log to its in-memory HNSW only past the *shared* watermark (the
vector segment's ``max_seq_id`` row), which a process advances when it persists its index (every
``sync_threshold`` = 1,000 vectors it applied), purging the log below it. A process that loaded the
collection earlier never applies the entries between what it had and that watermark; when it next
persists, its files replace the complete ones and the gap is permanent: the metadata segment lists
ids the HNSW lacks, and every ``get`` of embeddings fails with "Error finding id". So this index
remembers, per collection, the last log entry its process applied, and reopens its client (a fresh
load from disk, about 30 ms) before touching a collection whose watermark has moved past that
(:meth:`VectorIndex._keep_current`). A store damaged before this check is healed by the store
(:meth:`VectorIndex.salvage`, ``store/recovery.py``).

An embedded Chroma keeps the HNSW index of each collection it loaded in memory, 2.6 MiB or more per
user; ``store/chroma_memory.py`` bounds how many it keeps (``PERSONAMEM_CACHE_MB``), and how many
collection handles this index keeps.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import re
import shutil
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

import numpy as np
from filelock import FileLock

from personamem.errors import DiskFullError, UnreadableIndexError
from personamem.store.budget import MemoryBudget
from personamem.store.chroma_memory import (
    Handles,
    client_settings,
    close_client,
    embedded_client,
    loaded_collections,
)
from personamem.store.disk import disk_full, low_on_space, says_full
from personamem.store.engine import vacuum_sqlite
from personamem.store.pseudonyms import COLLECTION_PREFIX

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

__all__ = ["HNSW_FETCH", "VectorIndex", "opening_lock", "writing_lock"]

T = TypeVar("T")

HNSW_FETCH = 300
"""Neighbours a query asks of a collection's HNSW, however few are wanted (the best ``k`` are kept):
its search then looks at least that wide (hnswlib's ``ef`` is at least the count asked; Chroma's own is
100). On ``bench/scale.py``'s 200,000-record user, whose collection a delete had rebuilt, recall@10
against an exact scan went from 0.938 to 0.995 for 9.3 ms a query instead of 8.7."""
CHROMA_DB = "chroma.sqlite3"
_SEGMENT_DIR = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_M_PERTURB = -6  # glibc mallopt parameter: fill freed (and fresh) heap memory with a byte pattern
_REFRESH_ID = "personamem-refresh"  # deleted (never present) to make Chroma apply other processes' writes
_SALVAGE_CHUNK = 256  # ids read at a time when a collection's embeddings cannot be read whole
IDS_PER_CALL = 5_000
"""Ids one Chroma call names at most: embedded Chroma's SQLite refuses a statement of more than
32,766 variables, so a read or delete of a big user's ids goes in chunks (a 40,000-id read failed)."""
# the persisted watermark of a collection's vector segment, and the newest entry of the whole log
# (an integer primary key: found at once, where the newest of one collection would be a scan)
_LOG_POSITION = """
SELECT
  (SELECT m.seq_id FROM max_seq_id m JOIN segments s ON s.id = m.segment_id
   WHERE s.collection = c.id AND s.scope = 'VECTOR'),
  (SELECT max(seq_id) FROM embeddings_queue)
FROM collections c WHERE c.name = ?
"""
_perturbed = False


def writing_lock(folder: Path) -> FileLock:
    """The lock file beside an embedded folder that every process takes to change its files.

    Chroma does not serialize writes from several processes itself; a backup takes it too, so no
    process changes the folder while it is copied (``store/backup.py``).
    """
    return FileLock(str(folder) + ".write.lock")


def opening_lock(folder: Path) -> FileLock:
    """The lock file beside an embedded folder taken to open a client: a first open writes the schema."""
    return FileLock(str(folder) + ".lock")


def _perturb_freed_memory() -> bool:
    """Make glibc overwrite heap memory on free and on allocation, once per process.

    Needed for erasure, not hygiene: Chroma writes its HNSW files' unused capacity from memory that
    ``malloc`` did not clear, so without it any user's file may carry freed bytes of another user's
    vectors past that user's ``forget``. The cost is a fill of each small allocation (large ones are
    fresh pages from the kernel, already zero). A no-op, returning False, off glibc; there, start
    the process with the allocator's own option (``MallocScribble=1`` on macOS).
    """
    global _perturbed
    if not _perturbed and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _perturbed = bool(libc.mallopt(_M_PERTURB, 0x5A))
    return _perturbed


def _opened(folder: Path, collections: int, doing: str, *, fresh: bool = False) -> ClientAPI:
    """:func:`embedded_client`, a failure for want of space raised as :class:`DiskFullError`.

    Chroma cannot start without space to write, and its error then names no cause.
    """
    try:
        return embedded_client(folder, collections, fresh=fresh)
    except Exception as error:
        if says_full(error) or low_on_space(folder):
            raise disk_full(folder, doing, error) from error
        raise


class VectorIndex:
    """Per-user vector collections in a Chroma client (embedded or remote), addressed by name."""

    def __init__(
        self, client: ClientAPI | None, *, location: str, folder: Path | None = None, collections: int = 0
    ) -> None:
        self._held = client  # an embedded client is opened on first use (``_client``)
        self._held_lock = threading.Lock()
        self._collections_loaded = collections
        self.location = location
        self._folder = folder
        self._collections: Handles[Collection] = Handles()  # the most recently used (chroma_memory.py)
        self._lock = threading.Lock()
        # collections this process touched: only those can be held, stale, in Chroma's memory
        self._loaded: set[str] = set()
        # per touched collection, the newest log entry this process's in-memory index holds (a floor)
        self._applied: dict[str, int] = {}
        self._log: sqlite3.Connection | None = None  # reads Chroma's log position (embedded only)
        self._log_lock = threading.Lock()
        # one writer at a time across the processes sharing an embedded folder
        self._writing = writing_lock(folder) if folder is not None else None
        self._broken = False  # a call failed and its client is not replaced yet (see _discard)

    @property
    def _client(self) -> ClientAPI:
        """The Chroma client; an embedded one is started on first use (:meth:`_start`)."""
        return self._held if self._held is not None else self._start()

    def _start(self) -> ClientAPI:
        """Open the embedded client, once.

        Deferred to first use because a search of a user whose vectors SQL keeps never reads the
        index (``store/vector_reads.py``): a store opened for one read neither imports chromadb
        (0.4 s) nor starts its client.
        """
        assert self._folder is not None
        with self._held_lock, opening_lock(self._folder):
            if self._held is None:
                self._held = _opened(self._folder, self._collections_loaded, "opening the vector index")
        return self._held

    @property
    def embedded(self) -> bool:
        """True for an in-process index over a folder, whose view other processes do not update."""
        return self._folder is not None

    def exclusive(self) -> contextlib.AbstractContextManager[object]:
        """No other process writes the embedded folder (or copies it: a backup) inside this block.

        Reentrant in the thread holding it, so writes made inside it take it again at no cost; a
        no-op for a Chroma server, which serializes its own writes.
        """
        return self._writing if self._writing is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def _write(self, doing: str) -> Iterator[None]:
        """One write to the index, under the folder's lock; a failed one replaces an embedded client.

        A failure for want of space raises :class:`DiskFullError`.
        """
        from chromadb.errors import NotFoundError

        with self.exclusive():
            try:
                self._usable()
                yield
            except NotFoundError:  # a collection another process dropped: the client is fine
                raise
            except Exception as error:
                self._discard()
                full = self._full(doing, error)
                if full is not None:
                    raise full from error
                raise

    def _discard(self) -> None:
        """After a failed call, replace an embedded client now, or before its next call if that fails.

        Chroma 1.5.9's embedded client, once a compaction failed (a full disk, in a write or in the
        log a read applies first), hangs for good in a later call, inside Rust and holding the GIL,
        so every thread of the process stops (measured on a full tmpfs); a new client over the same
        folder does not.
        """
        if self.embedded:
            self._broken = True
            with contextlib.suppress(Exception):
                self._usable()

    def _usable(self) -> None:
        """Replace the client a failed call left (see :meth:`_discard`) before anything uses it."""
        if self._broken:
            with self.exclusive():  # no write of this process is in flight on the old client
                if self._broken:
                    self._reopen()

    def _full(self, doing: str, error: Exception) -> DiskFullError | None:
        """The :class:`DiskFullError` for a failed write that ran out of space; None for any other failure."""
        if self._folder is not None and _out_of_space(self._folder, error):
            return disk_full(self._folder, doing, error)
        return disk_full(self.location, doing, error) if says_full(error) else None

    @classmethod
    def persistent(cls, path: str | Path) -> VectorIndex:
        """An embedded, on-disk Chroma in ``path``, keeping the budget's count of collections loaded.

        The client of a folder that has a database already starts on first use (:attr:`_client`);
        starting is serialized by a lock file beside the folder, as Chroma creates its schema on
        first open without a lock between processes. Where it cannot start for want of space, the
        start raises :class:`DiskFullError` (Chroma's own error then names no cause).
        """
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        _perturb_freed_memory()
        collections = MemoryBudget.configured(embedded=True).chroma_collections
        index = cls(None, location=str(folder), folder=folder, collections=collections)
        if not (folder / CHROMA_DB).is_file():  # a new folder gets its schema now, as backups expect
            index._start()
        return index

    @classmethod
    def http(cls, url: str) -> VectorIndex:
        """A Chroma server at ``url`` (``http://host:port``)."""
        import chromadb

        parts = urlparse(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"Chroma URL must look like http://host:port, got {url!r}")
        client = chromadb.HttpClient(
            host=parts.hostname,
            port=parts.port or (443 if parts.scheme == "https" else 8000),
            ssl=parts.scheme == "https",
            settings=client_settings(),
        )
        return cls(client, location=url)

    def _collection(self, name: str, *, create: bool) -> Collection | None:
        from chromadb.errors import NotFoundError

        self._usable()
        self._keep_current(name)
        with self._lock:
            cached = self._collections.get(name)
            if cached is not None:
                return cached
            if self.embedded and name not in self._applied:  # a first load holds at least this
                self._applied[name] = self._position(name)[0]
            try:
                if create:
                    found = self._client.get_or_create_collection(
                        name,
                        embedding_function=None,  # we pass our own vectors; never let Chroma load a model
                        configuration={"hnsw": {"space": "cosine"}},
                    )
                else:
                    found = self._client.get_collection(name, embedding_function=None)
            except NotFoundError:
                return None
            self._collections[name] = found
            self._loaded.add(name)
            return found

    def upsert(self, name: str, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Add or replace vectors for ``ids`` in collection ``name`` (created if absent)."""
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids but {len(vectors)} vectors")
        if not ids:
            return
        from chromadb.errors import NotFoundError

        batch = self._client.get_max_batch_size()
        with self._write(f"writing {len(ids)} vector(s) to the vector index"):
            for attempt in (1, 2):
                collection = self._collection(name, create=True)
                assert collection is not None
                try:
                    for start in range(0, len(ids), batch):
                        chunk = slice(start, start + batch)
                        collection.upsert(ids=list(ids[chunk]), embeddings=vectors[chunk])
                    self._note_applied(name)
                    return
                except NotFoundError:  # dropped by another process since we cached the handle
                    self.evict(name)
                    if attempt == 2:
                        raise

    def delete(self, name: str, ids: Sequence[str]) -> None:
        """Remove vectors for ``ids`` from collection ``name`` (absent ids are ignored)."""
        wanted = list(ids)
        for start in range(0, len(wanted), IDS_PER_CALL):
            self._delete(name, wanted[start : start + IDS_PER_CALL])

    def refresh(self, name: str) -> None:
        """Make this process's view of the collection current with what other processes wrote.

        A no-op for a Chroma server (one process serves every client), and for a collection this
        process never touched (Chroma loads it from disk when first used). Otherwise a delete of an
        id that never exists: Chroma applies its log, other processes' writes included, before it.
        """
        if self.embedded and name in self._loaded:
            self._delete(name, [_REFRESH_ID])

    def _delete(self, name: str, ids: list[str]) -> None:
        from chromadb.errors import NotFoundError

        with self._write(f"deleting {len(ids)} vector(s) from the vector index"):
            self.evict(name)  # the handle may name a collection another process dropped
            collection = self._collection(name, create=False)
            if collection is not None:
                with contextlib.suppress(NotFoundError):  # dropped again meanwhile: nothing to delete
                    collection.delete(ids=ids)
                    self._note_applied(name)

    def _read(self, name: str, read: Callable[[Collection], T], absent: T, *, damaged: bool = False) -> T:
        """``read(collection)``, or ``absent`` when there is no such collection.

        A handle whose collection another process dropped (and maybe made again) fails with
        NotFoundError; the read is tried once more with a new handle. A client that failed a write on
        a full disk may later fail reads of segment files it never wrote ("Nothing found on disk",
        after space returned): an embedded read that fails is tried once more on a new client. An
        embedded read first applies
        Chroma's log, which needs space to write: on a nearly full disk its failure is
        :class:`DiskFullError`, not a damaged collection to rebuild (which could not be written).
        With ``damaged`` (the collection already failed a read on a new client, in :meth:`salvage`),
        a failed read is that damage, raised at once on the same client.
        """
        from chromadb.errors import InternalError, NotFoundError

        for attempt in range(2):
            collection = self._collection(name, create=False)
            if collection is None:
                return absent
            try:
                return read(collection)
            except NotFoundError:
                self.evict(name)
            except InternalError as exc:  # e.g. "Error finding id": the HNSW lacks ids the metadata lists
                if damaged and not (self._folder is not None and _out_of_space(self._folder, exc)):
                    raise UnreadableIndexError(f"vector collection {name} cannot be read: {exc}") from exc
                self._discard()
                if attempt == 0 and self._folder is not None:
                    continue  # a client a full disk left may expect files it never wrote: a new one reads
                if self._folder is not None and _out_of_space(self._folder, exc):
                    raise disk_full(self._folder, "reading the vector index", exc) from exc
                raise UnreadableIndexError(f"vector collection {name} cannot be read: {exc}") from exc
        return absent

    def query(
        self, name: str, vector: np.ndarray, k: int, *, width: int | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest vectors to ``vector`` as (vector id, cosine similarity), best first.

        HNSW looks ``max(k, width)`` wide: by default :data:`HNSW_FETCH`, for a search's recall at
        k; the near-duplicate check, which needs the nearest only, asks for less (``duplicates.py``).
        """
        if k <= 0:
            return []
        query, wide = np.asarray(vector, dtype=np.float32).reshape(1, -1), max(k, width or HNSW_FETCH)
        result = self._read(
            name, lambda c: c.query(query_embeddings=query, n_results=wide, include=["distances"]), None
        )
        if result is None:
            return []
        distances = result["distances"]
        assert distances is not None
        return [(rid, 1.0 - float(d)) for rid, d in zip(result["ids"][0], distances[0], strict=True)][:k]

    def vectors(self, name: str, ids: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
        """The collection's vector ids (every one, or those of ``ids`` it has) and vectors, rows aligned.

        Empty when the collection is absent.
        """
        empty: tuple[list[str], np.ndarray] = ([], np.zeros((0, 0), dtype=np.float32))
        if ids is None:
            result = self._read(name, lambda c: c.get(include=["embeddings"]), None)
            return empty if result is None else _rows(result)
        wanted = list(ids)
        found: list[str] = []
        parts: list[np.ndarray] = []
        for start in range(0, len(wanted), IDS_PER_CALL):
            chunk = wanted[start : start + IDS_PER_CALL]

            def read(c: Collection, chunk: list[str] = chunk) -> Any:
                return c.get(ids=chunk, include=["embeddings"])

            result = self._read(name, read, None)
            if result is None:
                return empty
            got, matrix = _rows(result)
            found += got
            if len(got):
                parts.append(matrix)
        return (found, np.concatenate(parts)) if parts else empty

    def salvage(self, name: str) -> tuple[list[str], np.ndarray, set[str]]:
        """What can be read of a damaged collection: (ids, vectors) readable, and the ids that are not.

        The ids come from Chroma's metadata segment, which stays readable; the embeddings are read
        by :func:`_read_around_damage`.
        """

        def read(chunk: list[str], damaged: bool) -> Any:
            return self._read(name, lambda c: c.get(ids=chunk, include=["embeddings"]), None, damaged=damaged)

        return _read_around_damage(sorted(self.ids(name)), read)

    def ids(self, name: str) -> set[str]:
        """Ids of the collection's vectors."""
        return self._read(name, lambda c: set(c.get(include=[])["ids"]), set())

    def count(self, name: str) -> int:
        """How many vectors the collection holds (0 when absent)."""
        return self._read(name, lambda c: c.count(), 0)

    def drop(self, names: Iterable[str]) -> None:
        """Delete these collections (absent ones are skipped) and, when embedded, erase their bytes."""
        from chromadb.errors import NotFoundError

        with self._write("dropping vector collections"):
            for name in names:
                self.evict(name)
                self._applied.pop(name, None)  # a collection made again later starts afresh
                with contextlib.suppress(NotFoundError):
                    self._client.delete_collection(name)
            if self._folder is not None:
                _erase_unowned(self._folder)

    def _position(self, name: str) -> tuple[int, int]:
        """The collection's persisted watermark and newest log entry (0, 0 when absent or not embedded)."""
        if self._folder is None:
            return 0, 0
        if self._held is None:  # started first: the start writes or migrates the schema read here
            self._start()
        with self._log_lock:
            if self._log is None:
                self._log = sqlite3.connect(self._folder / CHROMA_DB, timeout=30, check_same_thread=False)
            row = self._log.execute(_LOG_POSITION, (name,)).fetchone()
        return (0, 0) if row is None else (row[0] or 0, row[1] or 0)

    def _note_applied(self, name: str) -> None:
        """After a write of this process: its in-memory index holds every entry of the log so far.

        The write made Chroma apply the collection's log to its end, so every entry up to the log's
        newest, of any collection, is either applied or not this collection's.
        """
        if self.embedded:
            self._applied[name] = self._position(name)[1]

    def _keep_current(self, name: str) -> None:
        """Reload from disk when another process persisted the collection past what this one holds.

        Otherwise this process would never apply the entries in between, and its next persist would
        overwrite the complete files with an index that lacks them (see the module docstring).
        """
        applied = self._applied.get(name)
        if applied is None or self._position(name)[0] <= applied:
            return
        with self.exclusive():  # no write of this process is in flight on the old, lagging client
            applied = self._applied.get(name)
            if applied is not None and self._position(name)[0] > applied:
                self._reopen()

    def _reopen(self) -> None:
        """A new client over the same folder: Chroma loads each collection from disk again."""
        assert self._folder is not None
        with self._lock, opening_lock(self._folder):  # readers holding the old client finish on it
            loaded = (loaded_collections(self._held) if self._held else None) or self._collections_loaded
            self._held = _opened(self._folder, loaded, "opening the vector index again", fresh=True)
            self._collections.clear()
            self._applied.clear()  # each collection's next first load records its watermark again
            self._broken = False

    def names(self) -> set[str]:
        """Names of all per-user collections (for consistency checks)."""
        self._usable()
        return {c.name for c in self._client.list_collections() if c.name.startswith(COLLECTION_PREFIX)}

    def close(self) -> None:
        """Release the client (database handles, HTTP connections)."""
        self._collections.clear()
        with self._log_lock:
            if self._log is not None:
                self._log.close()
                self._log = None
        if self._held is not None:
            close_client(self._held)

    def evict(self, name: str) -> None:
        """Forget the cached collection handle."""
        with self._lock:
            self._collections.pop(name, None)


def _erase_unowned(folder: Path) -> None:
    """Remove segment folders no collection owns, then vacuum Chroma's database.

    Folders are listed before the ``segments`` table is read: Chroma inserts a segment's row
    before it creates the folder, so a folder without a row was dropped, never half-made.
    """
    folders = [p for p in folder.iterdir() if p.is_dir() and _SEGMENT_DIR.match(p.name)]
    with contextlib.closing(sqlite3.connect(folder / CHROMA_DB, timeout=30)) as db:
        owned = {row[0] for row in db.execute("SELECT id FROM segments")}
    for segment in folders:
        if segment.name not in owned:
            _shred(segment)
    vacuum_sqlite(folder / CHROMA_DB)  # rewrites the file without its free pages


def _shred(folder: Path) -> None:
    """Overwrite every file in ``folder`` with zeros, then delete it.

    Zeroing first means the bytes are gone even while another process still holds a file open (an
    unlinked file lives on until closed).
    """
    for file in folder.rglob("*"):
        if file.is_file():
            with contextlib.suppress(OSError), file.open("r+b") as handle:
                size = handle.seek(0, 2)
                handle.seek(0)
                handle.write(bytes(size))
    shutil.rmtree(folder, ignore_errors=True)


def _rows(result: Any) -> tuple[list[str], np.ndarray]:
    """(ids, vectors) of a Chroma ``get`` that included the embeddings."""
    embeddings = result["embeddings"]
    assert embeddings is not None
    return list(result["ids"]), np.asarray(embeddings, dtype=np.float32)


def _out_of_space(folder: Path, error: Exception) -> bool:
    """Whether a call on the embedded index at ``folder`` failed for want of disk space."""
    return says_full(error) or low_on_space(folder)


def _read_around_damage(
    listed: list[str], read: Callable[[list[str], bool], Any]
) -> tuple[list[str], np.ndarray, set[str]]:
    """The vectors of ``listed`` that read back, and the ids that do not.

    ``read(chunk, damaged)`` is a Chroma ``get`` of the chunk's embeddings, raising
    :class:`UnreadableIndexError`. A chunk that fails is halved until the unreadable ids are found,
    so one lost vector costs only itself; after the first failure (tried again on a new client, as
    every read is) ``damaged`` keeps the failed reads on one client. Read one id at a time, each on
    a new client, 25 lost of 1,242 took 3.9 s of CPU, against 0.2 s (the same ids, vectors and lost ids).
    """
    ids: list[str] = []
    rows: list[np.ndarray] = []
    lost: set[str] = set()
    damaged = False

    def read_part(chunk: list[str]) -> None:
        nonlocal damaged
        try:
            got = read(chunk, damaged)
        except UnreadableIndexError:
            damaged = True
            if len(chunk) == 1:
                lost.update(chunk)
                return
            read_part(chunk[: len(chunk) // 2])
            read_part(chunk[len(chunk) // 2 :])
            return
        if got is not None and got["embeddings"] is not None:
            ids.extend(got["ids"])
            rows.extend(np.asarray(got["embeddings"], dtype=np.float32))

    for start in range(0, len(listed), _SALVAGE_CHUNK):
        read_part(listed[start : start + _SALVAGE_CHUNK])
    return ids, (np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)), lost
