"""Choice instances: a user's history, a request and five candidates of which one is the user's.

MemRerank's unit of evaluation and of reward. Each benchmark module that has them gives a ``choices``
reader (listed in :data:`personamem.datasets.DATASETS`); the candidates are stored with the positive
first, and the harness and the trainer show them in a seeded order
(:func:`personamem.preference.setwise.shuffled`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from personamem.records import Record

if TYPE_CHECKING:
    from personamem.encoder import Encoder

__all__ = ["ChoiceInstance", "ChoiceNeeds", "Part", "split_users"]

Part = Literal["train", "val", "test"]
"""Which side of a benchmark's own split to read: a trainer reads ``train``, the harness ``test``."""


@dataclass(frozen=True)
class ChoiceNeeds:
    """What building choices may need besides the data: most readers use none of it.

    Attributes:
        encoder: embeds texts where negatives are chosen by similarity.
        cache_dir: the corpus vector cache (None: no cache).
        part: the benchmark's own split to read, where it ships one (Amazon Beauty's files).
    """

    encoder: Encoder
    cache_dir: Path | None = None
    part: Part = "test"


@dataclass(frozen=True)
class ChoiceInstance:
    """One 1-in-n choice for one user.

    Attributes:
        id: unique within its benchmark.
        user_id: whose history.
        history: the user's records the memory is built from (oldest first).
        query: the request ("" when the benchmark has none).
        candidates: candidate texts, the user's (positive) one first.
        category: the category of the target (the within-category memory's section).
        group: what the held-out split is over (the user, or PrefEval's topic).
    """

    id: str
    user_id: str
    history: tuple[Record, ...]
    query: str
    candidates: tuple[str, ...]
    category: str
    group: str


def split_users(groups: Sequence[str], *, test_fraction: float = 0.3) -> tuple[set[str], set[str]]:
    """A fixed train/test split of group names by hash (the same split in every run and process)."""

    def bucket(group: str) -> float:
        return int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF

    distinct = set(groups)
    test = {g for g in distinct if bucket(g) < test_fraction}
    return distinct - test, test
