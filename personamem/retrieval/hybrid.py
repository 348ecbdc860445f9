"""Hybrid retrieval: reciprocal rank fusion of dense and BM25 rankings."""

from __future__ import annotations

from collections.abc import Sequence

from personamem.records import Record
from personamem.retrieval.base import Hit, Retriever, ranked

__all__ = ["HybridRetriever", "reciprocal_rank_fusion"]


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[Hit]], *, k_rrf: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[Record, float]]:
    """Fuse rankings by sum of w / (k_rrf + rank) (Cormack et al., 2009); ties keep first-seen order.

    RRF needs no score calibration between methods, which cosine and BM25 scores lack; the weights
    (default: all equal) let a store's own evidence favour the ranking that serves it better.
    """
    weights = [1.0] * len(rankings) if weights is None else list(weights)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weight(s) for {len(rankings)} ranking(s)")
    fused: dict[str, tuple[Record, float]] = {}
    for hits, weight in zip(rankings, weights, strict=True):
        for hit in hits:
            record, score = fused.get(hit.record.id, (hit.record, 0.0))
            fused[hit.record.id] = (record, score + weight / (k_rrf + hit.rank))
    return sorted(fused.values(), key=lambda pair: pair[1], reverse=True)


class HybridRetriever:
    """Fuses several retrievers' top-``depth`` lists with (weighted) RRF and keeps the top ``k``."""

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        *,
        depth: int = 50,
        k_rrf: int = 60,
        weights: Sequence[float] | None = None,
    ) -> None:
        self.retrievers = list(retrievers)
        self.depth = depth
        self.k_rrf = k_rrf
        self.weights = None if weights is None else list(weights)

    def search(self, user_id: str, query: str, k: int) -> list[Hit]:
        """The user's top ``k`` records by fused rank."""
        depth = max(k, self.depth)
        rankings = [r.search(user_id, query, depth) for r in self.retrievers]
        return ranked(reciprocal_rank_fusion(rankings, k_rrf=self.k_rrf, weights=self.weights)[:k])
