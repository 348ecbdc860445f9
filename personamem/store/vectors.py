"""The vector side of the store: one Chroma collection per user, holding only pseudonymous keys.

A collection per user makes isolation physical (a query cannot reach another user's vectors, whatever
the filter says), keeps a query over one user's few hundred vectors fast (about 2 ms, against 60 ms
for a ``where={"user_id": ...}`` query over a shared 100k-vector collection, measured here), and turns
``forget`` into dropping one collection. Collection names and vector ids are hashes and no metadata
is stored, because Chroma's database keeps deleted strings in free pages.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import numpy as np

if TYPE_CHECKING:
    from chromadb.api import ClientAPI
    from chromadb.api.models.Collection import Collection

__all__ = ["VectorIndex", "collection_name"]

_PREFIX = "pm-"


def collection_name(user_id: str) -> str:
    """A Chroma-legal, fixed-length name for a user's collection (Chroma allows [a-zA-Z0-9._-])."""
    return _PREFIX + hashlib.blake2b(user_id.encode("utf-8"), digest_size=16).hexdigest()


def _settings() -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False)  # this library holds personal data: no telemetry


class VectorIndex:
    """Per-user vector collections in a Chroma client (embedded or remote)."""

    def __init__(self, client: ClientAPI, *, location: str) -> None:
        self._client = client
        self.location = location
        self._collections: dict[str, Collection] = {}
        self._lock = threading.Lock()

    @classmethod
    def persistent(cls, path: str | Path) -> VectorIndex:
        """An embedded, on-disk Chroma in ``path``."""
        import chromadb

        Path(path).mkdir(parents=True, exist_ok=True)
        return cls(chromadb.PersistentClient(path=str(path), settings=_settings()), location=str(path))

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
            settings=_settings(),
        )
        return cls(client, location=url)

    def _collection(self, user_id: str, *, create: bool) -> Collection | None:
        from chromadb.errors import NotFoundError

        with self._lock:
            cached = self._collections.get(user_id)
            if cached is not None:
                return cached
            name = collection_name(user_id)
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
            self._collections[user_id] = found
            return found

    def upsert(self, user_id: str, ids: Sequence[str], vectors: np.ndarray) -> None:
        """Add or replace the user's vectors for ``ids``."""
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids but {len(vectors)} vectors")
        if not ids:
            return
        collection = self._collection(user_id, create=True)
        assert collection is not None
        batch = self._client.get_max_batch_size()
        for start in range(0, len(ids), batch):
            collection.upsert(ids=list(ids[start : start + batch]), embeddings=vectors[start : start + batch])

    def delete(self, user_id: str, ids: Sequence[str]) -> None:
        """Remove the user's vectors for ``ids`` (absent ids are ignored)."""
        collection = self._collection(user_id, create=False)
        if collection is not None and ids:
            collection.delete(ids=list(ids))

    def query(self, user_id: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The user's ``k`` nearest vectors to ``vector`` as (vector id, cosine similarity), best first."""
        from chromadb.errors import NotFoundError

        collection = self._collection(user_id, create=False)
        if collection is None or k <= 0:
            return []
        try:
            result = collection.query(
                query_embeddings=np.asarray(vector, dtype=np.float32).reshape(1, -1),
                n_results=k,
                include=["distances"],
            )
        except NotFoundError:  # dropped by another process since we cached the handle
            self.evict(user_id)
            return []
        distances = result["distances"]
        assert distances is not None
        return [(rid, 1.0 - float(d)) for rid, d in zip(result["ids"][0], distances[0], strict=True)]

    def vectors(self, user_id: str) -> tuple[list[str], np.ndarray]:
        """All of the user's vector ids and their vectors (rows aligned); empty for an unknown user."""
        collection = self._collection(user_id, create=False)
        if collection is None:
            return [], np.zeros((0, 0), dtype=np.float32)
        result = collection.get(include=["embeddings"])
        embeddings = result["embeddings"]
        assert embeddings is not None
        return list(result["ids"]), np.asarray(embeddings, dtype=np.float32)

    def ids(self, user_id: str) -> set[str]:
        """Ids of the user's vectors."""
        collection = self._collection(user_id, create=False)
        return set(collection.get(include=[])["ids"]) if collection is not None else set()

    def drop_user(self, user_id: str) -> None:
        """Delete the user's collection; a no-op if it does not exist."""
        from chromadb.errors import NotFoundError

        self.evict(user_id)
        with contextlib.suppress(NotFoundError):
            self._client.delete_collection(collection_name(user_id))

    def collection_names(self) -> set[str]:
        """Names of all per-user collections (for consistency checks)."""
        return {c.name for c in self._client.list_collections() if c.name.startswith(_PREFIX)}

    def close(self) -> None:
        """Release the client (database handles, HTTP connections)."""
        self._collections.clear()
        # chromadb 1.5's HTTP client (and its internal admin client) leave their httpx sessions open
        # even in close(); close them here or every connect() leaks sockets
        for client in (self._client, getattr(self._client, "_admin_client", None)):
            session = getattr(getattr(client, "_server", None), "_session", None)
            if session is not None:
                session.close()
        close = getattr(self._client, "close", None)  # not on ClientAPI's type, nor in chromadb < 1.4
        if close is not None:
            close()

    def evict(self, user_id: str) -> None:
        """Forget the cached collection handle."""
        with self._lock:
            self._collections.pop(user_id, None)
