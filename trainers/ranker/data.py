"""The ranker's training data: each question's candidates and features, computed by the runtime code.

A benchmark's corpus goes into a real store (:func:`~personamem.datasets.vectors.build_store`, as the
harness builds it); each question then runs what :class:`~personamem.retrieval.ranker.LearnedRanker`
runs at search time: the user's BM25 index and stored vectors as :class:`UserSignals`, the store
encoder's query vector and the adapter's, and :func:`candidate_features` with every record visible.
A candidate's label is the question's graded gold for it (0: not gold). Training and serving share
that code, so they cannot drift; the matrices are cached under a digest of everything they depend on.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.progress import Progress

from personamem.datasets.benchmark import Benchmark, Question
from personamem.datasets.vectors import build_store
from personamem.encoder import Encoder
from personamem.retrieval import bm25 as bm25_module
from personamem.retrieval import cues as cues_module
from personamem.retrieval import ranker as ranker_module
from personamem.retrieval import ranker_gate as ranker_gate_module
from personamem.retrieval.bm25 import BM25Retriever
from personamem.retrieval.query_adapter import QueryAdapter
from personamem.retrieval.ranker import FEATURES, UserSignals, candidate_features, inside_window, visible_rows
from personamem.retrieval.ranker_gate import PROFILE
from personamem.store import Store
from personamem.store.read import NOW

__all__ = ["FeatureSet", "benchmark_features", "default_features_dir", "store_features"]

DISCOUNT = 1.0 / np.log2(np.arange(2, 12))
"""nDCG@10's position discounts."""


