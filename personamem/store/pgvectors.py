"""The vector side of the store inside its own PostgreSQL database (pgvector): no vector server.

One table, ``record_vectors``, keyed by (collection, vector id): the same keyed pseudonyms a Chroma
collection and its ids carry (``store/pseudonyms.py``), so the table holds no user id, record id or
text. Writes join the catalog's transaction (:meth:`PgVectorIndex.write`): a record, its event and
its vector commit together, so an ``add`` is acknowledged indexed, with no pending state to repair.

Every query names one collection. A user's rows are scanned exactly through the primary key
(0.49 ms for the top 10 of 500 vectors), except a user past :data:`INDEX_AT` vectors, which gets an
HNSW index of its own: a *partial* index (``WHERE collection = ...``) on the vectors cast to their
dimension, built in the background (``CREATE INDEX CONCURRENTLY``, one process at a time) the first
time such a user is searched, and dropped when the user is forgotten. One HNSW index over the whole
table cannot serve one user (before pgvector 0.8 the filter runs *after* the index scan, which stops
at ``ef_search`` candidates: 1 row of 10). Measured with pgvector 0.6.2 (the ``pgserver`` wheel's) on
``bench/scale.py``'s 50,000-vector user, 384 dimensions, LoCoMo questions (``runs/exp70/pg_hnsw.py``):
built in 8.4 s with the build's memory sized to the graph, recall@10 against the exact scan 0.960 at
``ef_search`` 40, 0.993 at 100 and 1.000 at 200 (0.6, 0.8 and 1.2 ms a query) where the exact scan
took 32 ms; an insert into the indexed user 0.8 ms. (An earlier measurement, 13.5 % recall after an
81 s build, indexed without the cast or the memory and is superseded.) Searches rarely reach this
table anyway: each process scores a user from its own copy of the vectors (``store/views.py``), and
reads here to build that copy, or for users above its size limit: exactly those get the index.

Erasure: a deleted row stays in the table's pages, and in its user's index, as a dead tuple until
PostgreSQL vacuums it, as the catalog's rows do; ``docs/guarantees.md`` says what an operator runs.
Forgetting a user drops its index with its rows.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine

from personamem.errors import ConfigError

__all__ = ["INDEX_AT", "TABLE", "PgVectorIndex"]

log = logging.getLogger("personamem.store")

TABLE = "record_vectors"
_LOCK = 0x70_6D_76_65  # advisory lock key ("pmve"): one process creates the extension and table
_CREATE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    collection text NOT NULL,
    vector_id text NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (collection, vector_id)
)
"""
_UPSERT = (
    f"INSERT INTO {TABLE} (collection, vector_id, embedding) VALUES (%s, %s, %b) "
    "ON CONFLICT (collection, vector_id) DO UPDATE SET embedding = EXCLUDED.embedding"
)
_NEAREST = (
    f"SELECT vector_id, 1 - (embedding <=> %b) FROM {TABLE} WHERE collection = %s "
    "ORDER BY embedding <=> %b LIMIT %s"
)
INDEX_AT = 20_000
"""Vectors from which a user's searches go through an HNSW index of its own: the size past which a
process keeps no copy of the user's vectors (``VectorViews``' default limit), so the searches that
reach the table are exactly those of such users."""
MAX_EF = 1000
"""pgvector's largest ``hnsw.ef_search``: a query for more neighbours is answered by the exact scan."""
EF_SEARCH = 400
"""How wide a user's index looks however few neighbours are asked (``hnsw.ef_search``; pgvector's
default is 40). Recall@10 against the exact scan, ``bench/scale.py``'s user: at 50,000 vectors 1.000
from 200 on (1.2 ms; 2.2 ms at 400); at 200,000, in an index built at 50,000 and grown by inserts,
0.895 at 200 and 1.000 at 300."""
RECHECK_S = 30.0
"""How long a process trusts what it saw of a user's index (there or not) before it looks again."""
_BUILD_MEMORY_MB = (64, 2048)
"""Bounds of the ``maintenance_work_mem`` a build asks for: twice the user's vectors, so the graph is
built in memory (a graph that spills builds many times slower)."""
_VALID = "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)"  # no row: no such index
_COLLECTION = re.compile(r"[A-Za-z0-9_.-]{1,128}")  # pseudonyms: safe to write into SQL as literals


