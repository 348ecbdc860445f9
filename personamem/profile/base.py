"""Profile selection: which of a user's candidate records the LLM sees for a query, and in what order.

A first-stage retriever proposes candidates; a :class:`ProfileSelector` picks and orders the K that
become the profile in the prompt. :class:`RelevanceSelector` (cosine to the query) is the default;
PURPLE is a learned selector behind the same seam. Candidates are records rather than store ids, so a
selector also works on documents that came from another framework's retriever.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

import numpy as np

from personamem.encoder import Encoder
from personamem.records import Record
from personamem.retrieval.base import Hit, ranked

__all__ = [
    "EarliestSelector",
    "ProfileSelector",
    "QueryVectorSelector",
    "RandomSelector",
    "RelevanceSelector",
]


@runtime_checkable
class ProfileSelector(Protocol):
    """Picks and orders up to ``k`` of a user's candidate records to form the profile for ``query``."""

    def select(self, user_id: str, query: str, candidates: Sequence[Record], k: int) -> list[Hit]:
        """The profile, best first; every hit is one of ``candidates``."""
        ...


@runtime_checkable
class QueryVectorSelector(ProfileSelector, Protocol):
    """A selector that can take the query's vector from the first stage instead of encoding it again.

    The pipeline passes ``vector`` only when it is the store encoder's own encoding of ``query`` (no
    personalizer, no query tower), so it means what the selector would have computed.
    """

    def select_with_vector(
        self, user_id: str, query: str, vector: np.ndarray, candidates: Sequence[Record], k: int
    ) -> list[Hit]:
        """As :meth:`select`, with the query already encoded."""
        ...


class RelevanceSelector:
    """The top ``k`` candidates by cosine between their text and the query (the baseline to beat)."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder

    def select(self, user_id: str, query: str, candidates: Sequence[Record], k: int) -> list[Hit]:
        """Candidates re-scored by the encoder, whatever order or scores they came with."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if not candidates:
            return []
        vectors = self.encoder.encode([query, *(record.text for record in candidates)])
        scores = vectors[1:] @ vectors[0]
        order = np.argsort(-scores, kind="stable")[:k]
        return ranked([(candidates[i], float(scores[i])) for i in order])


class RandomSelector:
    """``k`` candidates drawn uniformly, in random order (a floor for learned selection).

    The draw depends on the seed, the user and the query only, so a question gets the same profile
    however often it is asked.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def select(self, user_id: str, query: str, candidates: Sequence[Record], k: int) -> list[Hit]:
        """A seeded sample of the candidates."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        digest = hashlib.sha256(json.dumps([self.seed, user_id, query]).encode()).digest()
        picked = random.Random(digest).sample(range(len(candidates)), min(k, len(candidates)))
        return ranked([(candidates[i], 0.0) for i in picked])


class EarliestSelector:
    """The ``k`` earliest candidates in the user's history (by timestamp, then record order).

    Candidates without a timestamp come after those with one, in the order given.
    """

    def select(self, user_id: str, query: str, candidates: Sequence[Record], k: int) -> list[Hit]:
        """The oldest candidates first."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        order = sorted(
            range(len(candidates)),
            key=lambda i: (candidates[i].timestamp is None, candidates[i].timestamp or datetime.min, i),
        )
        return ranked([(candidates[i], 0.0) for i in order[:k]])
