"""One memory budget per store for what it keeps per user, so a process that met many users stays bounded.

Three things grow with the users a process has touched: the copies of their vectors
(``store/views.py``), the values derived from their records (BM25 indexes, the learned ranker's
signals, P-Anchor vectors, filter indexes: ``store/cache.py``), and, with the embedded Chroma, the
HNSW index of every collection it loaded (``store/chroma_memory.py``). ``PERSONAMEM_CACHE_MB`` is
their sum, per store (a process opens one); unset, it is a sixteenth of the machine's memory (or of
the container's limit), between 256 MiB and 4 GiB.

The split. Chroma counts loaded collections, not bytes, so its share is a count: a fifth of the
budget at :data:`COLLECTION_BYTES` each, and never under :data:`MIN_COLLECTIONS`, which it keeps
anyway; what that count costs comes off the top. Of the rest, two fifths bound the vector copies
and three fifths the derived values, which are larger per user (at 200 records: a user's vectors
about 0.4 MiB, its BM25 index and ranker signals about 3.5 MiB as estimated). Without an embedded
Chroma (a Chroma server, pgvector) the rest is the whole budget.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from personamem.settings import settings

__all__ = ["COLLECTION_BYTES", "MIN_COLLECTIONS", "MemoryBudget", "machine_bytes"]

MIB = 1 << 20
FLOOR = 256 * MIB
CEILING = 4096 * MIB
MACHINE_SHARE = 16  # the default budget is the machine's memory over this
COLLECTION_BYTES = 3 * MIB
"""One collection loaded by the embedded Chroma 1.5.9 at 384 dimensions (measured: 2.6 MiB at 20
vectors, 2.9 MiB at 200, 4.4 MiB at 1,000: its HNSW reserves room before it fills)."""
MIN_COLLECTIONS = 64
"""Collections the embedded Chroma keeps loaded whatever its capacity: its cache has 64 shards and
each keeps its newest entry (measured: capacities 1, 32 and 64 held the same memory)."""
CHROMA_SHARE = 0.2
VIEWS_SHARE = 0.4  # of what Chroma leaves; the derived values get the other 0.6
MIN_SHARE = MIB  # the least each cache gets, however small the budget


@dataclass(frozen=True)
class MemoryBudget:
    """Bytes for the vector copies and for the derived values, and Chroma's count of loaded collections."""

    total: int
    views: int
    derived: int
    chroma_collections: int  # 0: no embedded Chroma to bound

    @classmethod
    def split(cls, total: int, *, embedded: bool) -> MemoryBudget:
        """``total`` bytes shared out as the module says; ``embedded``: the store runs Chroma in-process."""
        collections = max(MIN_COLLECTIONS, int(total * CHROMA_SHARE) // COLLECTION_BYTES) if embedded else 0
        rest = max(total - collections * COLLECTION_BYTES, 2 * MIN_SHARE)
        views = max(int(rest * VIEWS_SHARE), MIN_SHARE)
        return cls(total, views, max(rest - views, MIN_SHARE), collections)

    @classmethod
    def configured(cls, *, embedded: bool) -> MemoryBudget:
        """The budget ``PERSONAMEM_CACHE_MB`` sets, else the machine's default."""
        mb = settings().cache_mb
        return cls.split(mb * MIB if mb is not None else default_bytes(), embedded=embedded)


def default_bytes() -> int:
    """A sixteenth of :func:`machine_bytes`, between 256 MiB and 4 GiB."""
    return min(max(machine_bytes() // MACHINE_SHARE, FLOOR), CEILING)


def machine_bytes() -> int:
    """The memory this process may use: the machine's, or its cgroup's limit if lower (a container)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): assume a small machine
        physical = FLOOR * MACHINE_SHARE
    for limit in (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")):
        try:
            text = limit.read_text(encoding="ascii").strip()
        except OSError:
            continue
        if text.isdigit():
            physical = min(physical, int(text))
    return physical
