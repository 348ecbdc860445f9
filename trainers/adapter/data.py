"""The adapter's training data: (query vector, gold records) over each user's fixed record vectors.

Every source, a benchmark's gold labels, a store's synthetic queries or its logged feedback, becomes
the same :class:`QuerySet`: base query vectors, the user each was asked by, and the rows of that
user's records that answer it. Training scores a query against all of its own user's records
(the in-user softmax), which is exactly the choice retrieval makes. Users, never questions, are
split (:meth:`~personamem.datasets.UserSplit.by_share`): held-out users are never trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from personamem.datasets.benchmark import Benchmark
from personamem.datasets.vectors import corpus_vectors
from personamem.encoder import Encoder

__all__ = ["QuerySet", "query_set_from_benchmark"]


@dataclass
class QuerySet:
    """Queries with their gold records over their users' record vectors.

    Attributes:
        source: where the queries came from (a benchmark name, ``synthetic``, ``feedback``).
        users: the asking user of each query.
        queries: ``(n, dim)`` base query vectors (the store encoder's, before any adapter).
        gold: per query, the rows of its user's corpus that answer it.
        corpora: user -> ``(records, dim)`` unit record vectors, as the store holds them.
        texts: the query texts (kept for reports and for ranking through a real store).
        record_ids: user -> record ids in corpus row order.
        asked: for synthetic questions, how many the LLM was asked to write (the rest were refused).
    """

    source: str
    users: list[str]
    queries: np.ndarray
    gold: list[np.ndarray]
    corpora: dict[str, np.ndarray]
    texts: list[str] = field(default_factory=list)
    record_ids: dict[str, list[str]] = field(default_factory=dict)
    asked: int = 0

    def __len__(self) -> int:
        return len(self.users)

    def only(self, users: Sequence[str]) -> QuerySet:
        """The queries of ``users`` (and their corpora)."""
        keep = set(users)
        taken = self.take([i for i, user in enumerate(self.users) if user in keep])
        taken.corpora = {u: c for u, c in self.corpora.items() if u in keep}
        taken.record_ids = {u: ids for u, ids in self.record_ids.items() if u in keep}
        return taken

    def take(self, rows: Sequence[int]) -> QuerySet:
        """The queries at ``rows``, over the same corpora."""
        return QuerySet(
            self.source,
            [self.users[i] for i in rows],
            self.queries[list(rows)],
            [self.gold[i] for i in rows],
            self.corpora,
            [self.texts[i] for i in rows] if self.texts else [],
            self.record_ids,
        )

    def describe(self) -> dict[str, Any]:
        """Counts for ``adapter.json`` and the training table."""
        return {"source": self.source, "queries": len(self), "users": len(set(self.users))}


def query_set_from_benchmark(
    benchmark: Benchmark, encoder: Encoder, *, source: str, cache_dir: Path | None = None
) -> QuerySet:
    """Every question with gold records, embedded by ``encoder``; record vectors through the cache."""
    vectors = corpus_vectors(encoder, [r.text for r in benchmark.records], cache_dir)
    rows_of: dict[str, list[int]] = {}
    record_ids: dict[str, list[str]] = {}
    for row, record in enumerate(benchmark.records):
        rows_of.setdefault(record.user_id, []).append(row)
        record_ids.setdefault(record.user_id, []).append(record.id)
    stacked = {u: np.asarray(vectors[rows], dtype=np.float32) for u, rows in rows_of.items()}
    index = {u: {record_id: i for i, record_id in enumerate(ids)} for u, ids in record_ids.items()}
    users, texts, gold = [], [], []
    for question in benchmark.questions:
        rows = index.get(question.user_id, {})
        hits = [rows[r] for r, grade in question.relevant.items() if grade > 0 and r in rows]
        if hits:
            users.append(question.user_id)
            texts.append(question.text)
            gold.append(np.asarray(sorted(set(hits)), dtype=np.int64))
    queries = corpus_vectors(encoder, texts, cache_dir) if texts else np.zeros((0, encoder.dim), "float32")
    return QuerySet(source, users, np.asarray(queries, "float32"), gold, stacked, texts, record_ids)
