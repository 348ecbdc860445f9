"""Methods the harness can evaluate: named recipes that build a retriever over a store.

A method is a pipeline behind the :class:`~personamem.retrieval.Retriever` seam: the first-stage
retrievers today; a query personalizer (PBR) or profile selector (PURPLE) wraps one and is still a
retriever, so every method runs through the same command and metrics. ``build`` takes the seed so a
stochastic method is rebuilt per seed; a deterministic one is run once, and reported as such rather
than as several identical runs with a standard deviation of zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from personamem.retrieval import BM25Retriever, DenseRetriever, HybridRetriever, Retriever
from personamem.store import Store

__all__ = ["BM25", "DENSE", "FIRST_STAGE", "HYBRID", "Method"]


@dataclass(frozen=True)
class Method:
    """A named way to rank a user's records for a question.

    Attributes:
        name: how reports and ``--method`` call it.
        build: makes the retriever for one seed over the evaluation store.
        stochastic: whether results depend on the seed (LLM sampling, random policies).
    """

    name: str
    build: Callable[[Store, int], Retriever]
    stochastic: bool = False


DENSE = Method("dense", lambda store, seed: DenseRetriever(store))
BM25 = Method("bm25", lambda store, seed: BM25Retriever(store))
HYBRID = Method("hybrid", lambda store, seed: HybridRetriever([DenseRetriever(store), BM25Retriever(store)]))
FIRST_STAGE = {method.name: method for method in (DENSE, BM25, HYBRID)}
"""The first-stage retrievers by name, for the CLI."""
