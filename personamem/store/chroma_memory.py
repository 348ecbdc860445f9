"""The memory an embedded Chroma holds per collection, bounded: loaded HNSW indexes and our handles.

Chroma 1.5.9's in-process client runs on its Rust bindings, which ignore ``chroma_memory_limit_bytes``
and ``chroma_segment_cache_policy="LRU"``: those bound the segment cache of the Python implementation
(``chromadb.api.segment``) that a ``PersistentClient`` no longer runs. The bindings take one bound,
``hnsw_cache_size``: how many collections' HNSW indexes stay loaded (an LRU in 64 shards), which
the client sets to the open-file limit over 5 to bound the files those indexes hold open: 4,000 at
a limit of 20,000, 209,715 at the common 1,048,576. In practice every collection a process queried
stayed loaded, 2.6 to 4.4 MiB each (``store/budget.py``).

:func:`embedded_client` makes the client's system itself with that count lowered to the budget's,
then opens the client, which finds the system registered under its folder and uses it (the settings
are the same). Measured on 600 collections of 20 vectors, each queried once, process RSS after:
1,660 MiB at Chroma's count (4,000), 813 at 256, 495 at 128, and about 320 at 64, 32 or 1, the
floor its shards keep. An evicted index is freed, not merely closed: with the count at 50, 1,000
collections of 200 vectors left the process at 343 MiB, against 3,029 MiB at 4,000.

Our own handle per collection (a ``Collection`` object, about 12 KiB of Python) is kept in
:class:`Handles`, bounded by count, so a process that met 10,000 users does not hold 10,000 handles.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

__all__ = [
    "MAX_HANDLES",
    "Handles",
    "client_settings",
    "close_client",
    "embedded_client",
    "loaded_collections",
]

MAX_HANDLES = 256  # collection handles kept by one index (3 MiB); a miss costs Chroma a SQL read (~1 ms)

V = TypeVar("V")


def client_settings() -> Any:
    """The settings of every Chroma client this library opens."""
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False)  # this library holds personal data: no telemetry


def embedded_client(folder: Path, collections: int, *, fresh: bool = False) -> ClientAPI:
    """A client over ``folder`` that keeps at most ``collections`` HNSW indexes loaded (0: Chroma's count).

    A process that has a client over the folder already shares its system, and its count, as a
    second ``PersistentClient`` would, unless ``fresh``: that system would hand back the same
    in-memory indexes, where a fresh one loads each collection from disk again. Never above Chroma's
    own count, which bounds open files.
    """
    import chromadb
    from chromadb.api import ServerAPI
    from chromadb.api.shared_system_client import SharedSystemClient
    from chromadb.config import System
    from chromadb.telemetry.product import ProductTelemetryClient

    settings = client_settings()
    settings.persist_directory = str(folder)  # as PersistentClient sets them, so it finds this system
    settings.is_persistent = True
    identifier = SharedSystemClient._get_identifier_from_settings(settings)
    if fresh:
        SharedSystemClient._identifier_to_system.pop(identifier, None)
    if identifier not in SharedSystemClient._identifier_to_system:
        system = System(settings)
        component: Callable[[Any], Any] = system.instance  # the components PersistentClient makes
        component(ProductTelemetryClient)
        api = component(ServerAPI)
        if collections > 0 and isinstance(getattr(api, "hnsw_cache_size", None), int):
            api.hnsw_cache_size = min(api.hnsw_cache_size, collections)  # read when the system starts
        system.start()
        SharedSystemClient._identifier_to_system[identifier] = system
    return chromadb.PersistentClient(path=str(folder), settings=client_settings())


def close_client(client: ClientAPI) -> None:
    """Release a client's database handles and HTTP sessions.

    chromadb 1.5's HTTP client (and its internal admin client) leave their httpx sessions open even
    in ``close()``; closed here, or every connect leaks sockets.
    """
    for held in (client, getattr(client, "_admin_client", None)):
        session = getattr(getattr(held, "_server", None), "_session", None)
        if session is not None:
            session.close()
    close = getattr(client, "close", None)  # not on ClientAPI's type, nor in chromadb < 1.4
    if close is not None:
        close()


def loaded_collections(client: ClientAPI) -> int | None:
    """How many HNSW indexes ``client`` keeps loaded at most (None: not an embedded client)."""
    count = getattr(getattr(client, "_server", None), "hnsw_cache_size", None)
    return count if isinstance(count, int) else None


class Handles(OrderedDict[str, V]):
    """Collection handles by name, the least recently used dropped past ``limit``; not thread-safe."""

    def __init__(self, limit: int = MAX_HANDLES) -> None:
        super().__init__()
        self.limit = limit

    def get(self, name: str, default: Any = None) -> Any:
        """The handle of ``name``, now the most recently used."""
        found = super().get(name, default)
        if name in self:
            self.move_to_end(name)
        return found

    def __setitem__(self, name: str, handle: V) -> None:
        super().__setitem__(name, handle)
        self.move_to_end(name)
        while len(self) > self.limit:
            self.popitem(last=False)
