"""Hybrid retrieval: reciprocal rank fusion of dense and BM25 rankings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from personamem.records import Record
from personamem.retrieval.base import Hit, Retriever, ranked
from personamem.store.read import NOW, Read

__all__ = ["ADAPTER_FUSION", "PLAIN_RRF", "Fusion", "HybridRetriever", "reciprocal_rank_fusion"]


class Fusion(NamedTuple):
    """Hybrid's weighted RRF of a dense and a lexical ranking: the dense one's weight and RRF's k."""

    dense_weight: float
    """The dense ranking's weight; BM25's is 1 − it."""
    k: int
    """k in weight / (k + rank): 60 flattens the ranks, a small k lets the head of each list count."""

    @property
    def weights(self) -> tuple[float, float]:
        """(dense, lexical) weights, as :func:`reciprocal_rank_fusion` takes them."""
        return self.dense_weight, 1.0 - self.dense_weight


ADAPTER_FUSION = Fusion(0.8, 2)
"""Hybrid's fusion when the query goes through an adapter, and the fused score the learned ranker
starts from: chosen among weights 0.7–1.0 and k 2, 10, 60 on the benchmarks' training and validation
users (never the test users), as the setting whose worst change against the better of dense and
hybrid, over every benchmark and recall@5, recall@10 and nDCG@10, is largest (docs/RESULTS.md)."""
PLAIN_RRF = Fusion(0.5, 60)
"""Plain reciprocal rank fusion: equal weights, Cormack et al.'s k = 60."""


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

    def search(self, user_id: str, query: str, k: int, read: Read = NOW) -> list[Hit]:
        """The user's top ``k`` records by fused rank, of those ``read`` sees."""
        depth = max(k, self.depth)
        rankings = [r.search(user_id, query, depth, read) for r in self.retrievers]
        return ranked(reciprocal_rank_fusion(rankings, k_rrf=self.k_rrf, weights=self.weights)[:k])