class PgVectorIndex:
    """Per-user vectors in a table of the catalog's PostgreSQL database, addressed by collection name.

    The same operations as :class:`~personamem.store.vectors.VectorIndex` (Chroma), plus
    :meth:`write` into a caller's transaction.
    """

    def __init__(self, engine: Engine, *, index_at: int = INDEX_AT) -> None:
        self._engine = engine
        self.index_at = index_at
        # psycopg connections that know the vector type (pgvector's adapters registered)
        self._registered: weakref.WeakSet[Any] = weakref.WeakSet()
        # collection -> (it has a valid HNSW index, when that was seen); builds running in this process
        self._indexes: dict[str, tuple[bool, float]] = {}
        self._building: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._create()

    def _create(self) -> None:
        """Create the extension (unless present) and the table, once across processes."""
        with self._engine.begin() as connection:
            raw = connection.connection.driver_connection
            assert raw is not None
            raw.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            present = raw.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
            if present is None:
                available = raw.execute(
                    "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
                ).fetchone()
                if available is None:
                    raise ConfigError(
                        "PostgreSQL without a Chroma server keeps vectors with pgvector, and this server "
                        "does not have the 'vector' extension installed: install pgvector "
                        "(https://github.com/pgvector/pgvector), or give a Chroma server (chroma_url)"
                    )
                try:
                    raw.execute("CREATE EXTENSION vector")
                except Exception as error:  # psycopg.errors.InsufficientPrivilege, mostly
                    raise ConfigError(
                        f"could not create the pgvector extension ({error}); run `CREATE EXTENSION vector;` "
                        "once in this database as a superuser"
                    ) from error
            raw.execute(_CREATE)

    def _raw(self, connection: Connection) -> Any:
        """The psycopg connection under ``connection``, with pgvector's numpy adapters registered."""
        raw = connection.connection.driver_connection
        assert raw is not None
        if raw not in self._registered:
            from pgvector.psycopg import register_vector

            register_vector(raw)
            self._registered.add(raw)
        return raw

    # -- writes ---------------------------------------------------------------------------------

    def write(self, connection: Connection, name: str, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Add or replace vectors inside the caller's open transaction on this database."""
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids but {len(vectors)} vectors")
        if ids:
            rows = [(name, vid, np.asarray(v, dtype=np.float32)) for vid, v in zip(ids, vectors, strict=True)]
            self._raw(connection).cursor().executemany(_UPSERT, rows)

    def remove(self, connection: Connection, ids: Sequence[str], *, name: str) -> None:
        """Delete vectors for ``ids`` from collection ``name`` inside the caller's open transaction."""
        if ids:
            self._raw(connection).execute(
                f"DELETE FROM {TABLE} WHERE collection = %s AND vector_id = ANY(%s)", (name, list(ids))
            )

    def upsert(self, name: str, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Add or replace vectors for ``ids`` in collection ``name``, in a transaction of their own."""
        with self._engine.begin() as connection:
            self.write(connection, name, ids, vectors)

    def delete(self, name: str, ids: Sequence[str]) -> None:
        """Remove vectors for ``ids`` from collection ``name`` (absent ids are ignored)."""
        with self._engine.begin() as connection:
            self.remove(connection, ids, name=name)

    def drop(self, names: Iterable[str]) -> None:
        """Delete these collections' vectors and their HNSW indexes (absent ones are skipped)."""
        names = list(names)
        if names:
            with self._engine.begin() as connection:
                raw = self._raw(connection)
                raw.execute(f"DELETE FROM {TABLE} WHERE collection = ANY(%s)", (names,))
                for name in names:  # a big user's index: locks the table until this commit, briefly
                    raw.execute(f'DROP INDEX IF EXISTS "{_index(name)}"')
                    self._indexes.pop(name, None)

    # -- reads ----------------------------------------------------------------------------------

    def _rows(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._engine.connect() as connection:
            return self._raw(connection).cursor(binary=True).execute(query, params).fetchall()

    def query(
        self, name: str, vector: np.ndarray, k: int, *, width: int | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest vectors to ``vector`` as (vector id, cosine similarity), best first.

        Exact, unless the user has an HNSW index (past :data:`INDEX_AT` vectors; the first such
        search starts its build and is answered exactly) and ``k`` is at most :data:`MAX_EF`: the
        index then looks ``max(k, width)`` wide: by default :data:`EF_SEARCH`, for a search's recall
        at k; the near-duplicate check, which needs the nearest only, asks for less (``duplicates.py``).
        """
        if k <= 0:
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if k <= MAX_EF and self._indexed(name, len(q)):
            return self._approximate(name, q, k, min(max(k, width or EF_SEARCH), MAX_EF))
        return [(vid, float(score)) for vid, score in self._rows(_NEAREST, (q, name, q, k))]

    def _approximate(self, name: str, q: np.ndarray, k: int, width: int) -> list[tuple[str, float]]:
        """The user's HNSW index asked for ``k`` neighbours, looking ``width`` wide (``hnsw.ef_search``).

        The collection is written into the statement as a literal, so the planner always matches the
        partial index, whatever plan a prepared statement would reuse.
        """
        with self._engine.begin() as connection:
            raw = self._raw(connection)
            raw.execute(f"SET LOCAL hnsw.ef_search = {int(width)}")
            rows = raw.cursor(binary=True).execute(_hnsw_query(name, len(q)), (q, q, k)).fetchall()
        return [(vid, float(score)) for vid, score in rows]

    def _indexed(self, name: str, dim: int) -> bool:
        """Whether the collection's own HNSW index can answer; starts its build where it is due."""
        seen = self._indexes.get(name)
        if seen is not None and time.monotonic() - seen[1] < RECHECK_S:
            return seen[0]  # either way looked at again after RECHECK_S: another process may drop it
        if _COLLECTION.fullmatch(name) is None:
            return False
        valid = self._rows(_VALID, (_index(name),))
        found = bool(valid and valid[0][0])
        self._indexes[name] = (found, time.monotonic())
        if not found and self.count(name) >= self.index_at:
            self.build_index(name, dim, wait=False)
        return found

    def build_index(self, name: str, dim: int, *, wait: bool = True) -> None:
        """Build collection ``name``'s HNSW index (``wait=False``: on a thread), unless it has a valid one.

        One process builds at a time (an advisory lock per collection); a build left invalid by a
        crash is dropped and made again. Writes go on meanwhile (``CONCURRENTLY``).
        """
        if _COLLECTION.fullmatch(name) is None:
            raise ValueError(f"not a collection name: {name!r}")
        with self._lock:
            running = self._building.get(name)
            if running is None or not running.is_alive():
                running = threading.Thread(target=self._build, args=(name, dim), daemon=True)
                self._building[name] = running
                running.start()
        if wait:
            running.join()

    def _build(self, name: str, dim: int) -> None:
        """:meth:`build_index`'s work, on its thread; a failure is a warning (exact scans answer)."""
        index, started = _index(name), time.monotonic()
        try:
            with self._engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
                raw = self._raw(connection)
                lock = (_LOCK, _index_key(name))
                if not raw.execute("SELECT pg_try_advisory_lock(%s, %s)", lock).fetchone()[0]:
                    return  # another process builds it; this one looks again after RECHECK_S
                try:
                    valid = raw.execute(_VALID, (index,)).fetchone()
                    if valid is None or not valid[0]:
                        self._create_index(raw, name, dim, drop_invalid=valid is not None)
                        seconds = time.monotonic() - started
                        log.info("built the HNSW index of a big user in %.1f s", seconds)
                finally:
                    raw.execute("SELECT pg_advisory_unlock(%s, %s)", lock)
            self._indexes.pop(name, None)  # the next search looks again, and finds it
        except Exception as error:  # the exact scan answers meanwhile; a search past RECHECK_S retries
            log.warning("could not build a user's HNSW index (%s); searching it exactly", error)

    def _create_index(self, raw: Any, name: str, dim: int, *, drop_invalid: bool) -> None:
        """``CREATE INDEX CONCURRENTLY`` of the collection's HNSW index, its graph built in memory."""
        index = _index(name)
        if drop_invalid:  # a build that died half way leaves an invalid index, never used
            raw.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{index}"')
        low, high = _BUILD_MEMORY_MB
        memory = min(max(2 * self.count(name) * (4 * dim + 16) // 2**20, low), high)
        raw.execute(f"SET maintenance_work_mem = '{memory}MB'")
        try:
            raw.execute(
                f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{index}" ON {TABLE} USING hnsw '
                f"((embedding::vector({dim})) vector_cosine_ops) WHERE collection = '{name}'"
            )
        finally:
            raw.execute("RESET maintenance_work_mem")
        raw.execute(f"ANALYZE {TABLE}")  # a bulk import's rows counted, so the planner picks the index

    def vectors(self, name: str, ids: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
        """The collection's vector ids (every one, or those of ``ids`` it has) and vectors, rows aligned."""
        query = f"SELECT vector_id, embedding FROM {TABLE} WHERE collection = %s"
        params: tuple[Any, ...] = (name,)
        if ids is not None:
            query, params = query + " AND vector_id = ANY(%s)", (name, list(ids))
        rows = self._rows(query + " ORDER BY vector_id", params)
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        return [vid for vid, _ in rows], np.stack([v.to_numpy() for _, v in rows]).astype(np.float32)

    def salvage(self, name: str) -> tuple[list[str], np.ndarray, set[str]]:
        """Every vector of the collection: rows in PostgreSQL are never half-readable."""
        ids, matrix = self.vectors(name)
        return ids, matrix, set()

    def ids(self, name: str) -> set[str]:
        """Ids of the collection's vectors."""
        return {vid for (vid,) in self._rows(f"SELECT vector_id FROM {TABLE} WHERE collection = %s", (name,))}

    def count(self, name: str) -> int:
        """How many vectors the collection holds (0 when absent)."""
        return int(self._rows(f"SELECT count(*) FROM {TABLE} WHERE collection = %s", (name,))[0][0])

    def names(self) -> set[str]:
        """Names of the collections holding vectors (for consistency checks)."""
        return {name for (name,) in self._rows(f"SELECT DISTINCT collection FROM {TABLE}", ())}

    # -- the rest of the index protocol: a database is one view for every process ---------------

    def refresh(self, name: str) -> None:
        """Nothing to do: every process reads the same database."""

    def evict(self, name: str) -> None:
        """Nothing is cached per collection."""

    def close(self) -> None:
        """Nothing to release: the engine is the catalog's, which closes it."""


def _hnsw_query(name: str, dim: int) -> str:
    """The nearest-neighbour query that collection ``name``'s HNSW index answers (vector, vector, k)."""
    vector = f"embedding::vector({dim})"
    return (
        f"SELECT vector_id, 1 - ({vector} <=> %b::vector({dim})) FROM {TABLE} WHERE collection = '{name}' "
        f"ORDER BY {vector} <=> %b::vector({dim}) LIMIT %s"
    )


def _index(name: str) -> str:
    """The name of collection ``name``'s HNSW index (a digest: identifiers hold 63 bytes)."""
    return "rv_hnsw_" + hashlib.sha256(name.encode()).hexdigest()[:32]


def _index_key(name: str) -> int:
    """The collection's advisory lock key beside :data:`_LOCK` (a signed 32-bit integer)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big", signed=True)
