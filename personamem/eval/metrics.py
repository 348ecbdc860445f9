"""Retrieval metrics: ranx for the standard ones, plus PersonaBench's own protocol.

Rankings are lists of record ids, best first. ranx sorts a run by score, so each ranking is handed to
it with rank-derived scores: the metric then sees exactly the order the method produced, ties and all.

PersonaBench's protocol (upstream ``scripts/evaluation/eval.py``, used for the PBR paper's numbers)
differs from the ranx one in two ways: a question's gold is one supporting session per answer value,
chosen to maximize the metric (recall and nDCG maximized separately), and Subjective questions are
left out. Both are reported, named, so numbers are never compared across protocols by accident.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from personamem.datasets.benchmark import Question

__all__ = [
    "PERSONABENCH_EXCLUDED",
    "novelty_at_k",
    "personabench_category",
    "personabench_scores",
    "ranx_scores",
]

PERSONABENCH_EXCLUDED = frozenset({"Subjective"})
"""Question types PersonaBench's own evaluation leaves out."""


def ranx_scores(
    questions: Sequence[Question], rankings: Mapping[str, Sequence[str]], metrics: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Per-question scores for ranx metric names (``"recall@5"``, ``"ndcg@10"``, ``"mrr"``...).

    Args:
        questions: scored questions; each must have at least one relevant record.
        rankings: question id -> ranked record ids (a question without a ranking scores 0).
        metrics: ranx metric names.

    Returns:
        metric -> question id -> score.

    Raises:
        ValueError: a question has no relevant record (ranx would score it 0 and hide the cause).
    """
    from numba.core.errors import NumbaTypeSafetyWarning
    from ranx import Qrels, Run, evaluate

    empty = [q.id for q in questions if not q.relevant]
    if empty:
        raise ValueError(f"{len(empty)} questions have no relevant record, e.g. {empty[:3]}; skip them first")
    ranked = {
        q.id: {record_id: float(len(ids) - i) for i, record_id in enumerate(ids)}
        for q in questions
        if (ids := list(dict.fromkeys(rankings.get(q.id, ()))))
    }
    with _kernels_once(metrics), warnings.catch_warnings():  # Qrels and Run run numba kernels too
        # ranx's nDCG casts uint64 counts to int64 inside numba; harmless at our sizes, and noisy
        warnings.simplefilter("ignore", NumbaTypeSafetyWarning)
        qrels = Qrels({q.id: dict(q.relevant) for q in questions})
        run = Run(ranked).make_comparable(qrels)
        evaluate(qrels, run, list(metrics), return_mean=False, save_results_in_run=True)
    _EVALUATED.update(metrics)
    return {metric: {qid: float(score) for qid, score in run.scores[metric].items()} for metric in metrics}


_EVALUATED: set[str] = set()
"""Metrics this process has evaluated: their numba kernels are compiled or loaded."""


@contextmanager
def _kernels_once(metrics: Sequence[str]) -> Iterator[None]:
    """Hold a machine-wide lock around an evaluation with metrics new to this process.

    A metric's first evaluation compiles ranx's numba kernels (about 40 s of CPU for the default
    metrics, on a fresh install) or loads them from numba's cache. Evaluations that start together
    (a test suite's workers, parallel ``eval`` runs) each compiled them before; now one compiles while
    the others wait, then load what it cached. Without a writable user cache, nothing is shared.
    """
    if set(metrics) <= _EVALUATED:
        yield
        return
    from filelock import FileLock

    from personamem.user_cache import default_cache_dir

    try:
        folder = default_cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(folder / "ranx-numba.lock"))
        lock.acquire()
    except OSError:
        yield
        return
    try:
        yield
    finally:
        lock.release()


def novelty_at_k(ranking: Sequence[str], base_top: Sequence[str], k: int) -> float:
    """Share of the ranking's top ``k`` that the base model's top-L (``base_top``) does not hold.

    Novelty alone rewards any change, relevant or not: read it beside a precision. ``k`` is the
    denominator even for a shorter ranking, so returning fewer records is not more novel.

    Raises:
        ValueError: ``k`` below 1.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    known = set(base_top)
    return sum(record_id not in known for record_id in list(ranking)[:k]) / k


def personabench_category(question: Question) -> str:
    """Upstream's breakdown label: difficulty counts only for Preference questions."""
    difficulty = question.attributes.get("difficulty") if question.category == "Preference" else "easy"
    return f"{question.category} ({difficulty})"


def personabench_scores(
    questions: Sequence[Question], rankings: Mapping[str, Sequence[str]], k: int
) -> dict[str, dict[str, float]]:
    """PersonaBench's recall@k and nDCG@k per question, Subjective questions left out.

    Each question's ``gold_groups`` hold the interchangeable sessions per answer value; every choice
    of one session per value is a candidate gold set and the best one counts, separately for recall
    and nDCG (so the two may come from different choices). Binary gains, log2 discounts.

    Returns:
        ``{"pb_recall@k": {qid: score}, "pb_ndcg@k": {qid: score}}``.

    Raises:
        ValueError: a question lacks ``gold_groups`` (this protocol needs them).
    """
    recall: dict[str, float] = {}
    ndcg: dict[str, float] = {}
    for question in questions:
        if question.category in PERSONABENCH_EXCLUDED:
            continue
        if not question.gold_groups:
            raise ValueError(
                f"question {question.id} has no gold_groups; the PersonaBench protocol needs them"
            )
        top = list(rankings.get(question.id, ()))[:k]
        best_recall = best_ndcg = 0.0
        for choice in itertools.product(*question.gold_groups):
            gold = set(choice)
            best_recall = max(best_recall, len(gold.intersection(top)) / len(gold))
            best_ndcg = max(best_ndcg, _ndcg(top, gold, k))
        recall[question.id] = best_recall
        ndcg[question.id] = best_ndcg
    return {f"pb_recall@{k}": recall, f"pb_ndcg@{k}": ndcg}


def _ndcg(top: Sequence[str], gold: set[str], k: int) -> float:
    dcg = sum(1 / math.log2(rank + 2) for rank, record_id in enumerate(top) if record_id in gold)
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(gold), k)))
    return dcg / ideal
