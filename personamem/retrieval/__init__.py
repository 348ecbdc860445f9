"""Retrievers over one user's records: dense, BM25 and their hybrid."""

from personamem.retrieval.base import Hit, Preparable, Retriever
from personamem.retrieval.bm25 import BM25Retriever
from personamem.retrieval.dense import DenseRetriever
from personamem.retrieval.hybrid import HybridRetriever, reciprocal_rank_fusion

__all__ = [
    "BM25Retriever",
    "DenseRetriever",
    "Hit",
    "HybridRetriever",
    "Preparable",
    "Retriever",
    "reciprocal_rank_fusion",
]
