"""Where a store's vectors live: a Chroma server or folder, or the SQL database itself (pgvector).

Chosen when a store is connected, recorded in the store on first open, and checked on every open
after: a store opened with the other kind of index would find none of its vectors, and every indexed
record would silently drop out of dense search.
"""

from __future__ import annotations

from pathlib import Path

from personamem.errors import ConfigError
from personamem.store.pgvectors import PgVectorIndex
from personamem.store.sql import SqlCatalog
from personamem.store.vectors import VectorIndex

__all__ = ["VECTORS_KEY", "VectorHome", "claim_vector_home", "vector_index"]

VectorHome = VectorIndex | PgVectorIndex
VECTORS_KEY = "vectors"  # store_info: "chroma" or "pgvector", fixed when the store is first opened


def vector_index(
    catalog: SqlCatalog, *, chroma_url: str | None = None, chroma_path: str | Path | None = None
) -> VectorHome:
    """The vector index a connection names: a Chroma server, a Chroma folder, or (PostgreSQL) pgvector.

    Raises:
        ValueError: both Chroma arguments, or neither on a database other than PostgreSQL.
        ConfigError: PostgreSQL without the pgvector extension (and no right to create it).
    """
    if chroma_url is not None and chroma_path is not None:
        raise ValueError("give one of chroma_url (a Chroma server) or chroma_path (a folder), not both")
    if chroma_url is not None:
        return VectorIndex.http(chroma_url)
    if chroma_path is not None:
        return VectorIndex.persistent(chroma_path)
    dialect = catalog.engine.dialect.name
    if dialect == "postgresql":
        return PgVectorIndex(catalog.engine)
    raise ValueError(
        "give chroma_url (a Chroma server) or chroma_path (a folder): only PostgreSQL keeps the vectors "
        f"itself (pgvector), and {dialect} is not PostgreSQL"
    )


def claim_vector_home(catalog: SqlCatalog, index: VectorHome) -> None:
    """Record ``index``'s kind in the store on first open; refuse an index of the other kind after.

    A store from before pgvector (no mark, some records) keeps its vectors in Chroma.

    Raises:
        ConfigError: the store keeps its vectors in the other kind of index (the message says how
            to open it).
    """
    kind = "pgvector" if isinstance(index, PgVectorIndex) else "chroma"
    stored = catalog.info(VECTORS_KEY)
    if stored is None:
        stored = catalog.claim_info(VECTORS_KEY, "chroma" if kind == "pgvector" and catalog.count() else kind)
    if stored != kind:
        where = (
            "in Chroma: give chroma_url or chroma_path (the CLI: --chroma-url)"
            if stored == "chroma"
            else "in this PostgreSQL database (pgvector): connect without a Chroma argument"
        )
        raise ConfigError(f"this store keeps its vectors {where}; it was opened with {kind}")
