"""Profile selection: which of a user's candidate records the LLM sees for a query, and in what order.

A first-stage retriever proposes candidates; a :class:`ProfileSelector` picks and orders the K that
become the profile in the prompt. :class:`RelevanceSelector` (cosine to the query) is the default;
PURPLE is a learned selector behind the same seam. Candidates are records rather than store ids, so a
selector also works on documents that came from another framework's retriever.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from personamem.encoder import Encoder
from personamem.records import Record
from personamem.retrieval.base import Hit, ranked

__all__ = ["ProfileSelector", "RelevanceSelector"]


@runtime_checkable
class ProfileSelector(Protocol):
    """Picks and orders up to ``k`` of a user's candidate records to form the profile for ``query``."""

    def select(self, user_id: str, query: str, candidates: Sequence[Record], k: int) -> list[Hit]:
        """The profile, best first; every hit is one of ``candidates``."""
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
