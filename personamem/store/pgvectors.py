"""The vector side of the store inside its own PostgreSQL database (pgvector): no vector server.

One table, ``record_vectors``, keyed by (collection, vector id): the same keyed pseudonyms a Chroma
collection and its ids carry (``store/pseudonyms.py``), so the table holds no user id, record id or
text. Writes join the catalog's transaction (:meth:`PgVectorIndex.write`): a record, its event and
its vector commit together, so an ``add`` is acknowledged indexed, with no pending state to repair.

Every query names one collection and is answered by an exact scan of that user's rows through the
primary key, not by an HNSW index. Measured here with pgvector 0.6.2 (the ``pgserver`` wheel's),
100 users × 500 vectors plus one of 50,000, 384 dimensions: the exact top 10 of a 500-vector user
took 0.49 ms; one HNSW index over the whole table answered a user's query with 1 row instead of 10
(pgvector before 0.8 filters *after* the index scan, which stops at ``ef_search`` = 40 candidates);
a partial HNSW index for the 50,000-vector user took 81 s to build and found 13.5 % of the exact
top 10 at the default ``ef_search``, where its exact scan took 50 ms. Searches rarely reach this
table anyway: each process scores a user from its own copy of the vectors (``store/views.py``), and
reads here only to build that copy, or for users above its size limit.

Erasure: a deleted row stays in the table's pages as a dead tuple until PostgreSQL vacuums it, as
the catalog's rows do; ``docs/guarantees.md`` says what an operator runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import Connection, Engine

from personamem.errors import ConfigError

__all__ = ["TABLE", "PgVectorIndex"]

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


class PgVectorIndex:
    """Per-user vectors in a table of the catalog's PostgreSQL database, addressed by collection name.

    The same operations as :class:`~personamem.store.vectors.VectorIndex` (Chroma), plus
    :meth:`write` into a caller's transaction.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # psycopg connections that know the vector type (pgvector's adapters registered)
        self._registered: weakref.WeakSet[Any] = weakref.WeakSet()
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
        """Delete these collections' vectors (absent ones are skipped)."""
        names = list(names)
        if names:
            with self._engine.begin() as connection:
                self._raw(connection).execute(f"DELETE FROM {TABLE} WHERE collection = ANY(%s)", (names,))

    # -- reads ----------------------------------------------------------------------------------

    def _rows(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._engine.connect() as connection:
            return self._raw(connection).cursor(binary=True).execute(query, params).fetchall()

    def query(self, name: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The ``k`` nearest vectors to ``vector`` as (vector id, cosine similarity), best first (exact)."""
        if k <= 0:
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        return [(vid, float(score)) for vid, score in self._rows(_NEAREST, (q, name, q, k))]

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
