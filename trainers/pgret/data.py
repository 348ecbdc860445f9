"""PG-Ret's training data: logged (query, gold records) pairs over users' fixed record vectors.

Each user's records are embedded once by the record encoder and never change (only the query tower
learns). For every query the base model's top-L (what counts as already found, for novelty) and
BM25's top records (the exploration retriever) are computed once through a real store, so training
samples pairs without searching again. Splits are by user: test users are never trained on.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.progress import Progress

from personamem.datasets.benchmark import Benchmark
from personamem.datasets.traffic import Traffic, accepted
from personamem.datasets.vectors import corpus_vectors
from personamem.encoder import Encoder

__all__ = [
    "LoggedQuery",
    "PGRetData",
    "UserCorpus",
    "data_from_benchmark",
    "data_from_traffic",
]


@dataclass(frozen=True)
class LoggedQuery:
    """A query with the records it was answered from, and what the base retrievers return for it.

    Attributes:
        base_top: ids of the base dense model's top-L records (novelty is measured against them).
        bm25_top: ids of BM25's top records (the exploration pool).
    """

    id: str
    user_id: str
    text: str
    gold: tuple[str, ...]
    base_top: tuple[str, ...]
    bm25_top: tuple[str, ...]


@dataclass(frozen=True)
class UserCorpus:
    """One user's records: ids, texts and their fixed unit vectors (row i is record i)."""

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    vectors: np.ndarray

    def index(self) -> dict[str, int]:
        """Record id -> row."""
        return {record_id: i for i, record_id in enumerate(self.ids)}


@dataclass(frozen=True)
class PGRetData:
    """Queries and the corpora of their users."""

    queries: tuple[LoggedQuery, ...]
    corpora: dict[str, UserCorpus]

    @property
    def users(self) -> list[str]:
        """The users who asked a query, sorted."""
        return sorted({q.user_id for q in self.queries})

    def only(self, users: Sequence[str]) -> PGRetData:
        """The queries and corpora of ``users``."""
        keep = set(users)
        return PGRetData(
            tuple(q for q in self.queries if q.user_id in keep),
            {u: c for u, c in self.corpora.items() if u in keep},
        )


def data_from_benchmark(
    benchmark: Benchmark,
    encoder: Encoder,
    *,
    novelty_depth: int = 20,
    exploration_depth: int = 20,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> PGRetData:
    """Every question with gold records, its base dense top-``novelty_depth`` and BM25's top records.

    Both rankings come from a temporary store holding the benchmark's corpus, searched as an
    application would search it.
    """
    from personamem.datasets.vectors import build_store
    from personamem.retrieval import BM25Retriever, DenseRetriever

    corpora: dict[str, UserCorpus] = {}
    by_user: dict[str, list[tuple[str, str]]] = {}
    for record in benchmark.records:
        by_user.setdefault(record.user_id, []).append((record.id, record.text))
    for user, rows in by_user.items():
        texts = [text for _, text in rows]
        corpora[user] = UserCorpus(
            tuple(i for i, _ in rows), tuple(texts), corpus_vectors(encoder, texts, cache_dir)
        )
    asked = [q for q in benchmark.questions if q.relevant and q.user_id in corpora]
    queries = []
    with tempfile.TemporaryDirectory(prefix="personamem-pgret-") as tmp:
        store = build_store(benchmark, Path(tmp) / "store", encoder, cache_dir=cache_dir, progress=progress)
        try:
            dense, bm25 = DenseRetriever(store), BM25Retriever(store)
            vectors = encoder.encode([q.text for q in asked])
            task = progress.add_task("base rankings", total=len(asked)) if progress else None
            for question, vector in zip(asked, vectors, strict=True):
                base = dense.search_vector(question.user_id, vector, novelty_depth)
                lexical = bm25.search(question.user_id, question.text, exploration_depth)
                queries.append(
                    LoggedQuery(
                        question.id,
                        question.user_id,
                        question.text,
                        tuple(question.relevant),
                        tuple(h.record.id for h in base),
                        tuple(h.record.id for h in lexical),
                    )
                )
                if progress is not None and task is not None:
                    progress.advance(task)
        finally:
            store.close()
    return PGRetData(
        tuple(queries), {u: c for u, c in corpora.items() if any(q.user_id == u for q in queries)}
    )


def data_from_traffic(
    traffic: Traffic,
    *,
    novelty_depth: int = 20,
    exploration_depth: int = 20,
    min_rating: float | None = None,
    progress: Progress | None = None,
) -> PGRetData:
    """A logged query per interaction whose feedback names the records the answer used.

    The corpora are the store's own record vectors (the ones a trained tower is searched against),
    and the base rankings come from the store's dense and BM25 retrievers. Used records deleted
    since are dropped; an interaction left with none is skipped.
    """
    from personamem.retrieval import BM25Retriever, DenseRetriever

    store = traffic.store
    usable = [i for i in traffic.interactions if accepted(i, min_rating) and i.used]
    corpora: dict[str, UserCorpus] = {}
    for user in sorted({i.user_id for i in usable}):
        records, vectors = store.vectors(user)
        if records:
            corpora[user] = UserCorpus(
                tuple(r.id for r in records), tuple(r.text for r in records), np.asarray(vectors, "float32")
            )
    dense, bm25 = DenseRetriever(store), BM25Retriever(store)
    queries = []
    task = progress.add_task("base rankings", total=len(usable)) if progress else None
    for interaction in usable:
        corpus = corpora.get(interaction.user_id)
        rows = corpus.index() if corpus is not None else {}
        gold = tuple(r for r in interaction.used if r in rows)
        if gold:
            base = dense.search(interaction.user_id, interaction.query, novelty_depth)
            lexical = bm25.search(interaction.user_id, interaction.query, exploration_depth)
            queries.append(
                LoggedQuery(
                    interaction.id,
                    interaction.user_id,
                    interaction.query,
                    gold,
                    tuple(h.record.id for h in base),
                    tuple(h.record.id for h in lexical),
                )
            )
        if progress is not None and task is not None:
            progress.advance(task)
    return PGRetData(
        tuple(queries), {u: c for u, c in corpora.items() if any(q.user_id == u for q in queries)}
    )
