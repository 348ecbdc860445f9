"""Where a store's vectors live: a Chroma server or folder, or the SQL database itself (pgvector).

Chosen when a store is connected, recorded in the store on first open, and checked on every open
after: a store opened with the other kind of index would find none of its vectors, and every indexed
record would silently drop out of dense search. The encoder the vectors came from is claimed the same
way, on first use (``claim_encoder``): another encoder's vectors live in another space; and so is the
key that names the vectors' collections and ids (``claim_names``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from personamem.errors import ConfigError, StoreError
from personamem.store.pgvectors import PgVectorIndex
from personamem.store.pseudonyms import Pseudonyms, legacy_collection, new_key
from personamem.store.sql import PSEUDONYM_KEY, SqlCatalog
from personamem.store.vectors import VectorIndex

if TYPE_CHECKING:
    from personamem.encoder import Encoder

__all__ = [
    "ENCODER_KEY",
    "VECTORS_KEY",
    "VectorHome",
    "claim_encoder",
    "claim_names",
    "claim_vector_home",
    "vector_index",
]

VectorHome = VectorIndex | PgVectorIndex
VECTORS_KEY = "vectors"  # store_info: "chroma" or "pgvector", fixed when the store is first opened
ENCODER_KEY = "encoder"  # store_info: "<name>:<dim>" of the encoder, fixed when the store first encodes


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


def claim_encoder(catalog: SqlCatalog, encoder: Encoder) -> Encoder:
    """``encoder``, recorded as the store's if it has none yet, else checked against the one recorded.

    Raises:
        StoreError: the store's vectors come from another encoder.
    """
    signature = f"{encoder.name}:{encoder.dim}"
    stored = catalog.claim_info(ENCODER_KEY, signature)
    if stored != signature:
        raise StoreError(
            f"this store's vectors come from encoder {stored}, not {signature}; "
            "open it with the same encoder or re-ingest into a new store"
        )
    return encoder


def claim_names(catalog: SqlCatalog, index: VectorHome) -> Pseudonyms:
    """The store's keyed pseudonyms; a store from before keys is re-keyed here, once.

    Its unkeyed collections are dropped before the new key is committed, so a crash in between
    only repeats the drop; the rows then come back as pending and ``repair`` re-indexes them.
    """
    key = catalog.info(PSEUDONYM_KEY)
    if key is None:
        users = list(catalog.all_users())
        if users:
            index.drop(legacy_collection(user_id) for user_id in users)
        key = catalog.adopt_pseudonym_key(new_key())
    return Pseudonyms(key)