@dataclass
class FeatureSet:
    """One benchmark's questions: candidate rows, features and labels, question by question.

    Attributes:
        source: the benchmark.
        features: ``(candidates, len(FEATURES))``, the questions' candidates one after the other.
        labels: each candidate's graded relevance (0: not gold).
        groups: candidates per question.
        users: the asking user of each question.
        questions: each question's id.
        ideal: each question's ideal DCG@10 from all of its gold (found among the candidates or not).
        relevant: each question's number of gold records (found among the candidates or not).
        profiles: the asking user's history shape (``(questions, len(PROFILE))``), which the gate reads.
        inside: 1 for a candidate written inside the window its question names, else 0: the
            default adds ``WINDOW_BOOST`` times it to the model's score (``ranker.inside_window``).
    """

    source: str
    features: np.ndarray
    labels: np.ndarray
    groups: np.ndarray
    users: np.ndarray
    questions: np.ndarray
    ideal: np.ndarray
    relevant: np.ndarray
    profiles: np.ndarray
    inside: np.ndarray

    def __len__(self) -> int:
        return len(self.groups)

    def only(self, users: Collection[str]) -> FeatureSet:
        """The questions of ``users``."""
        keep = np.isin(self.users, list(users))
        offsets = np.concatenate([[0], np.cumsum(self.groups)])
        rows = [np.arange(offsets[q], offsets[q + 1]) for q in np.flatnonzero(keep)]
        taken = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        return FeatureSet(
            self.source,
            self.features[taken],
            self.labels[taken],
            self.groups[keep],
            self.users[keep],
            self.questions[keep],
            self.ideal[keep],
            self.relevant[keep],
            self.profiles[keep],
            self.inside[taken],
        )

    @property
    def offsets(self) -> np.ndarray:
        """Where each question's candidates start in the rows, and (last) where they end."""
        return np.concatenate([[0], np.cumsum(self.groups)]).astype(np.int64)

    def user_profiles(self) -> dict[str, np.ndarray]:
        """Each asking user's history shape (one row of :data:`PROFILE` statistics)."""
        return {str(u): self.profiles[i] for i, u in enumerate(self.users)}

    def ndcg10(self, scores: np.ndarray) -> float:
        """Mean nDCG@10 of the candidates ordered by ``scores`` (one per row; ties keep row order)."""
        values, at = [], 0
        for n, ideal in zip(self.groups, self.ideal, strict=True):
            labels = self.labels[at : at + n]
            top = np.argsort(-scores[at : at + n], kind="stable")[:10]
            at += n
            gain = float(((2.0 ** labels[top] - 1) * DISCOUNT[: len(top)]).sum())
            values.append(gain / ideal if ideal > 0 else 0.0)
        return float(np.mean(values)) if values else float("nan")

    def save(self, path: Path) -> None:
        """Write the set to ``path`` (``.npz``), whole or not at all."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial.npz")
        np.savez_compressed(
            partial,
            features=self.features,
            labels=self.labels,
            groups=self.groups,
            users=self.users,
            questions=self.questions,
            ideal=self.ideal,
            relevant=self.relevant,
            profiles=self.profiles,
            inside=self.inside,
            names=np.array(FEATURES),
        )
        partial.replace(path)  # a crash mid-write must not leave a truncated cache entry

    @classmethod
    def load(cls, path: Path, source: str) -> FeatureSet:
        """A set written by :meth:`save`.

        Raises:
            KeyError: a set written before one of the fields existed (compute it again).
        """
        with np.load(path) as saved:
            return cls(
                source,
                saved["features"],
                saved["labels"],
                saved["groups"],
                saved["users"],
                saved["questions"],
                saved["ideal"],
                saved["relevant"],
                saved["profiles"],
                saved["inside"],
            )


def default_features_dir() -> Path:
    """``ranker-features`` in the user cache (see ``$PERSONAMEM_CACHE``), beside the corpus vectors."""
    from personamem.llm.packaged import default_cache_dir

    return default_cache_dir() / "ranker-features"


def benchmark_features(
    benchmark: Benchmark,
    source: str,
    encoder: Encoder,
    adapter: QueryAdapter,
    *,
    features_dir: Path,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> tuple[FeatureSet, bool]:
    """Every gold-labelled question of ``benchmark`` as candidates, features and labels.

    Read from ``features_dir`` when the same data, encoder, adapter and feature code were seen
    (the second value says so); otherwise computed over a temporary store and written there.
    """
    path = features_dir / f"{source}-{_digest(benchmark, encoder, adapter)[:24]}.npz"
    if path.is_file():
        try:
            return FeatureSet.load(path, source), True
        except KeyError:  # written by an older version, without a field this one keeps
            pass
    with tempfile.TemporaryDirectory(prefix="personamem-ranker-") as folder:
        store = build_store(benchmark, Path(folder), encoder, cache_dir=cache_dir, progress=progress)
        try:
            found = store_features(store, benchmark.questions, source, adapter, progress=progress)
        finally:
            store.close()
    found.save(path)
    return found, False


def store_features(
    store: Store,
    questions: Sequence[Question],
    source: str,
    adapter: QueryAdapter,
    *,
    progress: Progress | None = None,
) -> FeatureSet:
    """The features of the gold-labelled ``questions`` of ``store``'s users, computed as served."""
    bm25 = BM25Retriever(store)
    owners = set(store.users())
    questions = [q for q in questions if q.user_id in owners and any(g > 0 for g in q.relevant.values())]
    dim = store.encoder.dim
    base = (
        np.asarray(store.encoder.encode([q.text for q in questions]), np.float32)
        if questions
        else np.zeros((0, dim), np.float32)
    )
    adapted = adapter.transform(base) if len(base) else base
    task = progress.add_task(f"{source}: features", total=len(questions)) if progress else None
    signals: dict[str, tuple[UserSignals, np.ndarray]] = {}
    features, labels, groups, kept, profiles, inside = [], [], [], [], [], []
    for i, question in enumerate(questions):
        if question.user_id not in signals:  # what LearnedRanker reads at search time
            user = UserSignals.of(store, bm25.index(question.user_id), question.user_id)
            signals[question.user_id] = (user, visible_rows(store, question.user_id, user.index.records, NOW))
        user, visible = signals[question.user_id]
        records = user.index.records
        if progress is not None and task is not None:
            progress.advance(task)
        if not visible.any():  # every record hidden at the read time in force: nothing to rank
            continue
        rows, matrix, _ = candidate_features(user, question.text, base[i], adapted[i], visible)
        kept.append(question)
        profiles.append([user.profile[name] for name in PROFILE])
        features.append(matrix)
        inside.append(inside_window(user, rows, question.text, NOW))
        labels.append(np.array([question.relevant.get(records[r].id, 0) for r in rows], np.float32))
        groups.append(len(rows))
    ideal = [_ideal_dcg(list(q.relevant.values())) for q in kept]
    return FeatureSet(
        source,
        np.concatenate(features) if features else np.zeros((0, len(FEATURES)), np.float32),
        np.concatenate(labels) if labels else np.zeros(0, np.float32),
        np.array(groups, dtype=np.int64),
        np.array([q.user_id for q in kept], dtype=str),
        np.array([q.id for q in kept], dtype=str),
        np.array(ideal, dtype=np.float64),
        np.array([sum(g > 0 for g in q.relevant.values()) for q in kept], dtype=np.int64),
        np.array(profiles, dtype=np.float32).reshape(len(kept), len(PROFILE)),
        np.concatenate(inside) if inside else np.zeros(0, np.float32),
    )


def _ideal_dcg(grades: list[float]) -> float:
    """DCG@10 of the best order of ``grades``: what a question's nDCG@10 divides by."""
    best = np.array(sorted(grades, reverse=True)[:10], dtype=np.float64)
    return float(((2.0**best - 1) * DISCOUNT[: len(best)]).sum())


def _digest(benchmark: Benchmark, encoder: Encoder, adapter: QueryAdapter) -> str:
    """Everything the features depend on: data, encoder, adapter weights, the feature and BM25 code."""
    digest = hashlib.sha256(encoder.name.encode())
    digest.update(np.ascontiguousarray(adapter.weight).tobytes())
    for module in (ranker_module, ranker_gate_module, cues_module, bm25_module):
        digest.update(Path(str(module.__file__)).read_bytes())
    for record in benchmark.records:
        role, session = str(record.metadata.get("role", "")), record.session
        digest.update(
            json.dumps([record.user_id, record.id, record.text, record.kind.value, role, session]).encode()
        )
    for question in benchmark.questions:
        digest.update(json.dumps([question.id, question.user_id, question.text, question.relevant]).encode())
    return digest.hexdigest()
