"""Hybrid retrieval: reciprocal rank fusion of dense and BM25 rankings."""

from __future__ import annotations

from collections.abc import Sequence

from personamem.records import Record
from personamem.retrieval.base import Hit, Retriever, ranked

__all__ = ["HybridRetriever", "reciprocal_rank_fusion"]


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Hit]], *, k_rrf: int = 60
) -> list[tuple[Record, float]]:
    """Fuse rankings by sum of 1 / (k_rrf + rank) (Cormack et al., 2009); ties keep first-seen order.

    RRF needs no score calibration between methods, which cosine and BM25 scores lack.
    """
    fused: dict[str, tuple[Record, float]] = {}
    for hits in rankings:
        for hit in hits:
            record, score = fused.get(hit.record.id, (hit.record, 0.0))
            fused[hit.record.id] = (record, score + 1.0 / (k_rrf + hit.rank))
    return sorted(fused.values(), key=lambda pair: pair[1], reverse=True)


class HybridRetriever:
    """Fuses several retrievers' top-``depth`` lists with RRF and keeps the top ``k``."""

    def __init__(self, retrievers: Sequence[Retriever], *, depth: int = 50, k_rrf: int = 60) -> None:
        self.retrievers = list(retrievers)
        self.depth = depth
        self.k_rrf = k_rrf

    def search(self, user_id: str, query: str, k: int) -> list[Hit]:
        """The user's top ``k`` records by fused rank."""
        depth = max(k, self.depth)
        rankings = [r.search(user_id, query, depth) for r in self.retrievers]
        return ranked(reciprocal_rank_fusion(rankings, k_rrf=self.k_rrf)[:k])
